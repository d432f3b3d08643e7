"""The NER tagger follows Sec. 4.4 of the paper: windows, caps features, length expansion, F1."""
import pytest
import torch

from made import record
from recdrop.config import run_id
from recdrop.data import data_root
from recdrop.data.conll2003 import Sentence
from recdrop.experiments import ner, ner_chapter
from recdrop.experiments.ner import CAPS, NERConfig, caps_feature, epoch_chunks, gather, grid, make_split
from recdrop.records import Row
from recdrop.verdicts import NOT_RUN

needs_conll = pytest.mark.skipif(not (data_root() / "conll2003").exists(), reason="CoNLL-2003 not available")


def test_caps_feature_classes():
    assert [CAPS[caps_feature(w)] for w in ("the", "Paris", "EU", "McDonald", "1996", "I")] == \
        ["lower", "title", "upper", "mixed", "no letters", "upper"]


def test_windows_are_the_word_two_before_and_two_after_padded_at_the_edges():
    s = make_split([Sentence(["a", "b", "c"], ["O", "I-PER", "O"])], {"a": 2, "b": 3, "c": 4},
                   {"O": 0, "I-PER": 1}, window=5)
    assert s.windows.tolist() == [[0, 0, 2, 3, 4], [0, 2, 3, 4, 0], [2, 3, 4, 0, 0]]
    pad = CAPS.index("padding")
    assert s.caps[0].tolist() == [pad, pad, 0, 0, 0] and s.tags.tolist() == [0, 1, 0]


def test_epoch_chunks_cover_every_token_once_inside_sentences():
    s = make_split([Sentence(list("abcdefghijk"), ["O"] * 11), Sentence(list("xy"), ["O"] * 2)],
                   {}, {"O": 0}, window=5)
    seen = set()
    for epoch in range(4):
        chunks = epoch_chunks(s, 5, torch.Generator().manual_seed(epoch))
        rows = [r for first, n in chunks.tolist() for r in range(first, first + n)]
        assert sorted(rows) == list(range(13))  # every token exactly once
        assert (chunks[:, 1] <= 5).all() and [11, 2] in chunks.tolist()  # the short sentence whole
        assert all(first + n <= 11 or first >= 11 for first, n in chunks.tolist())  # inside a sentence
        seen.add(tuple(map(tuple, chunks.tolist())))
    assert len(seen) > 1  # the cuts move from epoch to epoch
    windows, caps, tags, mask = gather(s, torch.tensor([11]), torch.tensor([2]), 5)
    assert windows.shape == (5, 1, 5) and mask[:, 0].tolist() == [True, True, False, False, False]
    assert (windows[2:, 0] == ner.PAD).all()


def test_grid_is_table_4_and_paper_settings():
    cells = grid("ci")
    assert [(label["cell"], label["rate"]) for label, _ in cells] == \
        [(c, r) for c in ("RNN", "LSTM", "GRU") for r in (0.0, 0.25)]
    c = NERConfig.at_scale("paper")
    assert (c.hidden_size, c.nonlinearity, c.scheme, c.sampling, c.input_dropout, c.output_dropout, c.lr, c.rho,
            c.lr_decay, c.short_len, c.short_epochs, c.long_len, c.long_epochs, c.window) == \
        (1024, "relu", "semeniuta", "per-sequence", 0.2, 0.5, 0.01, 0.9, 0.99, 5, 25, 15, 10, 5)
    with pytest.raises(ValueError, match="cell"):
        NERConfig.at_scale("ci", cell="Transformer")
    with pytest.raises(ValueError, match="window"):
        NERConfig.at_scale("ci", window=4)


