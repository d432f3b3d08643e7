"""The character-level LM follows Sec. 4.3 of the paper; the choices it leaves open are tested too."""
import math

import pytest
import torch

from made import record
from recdrop.config import run_id
from recdrop.data import data_root
from recdrop.experiments import char_lm, char_lm_chapter
from recdrop.experiments.char_lm import CharLMConfig, CharLMTask, grid, sequences
from recdrop.records import Row
from recdrop.report import _book_html
from recdrop.verdicts import NOT_RUN

needs_data = pytest.mark.skipif(not (data_root() / "ptb_char").exists(), reason="PTB (characters) not available")


def test_sequences_are_non_overlapping_windows_with_the_next_character_as_target():
    s = sequences(torch.arange(23), 5)
    assert s.shape == (4, 6)  # (23 - 1) // 5 windows; the tail is dropped
    assert s[0].tolist() == [0, 1, 2, 3, 4, 5] and s[1].tolist() == [5, 6, 7, 8, 9, 10]
    assert torch.equal(s[:, :-1].flatten(), torch.arange(20))  # every input character once
    assert sequences(torch.arange(23), 5, limit=11).shape == (2, 6)


def test_grid_is_table_3_plus_the_batch_size_check():
    cells = grid("ci")
    table = [(label, cfg) for label, cfg in cells if label["batch"] == "default"]
    half = [(label, cfg) for label, cfg in cells if label["batch"] == "half"]
    assert len(table) == 26 and len(half) == 2
    for label, cfg in half:
        assert label["forward"] == "without forward dropout"
        assert cfg.batch_size == CharLMConfig.at_scale("ci").batch_size // 2
        assert (label["scheme"], label["rate"]) in (("none", 0.0), ("semeniuta", 0.25))
    for label, cfg in table:
        assert cfg.scaling == "paper" and cfg.recurrent_dropout == label["rate"]
        assert (cfg.input_dropout, cfg.output_dropout) == ((0.2, 0.5) if label["forward"] == "with forward dropout"
                                                          else (0.0, 0.0))


def test_paper_scale_settings():
    c = CharLMConfig.at_scale("paper")
    assert (c.embedding_size, c.hidden_size, c.init_scale, c.lr, c.epochs, c.lr_decay, c.decay_from_epoch,
            c.clip_norm, c.seq_len) == (256, 1024, 0.01, 0.001, 50, 0.97, 10, 10.0, 100)
    with pytest.raises(ValueError, match="seq_len"):
        CharLMConfig.at_scale("ci", seq_len=0)


@pytest.fixture(scope="module")
def task():
    torch.manual_seed(0)
    return CharLMTask(CharLMConfig.at_scale("ci"), "cpu", 0)


@needs_data
def test_parameters_uniform_in_001_and_adam(task):
    for p in task.model.parameters():
        assert 0.009 < p.abs().max() <= 0.01
    assert isinstance(task.optimizer, torch.optim.Adam)


@needs_data
def test_batches_cover_every_sequence_once_in_a_fixed_order_per_epoch(task):
    b0, b0_again, b1 = task.batches(0), task.batches(0), task.batches(1)
    assert all(torch.equal(x, y) for x, y in zip(b0, b0_again))
    assert sorted(torch.cat(b0).tolist()) == list(range(task.train_seqs.shape[0]))
    assert not torch.equal(torch.cat(b0), torch.cat(b1))
    assert max(len(b) for b in b0) == task.cfg.batch_size


@needs_data
def test_bpc_of_a_uniform_model_is_log2_of_the_vocabulary(task):
    state = {k: v.clone() for k, v in task.model.state_dict().items()}
    with torch.no_grad():
        task.model.out.weight.zero_()
        task.model.out.bias.zero_()
    assert task.bpc(task.valid_seqs) == pytest.approx(math.log2(50), rel=1e-6)
    task.model.load_state_dict(state)


