"""The sentiment classifier follows Sec. 4.5: the label read at each message's last word, per-step
masks, RMSProp 0.001; pre-training from emoticons is pluggable."""
import pytest
import torch

from recdrop.config import run_id
from recdrop.data import data_root
from recdrop.experiments import sentiment, sentiment_chapter
from recdrop.experiments.sentiment import SentimentConfig, classifier, encode, grid, read_pretrain_corpus
from recdrop.records import Row
from recdrop.verdicts import NOT_RUN

needs_semeval = pytest.mark.skipif(not (data_root() / "semeval").exists(), reason="SemEval data not available")


def test_encode_pads_and_keeps_lengths():
    rows, lengths, labels = encode([(["a", "b", "c"], "positive"), ([], "negative")], {"a": 2, "b": 3})
    assert rows.tolist() == [[2, 1], [3, 0], [1, 0]]  # "c" unknown; an empty message is one unknown word
    assert lengths.tolist() == [3, 1] and labels.tolist() == [2, 0]


def test_the_label_is_read_at_each_messages_last_word():
    torch.manual_seed(0)
    cfg = SentimentConfig.at_scale("ci", input_dropout=0.0, output_dropout=0.0)
    model = classifier(cfg, torch.randn(6, 4)).eval()
    rows = torch.tensor([[2, 3], [4, 5], [5, 0]])
    both = model(rows, torch.tensor([3, 2]))
    alone = model(rows[:2, 1:], torch.tensor([2]))  # the second message without its padding
    torch.testing.assert_close(both[1:], alone)


def test_grid_and_paper_settings():
    assert [(label["cell"], label["rate"]) for label, _ in grid("ci")] == [
        (c, r) for c in ("RNN", "LSTM", "GRU") for r in (0.0, 0.25)]
    c = SentimentConfig.at_scale("paper")
    assert (c.hidden_size, c.lr, c.sampling, c.scheme, c.nonlinearity) == (500, 0.001, "per-step", "semeniuta", "relu")
    with pytest.raises(ValueError, match="pretrain_corpus"):
        SentimentConfig.at_scale("ci", pretrain_corpus="/no/such/file.txt")


def test_pretrain_corpus_is_labelled_by_emoticons(tmp_path):
    f = tmp_path / "weak.txt"
    f.write_text("love it :)\nhate it :(\nno idea\nboth :) :(\n")
    weak = read_pretrain_corpus(str(f))
    assert [(m.text, m.label) for m in weak] == [("love it", "positive"), ("hate it", "negative")]


@needs_semeval
def test_pretraining_runs_before_training_and_is_recorded(tmp_path, monkeypatch):
    from recdrop.store import RunStore
    from recdrop.train import train_run

    f = tmp_path / "weak.txt"
    f.write_text("good game :)\nbad day :(\n" * 20)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    cfg = SentimentConfig.at_scale("ci", epochs=1, pretrain_corpus=str(f))
    rec = train_run(sentiment.SentimentTask, cfg, store=RunStore(tmp_path), progress=False)
    assert rec.metrics["pretrained_messages"] == 40
    assert set(k for k in rec.metrics if k.startswith("test_f1:")) == \
        {f"test_f1:{t}" for t in ("Twitter13", "LiveJournal14", "Twitter15", "Twitter14", "SMS13", "Sarcasm14")}


@needs_semeval
def test_pretraining_is_a_stage_that_a_resumed_run_does_not_repeat(tmp_path, monkeypatch):
    """A run stopped after its first epoch resumes from its checkpoint without pre-training again, and
    ends with the record of the run that went straight through (the count of messages pre-trained on
    comes back with the checkpoint)."""
    from recdrop.store import RunStore
    from recdrop.train import train_run

    f = tmp_path / "weak.txt"
    f.write_text("good game :)\nbad day :(\n" * 20)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    cfg = SentimentConfig.at_scale("ci", epochs=2, pretrain_corpus=str(f))
    calls = []
    real = sentiment.SentimentTask.pretrain
    monkeypatch.setattr(sentiment.SentimentTask, "pretrain", lambda self, weak: calls.append(1) or real(self, weak))
    straight = train_run(sentiment.SentimentTask, cfg, store=RunStore(tmp_path / "straight"), progress=False)
    assert len(calls) == 1

    class Stop(Exception):
        pass

    def stop(event, epoch, batch):
        if event == "epoch" and epoch == 0:
            raise Stop
    with pytest.raises(Stop):
        train_run(sentiment.SentimentTask, cfg, store=RunStore(tmp_path / "resumed"), progress=False, callback=stop)
    resumed = train_run(sentiment.SentimentTask, cfg, store=RunStore(tmp_path / "resumed"), progress=False)
    assert len(calls) == 2  # the stopped run pre-trained; its resumption did not
    assert resumed.metrics == straight.metrics and resumed.metrics["pretrained_messages"] == 40
    assert resumed.curves == straight.curves


def test_claims_are_not_yet_run_without_records():
    rows = [Row(label, 0, run_id(cfg, 0), cfg) for label, cfg in grid("ci")]
    out = sentiment_chapter.claims(rows)
    assert set(out["on ours"]) == {NOT_RUN} and set(out["on the paper's numbers"]) == {"holds"}


def test_the_chapter_says_where_the_papers_own_table_has_another_cell_best():
    """The paper names Twitter2015 as "the only exception" to its GRU with dropout being best; its own
    Table 5 (data/paper_results.csv) has two more, which the chapter names from the numbers."""
    best = sentiment_chapter.best_cells(sentiment_chapter.paper_f1())
    others = {t: cr for t, cr in best.items() if cr != ("GRU", 0.25)}
    assert others["Twitter15"] == ("LSTM", 0.25) and len(others) == 3
    note = sentiment_chapter.paper_best_note()
    assert "another cell is best on 3 of the 6 test sets" in note and "Twitter15: LSTM 0.25" in note
    assert "SMS13: GRU without recurrent dropout" in note


def test_what_is_incomplete_about_a_test_set_is_said_once_under_table_5_not_on_each_of_its_rows():
    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    table = sentiment_chapter.table5(grid_rows("sentiment", "paper", [0], store=RunStore("/nonexistent")))
    assert len(table) == 36 and not any("note" in c for c in table.columns)
    notes = sentiment_chapter.test_set_notes().set_index("test set")["as scored here"]
    assert len(notes) == 6 and notes["Twitter13"].startswith("3,545 of its 3,810 tweets")
    assert notes["LiveJournal14"] == "complete"