@needs_conll
def test_training_switches_to_long_spans_and_tests_each_stage_end_and_its_best_validation_epoch(tmp_path,
                                                                                              monkeypatch):
    from recdrop.store import RunStore
    from recdrop.train import train_run

    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    cfg = NERConfig.at_scale("ci", short_epochs=3, long_epochs=1)
    rec = train_run(ner.NERTask, cfg, store=RunStore(tmp_path), progress=False)
    curves, m = rec.curves, rec.metrics
    assert [c["span_len"] for c in curves] == [5, 5, 5, 15]
    assert all(c["test_f1"] is not None and c["grad_norm"] > 0 and 0 <= c["clipped"] <= 1 for c in curves)
    assert m["test_f1_short"] == curves[2]["test_f1"]
    assert m["test_f1_long"] == curves[3]["test_f1"]
    best = max(curves[:3], key=lambda c: c["valid_f1"])  # the 5-word stage's best validation epoch
    assert (m["best_epoch_short"], m["best_test_f1_short"]) == (best["epoch"], best["test_f1"])
    assert (m["best_epoch_long"], m["best_test_f1_long"]) == (4, curves[3]["test_f1"])
    assert curves[3]["lr"] == pytest.approx(0.01 * 0.99 ** 3)
    assert "GloVe" in m["embeddings"]


@needs_conll
def test_the_progress_bar_counts_each_stages_batches(tmp_path, monkeypatch):
    """The 15-word stage has about a third of the 5-word stage's batches: the bar's total (and so its
    ETA) counts each stage's, not the first epoch's times the epochs."""
    import recdrop.train
    from recdrop.store import RunStore

    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    bars = []

    real_bar = recdrop.train.progress_bar

    def recorded(**kwargs):
        bars.append(real_bar(**kwargs))
        return bars[-1]

    monkeypatch.setattr(recdrop.train, "progress_bar", recorded)
    cfg = NERConfig.at_scale("ci", short_epochs=1, long_epochs=2)
    task = ner.NERTask(cfg, "cpu", 0)
    short, long, longer = (len(task.batches(epoch)) for epoch in range(3))
    assert long < short / 2
    recdrop.train.train_run(ner.NERTask, cfg, store=RunStore(tmp_path), progress=False)
    assert bars[0].total == short + 2 * long
    assert bars[0].total == pytest.approx(short + long + longer, rel=0.05)  # each epoch cuts its own spans


def test_claims_are_not_yet_run_without_records():
    rows = [Row(label, 0, run_id(cfg, 0), cfg) for label, cfg in grid("ci")]
    out = ner_chapter.claims(rows)
    assert set(out["on ours"]) == {NOT_RUN}
    # the paper's own numbers: the LSTM's gain is the largest after the 5-word stage (1.10 against 0.88
    # and 0.70), not after the 15-word stage (0.76 against the RNN's 0.83)
    assert list(out["on the paper's numbers"]) == ["holds", "holds", "holds", "does not hold"]


def test_predict_batches_by_length_and_returns_the_split_order(monkeypatch):
    """Sentences of mixed lengths, batched 3 at a time after sorting by length: the same tags, in the
    split's order, as each sentence alone (float64, so batching changes no rounding that matters)."""
    from types import SimpleNamespace

    from recdrop.models import Dropout, Tagger
    torch.manual_seed(0)
    tag_names = ["O", "I-PER", "I-LOC"]
    lengths = [7, 2, 9, 1, 4, 4, 11, 3]
    sentences = [Sentence([f"w{(i * 5 + j) % 13}" for j in range(n)], [tag_names[(i + j) % 3] for j in range(n)])
                 for i, n in enumerate(lengths)]
    split = make_split(sentences, {f"w{i}": i + 2 for i in range(13)}, {t: i for i, t in enumerate(tag_names)}, 5)
    model = Tagger("LSTM", torch.randn(15, 4, dtype=torch.float64), 5, len(CAPS), 8, 3, Dropout()).double()
    task = SimpleNamespace(model=model, tag_names=tag_names, device="cpu")
    batches = []

    def recording_gather(split, firsts, lengths, steps):
        batches.append(lengths.tolist())
        return gather(split, firsts, lengths, steps)
    monkeypatch.setattr(ner, "gather", recording_gather)
    true, pred = ner.NERTask.predict(task, split, batch=3)
    assert batches == [[1, 2, 3], [4, 4, 7], [9, 11]]  # sorted by length: little padding
    alone = [ner.NERTask.predict(task, make_split([s], {f"w{i}": i + 2 for i in range(13)},
                                                  {t: i for i, t in enumerate(tag_names)}, 5))[1][0] for s in sentences]
    assert true == [s.tags for s in sentences]
    assert pred == alone and [len(p) for p in pred] == lengths
    assert model.training  # predict leaves the model training
    assert ner.NERTask.predict(task, make_split([], {}, {}, 5)) == ([], [])  # an empty split