@needs_data
def test_learning_rate_decays_by_097_from_its_decay_epoch():
    t = CharLMTask(CharLMConfig.at_scale("ci", decay_from_epoch=3, epochs=5), "cpu", 0)
    lrs = []
    for epoch in range(5):
        t.end_epoch(epoch, {"valid_bpc": 1.0})
        lrs.append(t.optimizer.param_groups[0]["lr"])
    assert lrs == pytest.approx([1e-3, 1e-3, 1e-3 * 0.97, 1e-3 * 0.97 ** 2, 1e-3 * 0.97 ** 3])


def test_claims_need_every_cell():
    rows = [Row(label, 0, run_id(cfg, 0), cfg) for label, cfg in grid("ci")]
    rows[0].stored = record(metrics={"test_bpc": 1.0, "valid_bpc": 1.0, "best_test_bpc": 1.0})
    assert set(char_lm_chapter.claims(rows)["on ours"]) == {NOT_RUN}
    assert set(char_lm_chapter.claims(rows)["on the paper's numbers"]) == {"holds"}


def test_batch_check_gives_each_batch_size_its_cells_gap_and_order():
    from recdrop.sweep import grid_rows
    from recdrop.store import RunStore
    rows = grid_rows("char_lm", "ci", [0, 1], store=RunStore("/nonexistent"))
    wo = next(iter(char_lm.FORWARD))

    def store(scheme, batch, bpc):
        for r in rows:
            if (r["scheme"], r["batch"], r["forward"]) == (scheme, batch, wo) and r["rate"] in (0.0, 0.25) \
                    and r["sampling"] in ("-", "per-step"):
                r.stored = record(**{"metrics": {"test_bpc": bpc + 0.1 * r.seed}})

    store("none", "default", 1.5)
    table = char_lm_chapter.batch_check(rows).set_index("batch")
    assert list(table.index) == ["default", "half"] and "n" not in table
    assert table.loc["default", "batch size"] == 2 * table.loc["half", "batch size"]
    assert table.loc["default", "no recurrent dropout"] == "1.550 ± 0.071 (n=2)"
    assert table.loc["default", "ours 0.25 per-step"] == table.loc["half", "no recurrent dropout"] == "not yet run"
    assert table.loc["default", "ours − none (bpc)"] == "not yet run"
    assert table.loc["half", "same order as at the default batch"] == NOT_RUN

    store("semeniuta", "default", 1.4)  # ours better by 0.1 at the default batch ...
    store("none", "half", 1.6)
    store("semeniuta", "half", 1.7)  # ... and worse by 0.1 at half of it: the batch drives the order
    table = char_lm_chapter.batch_check(rows).set_index("batch")
    assert list(table["ours − none (bpc)"]) == ["-0.100", "+0.100"]
    order = table["same order as at the default batch"]
    assert math.isnan(order["default"])
    assert order["half"] == ("not judged at this scale (fails on the means of 2 seeds, too few to judge against "
                             "seed noise)")
    assert "<td>—</td>" in _book_html(table) and "· not judged" in _book_html(table)  # as the chapter shows it
    store("semeniuta", "half", 1.55)
    table = char_lm_chapter.batch_check(rows).set_index("batch")
    assert table.loc["half", "same order as at the default batch"] == (
        "not judged at this scale (holds on the means of 2 seeds, too few to judge against seed noise)")


def test_batch_check_judges_the_order_seed_by_seed_on_the_seeds_that_ran_all_four_cells():
    """A seed's order is its own gap's sign at each batch: seeds 1 and 2 keep it, seed 0 does not, and
    seed 3, whose half-batch runs have not run, is left out rather than mixed into a mean."""
    from recdrop.sweep import grid_rows
    from recdrop.store import RunStore
    rows = grid_rows("char_lm", "ci", [0, 1, 2, 3], store=RunStore("/nonexistent"))
    wo = next(iter(char_lm.FORWARD))
    bpc = {("default", "none"): [1.5, 1.5, 1.5, 1.5], ("default", "semeniuta"): [1.4, 1.4, 1.2, 1.9],
           ("half", "none"): [1.5, 1.5, 1.5, None], ("half", "semeniuta"): [1.6, 1.4, 1.3, None]}
    for r in rows:
        if r["forward"] == wo and (r["batch"], r["scheme"]) in bpc and r["rate"] in (0.0, 0.25) \
                and r["sampling"] in ("-", "per-step") and bpc[r["batch"], r["scheme"]][r.seed] is not None:
            r.stored = record(metrics={"test_bpc": bpc[r["batch"], r["scheme"]][r.seed]})
    table = char_lm_chapter.batch_check(rows).set_index("batch")
    assert table.loc["half", "same order as at the default batch"] == (
        "within seed noise (holds in 2 of 3 seeds, holds on the means; 1 more seed lacks a cell it needs)")
    assert table.loc["default", "ours − none (bpc)"] == "-0.025"  # the table's means are over every seed each has


