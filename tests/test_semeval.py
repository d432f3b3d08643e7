"""SemEval sentiment data: the six test sets as SOURCE.md counts them, the text quirks, the metric."""
import pytest

from recdrop.data import data_root
from recdrop.data.semeval import (TEST_SETS, Message, clean_text, distant_label, load_semeval, repeats_note, semeval_f1,
                                  tokenize)

needs_semeval = pytest.mark.skipif(not (data_root() / "semeval").exists(), reason="SemEval data not available")


def test_semeval_f1_on_a_hand_computed_case():
    true = ["positive", "positive", "negative", "neutral", "negative", "neutral"]
    pred = ["positive", "negative", "negative", "positive", "neutral", "neutral"]
    # positive: tp 1, fp 1, fn 1 -> F1 1/2; negative: tp 1, fp 1, fn 1 -> F1 1/2; neutral is not averaged
    assert semeval_f1(true, pred) == pytest.approx(50.0)
    assert semeval_f1(["positive", "negative"], ["positive", "negative"]) == 100.0
    with pytest.raises(ValueError, match="same length"):
        semeval_f1(true, pred[:2])


def test_text_quirks_are_repaired():
    assert clean_text('"a, b ""c"""') == 'a, b "c"'
    assert clean_text("shit\\u002c watch I\\u2019m") == "shit, watch I\u2019m"
    assert clean_text("A &amp; B &lt;3") == "A & B <3"
    assert clean_text("M\u00c3\u00bcnchen") == "M\u00fcnchen"  # double-encoded UTF-8


def test_distant_supervision_from_emoticons():
    assert distant_label("great day :) :D").label == "positive"
    assert distant_label("great day :) :D").text == "great day"
    assert distant_label("missed the bus :(").label == "negative"
    assert distant_label("mixed :) :(") is None and distant_label("no emoticon") is None


def test_tweet_tokenizer():
    assert tokenize("@bob Sooooo happy :) #win") == ["@bob", "sooo", "happy", ":)", "#win"]


@needs_semeval
def test_semeval_sets_match_source_statistics():
    d = load_semeval()
    assert list(d.tests) == list(TEST_SETS)  # the paper's column order
    assert {k: len(v) for k, v in d.tests.items()} == {"Twitter13": 3545, "LiveJournal14": 1142, "Twitter15": 2379,
                                                        "Twitter14": 1853, "SMS13": 2093, "Sarcasm14": 86}
    test_ids = {m.id for v in d.tests.values() for m in v}
    assert not test_ids & {m.id for m in d.train + d.valid}
    assert len({m.id for m in d.train}) == len(d.train) and "Twitter13" in d.notes
    # Twitter15's file lists 11 tweets twice, 4 of them with two labels: Table 5's note says so
    assert d.notes["Twitter15"].startswith("its file lists 11 tweets more than once (4 with different labels)")
    assert {m.label for m in d.train} == {"positive", "neutral", "negative"}


def test_a_test_sets_note_counts_its_repeated_tweets_and_those_labelled_twice_differently():
    rows = [Message("1", "a", "positive"), Message("2", "b", "neutral"), Message("1", "a", "negative"),
            Message("3", "c", "neutral"), Message("2", "b", "neutral")]
    kept = [rows[0], rows[1], rows[3]]
    assert repeats_note(rows, kept) == ("its file lists 2 tweets more than once (1 with different labels): each is "
                                        "scored once, with its first row's label")


def test_table_5s_notes_come_from_the_data_and_without_it_name_the_known_gaps(monkeypatch):
    from recdrop.data import semeval
    from recdrop.data.files import DatasetError

    semeval.notes_on_test_sets.cache_clear()
    if (data_root() / "semeval").exists():
        assert semeval.notes_on_test_sets()["Twitter15"].startswith("its file lists 11 tweets more than once")
        semeval.notes_on_test_sets.cache_clear()

    def missing(root=None):
        raise DatasetError("semeval: missing")
    monkeypatch.setattr(semeval, "load_semeval", missing)
    assert semeval.notes_on_test_sets() == semeval.PARTIAL
    semeval.notes_on_test_sets.cache_clear()