def test_the_training_plot_draws_every_run_of_each_cell_and_marks_the_second_stage():
    import matplotlib
    matplotlib.use("Agg")
    from recdrop.experiments.cell_grid import RATE_COLOURS, plot_cell_runs
    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    rows = grid_rows("ner", "ci", [0, 1], store=RunStore("/nonexistent"))
    for r in rows:
        if r["cell"] == "RNN":  # 2 rates x 2 seeds; 3 epochs, the last on long spans
            r.stored = record(**{"curves": [{"epoch": e, "train_loss": 10.0 ** e, "valid_f1": 50.0 + e + r.seed,
                                       "span_len": 5 if e < 3 else 15} for e in (1, 2, 3)]})
    fig = plot_cell_runs(rows)
    (loss, lstm_loss, _), (f1, _, _) = fig.axes[:3], fig.axes[3:6]
    runs = [line for line in loss.lines if line.get_linestyle() == "-"]
    assert len(runs) == 4 and sorted(line.get_color() for line in runs) == sorted(list(RATE_COLOURS.values()) * 2)
    assert sorted(tuple(line.get_ydata()) for line in f1.lines if line.get_linestyle() == "-")[0] == (51.0, 52.0, 53.0)
    assert loss.get_yscale() == "log" and list(runs[0].get_ydata()) == [10.0, 100.0, 1000.0]
    stage = {line.get_xdata()[0] for line in loss.lines + f1.lines if line.get_linestyle() == ":"}
    assert stage == {2.5}  # between epoch 2 (short spans) and epoch 3 (long spans)
    assert not lstm_loss.lines and lstm_loss.texts[0].get_text() == "not yet run at this scale"
    only_rnn = plot_cell_runs([r for r in rows if r["cell"] == "RNN"])  # an ablation of the RNN's cells alone
    assert [ax.get_title() for ax in only_rnn.axes[:1]] == ["RNN"] and len(only_rnn.axes) == 2
    assert not any(ax.texts for ax in only_rnn.axes)  # no panel for the cells it does not run


def test_the_training_summary_finds_each_runs_lowest_loss_and_best_validation_epoch():
    from recdrop.experiments.cell_grid import training_summary
    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    rows = grid_rows("ner", "ci", [0, 1], store=RunStore("/nonexistent"))
    assert training_summary(rows, chance_loss=4.0).empty  # nothing stored: no rows, the columns kept
    # loss lowest at epoch 2, F1 best at 2, then it blows up
    losses, f1s = [3.0, 0.5, 2e9, 0.9], [60.0, 70.0, 65.0, 61.0]
    for r in rows:
        if r["cell"] in ("GRU", "RNN") and r["rate"] == 0.25:
            r.stored = record(**{"curves": [{"epoch": e + 1, "train_loss": loss + r.seed, "valid_f1": f1 - r.seed}
                                      for e, (loss, f1) in enumerate(zip(losses, f1s))]})
    table = training_summary(rows, chance_loss=4.0)
    assert list(zip(table["cell"], table["seed"])) == [("RNN", 0), ("RNN", 1), ("GRU", 0), ("GRU", 1)]  # CELLS order
    first = table.iloc[0].to_dict()
    assert first == {"cell": "RNN", "rate": 0.25, "seed": 0, "epochs": 4, "first loss": 3.0, "lowest loss": 0.5,
                     "its epoch": 2, "last loss": 0.9, "highest loss / first": 6.67e8,
                     "stable": "NO: loss rose 6.667e+08x", "best valid F1": 70.0,
                     "epoch of best": 2, "last valid F1": 61.0}
    assert table.iloc[1]["lowest loss"] == 1.5 and table.iloc[1]["last valid F1"] == 60.0


