"""SemEval sentiment data: the six test sets as SOURCE.md counts them, the text quirks, the metric."""
import pytest

from recdrop.data import data_root
from recdrop.data.semeval import TEST_SETS, clean_text, distant_label, load_semeval, semeval_f1, tokenize

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
    assert {m.label for m in d.train} == {"positive", "neutral", "negative"}