def test_the_run_curves_leave_out_the_batch_size_check():
    """The batch-size check's half-batch runs are not Table 3's: they get no panel or line of their own."""
    from recdrop.sweep import grid_rows
    from recdrop.store import RunStore
    rows = grid_rows("char_lm", "ci", store=RunStore("/nonexistent"))
    wo = next(iter(char_lm.FORWARD))
    for r in rows:
        if r["forward"] == wo and (r["batch"] == "half" or r["scheme"] == "none"):
            r.stored = record(**{"seed": 0, "curves": [{"epoch": e, "train_bpc": 2.0 / e, "valid_bpc": 2.2 / e}
                                                 for e in (1, 2, 3)]})
    fig = char_lm_chapter.plot_runs(rows)
    assert [ax.get_title() for ax in fig.axes] == ["no dropout"]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["no dropout", "training", "validation"]


@needs_data
def test_the_best_validation_model_is_kept_and_tested_once_at_the_end(tmp_path):
    """Test bpc is computed at the last epoch only; the best-validation epoch's weights are kept (and
    checkpointed) and tested at the end, giving what testing at that epoch gave."""
    from recdrop.store import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    t = CharLMTask(CharLMConfig.at_scale("ci", epochs=3), "cpu", 0)
    t.model.eval()

    def evaluate(epoch):  # a run alone: a group of one
        return CharLMTask.group_evaluate([t], epoch, [{"loss": 1.0}])[0]
    first = evaluate(0)  # an improvement: the weights are kept, not tested
    assert first["test_bpc"] is None
    assert all(torch.equal(v, t.model.state_dict()[k]) for k, v in t.best_state.items())
    best_test = t.bpc(t.test_seqs)  # what testing at that epoch would have given
    t.end_epoch(0, first)
    with torch.no_grad():  # later epochs move the weights and validation gets worse
        for p in t.model.parameters():
            p.add_(0.05)
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"task": t.state_dict()})  # a resumed run keeps them
    t.load_state_dict(load_checkpoint(path)["task"])
    moved = {k: v.clone() for k, v in t.model.state_dict().items()}
    second = evaluate(1)
    assert second["valid_bpc"] > first["valid_bpc"] and second["test_bpc"] is None
    last = evaluate(2)
    assert last["test_bpc"] is not None  # the final model is tested
    curves = [{"epoch": e + 1, **m} for e, m in enumerate([first, second, last])]
    metrics = t.final_metrics(curves)
    assert metrics["best_epoch"] == 1 and metrics["best_test_bpc"] == pytest.approx(best_test, rel=1e-6)
    assert metrics["test_bpc"] == last["test_bpc"]
    assert all(torch.equal(v, t.model.state_dict()[k]) for k, v in moved.items())  # the final weights are back
    # resumed from a checkpoint of the code that tested at every improvement (no kept weights): the best
    # epoch's test is in its curve if it came before the resume, and kept if after it
    t.load_state_dict({"best_valid": first["valid_bpc"]})
    old_curves = [{**curves[0], "test_bpc": best_test}] + curves[1:]
    assert t.final_metrics(old_curves)["best_test_bpc"] == best_test
    t.load_state_dict({"best_valid": second["valid_bpc"] + 1.0})
    evaluate(1)  # an improvement on what the checkpoint knew: kept
    later = [{**curves[0], "valid_bpc": second["valid_bpc"] + 1.0, "test_bpc": 0.0}, {**curves[1]}, curves[2]]
    assert t.final_metrics(later)["best_epoch"] == 2
    assert t.final_metrics(later)["best_test_bpc"] == pytest.approx(t.bpc(t.test_seqs), rel=1e-6)