def test_the_training_summary_calls_a_run_unstable_past_ten_times_its_first_epochs_loss_or_above_chance_in_it():
    from recdrop.experiments.cell_grid import training_summary
    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    rows = grid_rows("ner", "ci", [0], store=RunStore("/nonexistent"))
    for r, losses in zip(rows, ([1.0, 0.5, 10.0], [1.0, 0.5, 10.01], [59.0, 0.4, 7.5], [2.0, 0.4, 0.3])):
        r.stored = record(**{"curves": [{"epoch": e + 1, "train_loss": x, "valid_f1": 50.0}
                                        for e, x in enumerate(losses)]})
    table = training_summary(rows, chance_loss=2.0)
    # the third blew up in its first epoch (its mean above a uniform guess's 2.0), then recovered
    assert list(table["stable"]) == ["yes", "NO: loss rose 10.01x", "NO: epoch 1 above chance (59 > 2)", "yes"]
    from recdrop.experiments.cell_grid import stability
    assert stability([0.5, float("nan")], 2.0) == stability([float("inf")], 2.0) == "NO: diverged (a loss not finite)"
    assert list(table["highest loss / first"]) == [10.0, 10.0, 1.0, 1.0]


@needs_conll
def test_chance_losses_are_a_uniform_guess_over_the_tasks_classes():
    import math

    from recdrop.experiments import ner_chapter, sentiment_chapter

    assert sentiment_chapter.chance_loss() == pytest.approx(math.log(3))
    # eng.train: O, I- of the 4 types, B- of 3 (no B-PER)
    assert ner_chapter.chance_loss() == pytest.approx(math.log(8))


@needs_conll
def test_the_tuned_embeddings_ablation_trains_the_word_vectors_of_the_rnns_cells_only(tmp_path, monkeypatch):
    """The ablation of the inputs (issue 49): its grid is the RNN's two cells with ``tune_embeddings``;
    the table's runs keep the vectors static (and their ids: the field's default is what they ran with),
    the ablation's train them with the rest."""
    from recdrop.config import run_id
    from recdrop.store import RunStore
    from recdrop.train import train_run

    ablated = ner.GRIDS["tuned-embeddings"]("ci")
    assert [(labels["cell"], labels["rate"], cfg.tune_embeddings) for labels, cfg in ablated] == \
        [("RNN", 0.0, True), ("RNN", 0.25, True)]
    table = dict((labels["rate"], cfg) for labels, cfg in grid("ci") if labels["cell"] == "RNN")
    assert run_id(table[0.0], 0) == run_id(table[0.0].replace(tune_embeddings=False), 0) != \
        run_id(ablated[0][1], 0)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    seen = {}
    real = ner.NERTask.__init__

    def keep(self, cfg, device, seed):  # the task's model before and after its training
        real(self, cfg, device, seed)
        seen[cfg.tune_embeddings] = (self.model, self.model.embed.weight.detach().clone())
    monkeypatch.setattr(ner.NERTask, "__init__", keep)
    for cfg in (table[0.0], ablated[0][1]):
        train_run(ner.NERTask, cfg.replace(short_epochs=1, long_epochs=0), store=RunStore(tmp_path), progress=False)
    for tuned, (model, before) in seen.items():
        assert model.embed.weight.requires_grad == tuned
        assert torch.equal(model.embed.weight, before) != tuned
    assert "tuned-embeddings" in dict(ner.ABLATIONS)


def test_the_optimiser_probes_table_says_where_each_probe_ran():
    """Each committed probe of the optimiser (``cell_grid.optimiser_probes``), one per RMSProp form, with
    its seed, hardware, precision and commit beside its numbers."""
    from recdrop.experiments.cell_grid import optimiser_probes

    t = optimiser_probes("ner")
    assert sorted(t["optimizer"]) == ["rmsprop-lasagne", "rmsprop-tf1", "rmsprop-torch"]
    assert (t["precision"] == "float32").all() and t["hardware"].str.len().min() > 0
    assert t["commit"].str.fullmatch(r"[0-9a-f]{7}").all()
