"""Fused training of a grid (issue 35): the runs of a group train as one model, and each member ends
with the record it has when trained alone; a member that diverges stops alone; a fused group killed
at random moments resumes every member; bad arguments are clear errors."""
import json
import math
import subprocess
import time
import types

import pytest
import torch

from recdrop import campaign, sweep, train
from recdrop.campaign import Entry, pack, run_campaign, unpack
from recdrop.config import run_id
from recdrop.experiments.char_lm import CharLMConfig, CharLMTask
from recdrop.experiments.temporal_order import TemporalOrderConfig
from recdrop.experiments.word_lm import WordLMConfig, WordLMTask
from recdrop.fused import group_decoder_nll
from recdrop.store import RunStore
from recdrop.sweep import fuse_groups, grid_rows, run_grid
from recdrop.train import train_group, train_run

from kills import REPO, epoch_seconds, kill_repeatedly, resume_to_the_end, stored_records, sweep_command
from made import row

TASKS = {"word_lm": (WordLMConfig, WordLMTask), "char_lm": (CharLMConfig, CharLMTask)}
# Measured at ci scale on a 2-core Intel Xeon (torch 2.13.0+cpu), the runs' weights stacked as on a GPU:
# the largest relative difference between a member's metrics and curves in float32 and the same run's
# alone was 4.8e-7 (word LM) and 6.8e-8 (char LM), from the order of the batched products' sums; in bf16
# on an AMD EPYC, 9.5e-7 (word LM). The bound keeps a margin of 100x for other machines' kernels, and 10x
# more in bf16, where a GPU's batched and single products may round a product's last bit apart.
RTOL = {"float32": 1e-4, "bf16": 1e-3}


def members(experiment):
    """Four runs that share a model shape: no dropout, Gal per-sequence, ours with forward dropout and
    half the learning rate, Moon with a lower clipping threshold."""
    config, _ = TASKS[experiment]
    base = config.at_scale("ci")
    return [(base, 0),
            (base.replace(recurrent_dropout=0.25, scheme="gal", sampling="per-sequence"), 0),
            (base.replace(recurrent_dropout=0.5, input_dropout=0.2, output_dropout=0.5, lr=base.lr / 2), 0),
            (base.replace(recurrent_dropout=0.25, scheme="moon", clip_norm=1.0), 0)]


def close(a, b, rtol):
    """Whether two records' metrics and curves agree to ``rtol`` (numbers) or exactly (the rest)."""
    def same(x, y):
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=rtol, abs_tol=0.0) or (math.isnan(x) and math.isnan(y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(map(same, x, y))
        return x == y
    return same(a.metrics, b.metrics) and same(a.curves, b.curves)


@pytest.fixture
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


# Where: the CPU's path (each run's own forward), a GPU's path on the CPU (the runs' weights stacked,
# ``RECDROP_STACK_ON_CPU``), and a GPU itself where there is one (skipped here: the lent GPU's first check).
WHERE = [("cpu", False), ("cpu", True),
         pytest.param("cuda", True, marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("experiment", list(TASKS))
@pytest.mark.parametrize("device,stacked", WHERE)
def test_each_member_of_a_fused_group_ends_with_the_record_it_has_alone(experiment, device, stacked, tmp_path,
                                                                        monkeypatch, float64):
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1" if stacked else "0")
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    _, task = TASKS[experiment]
    runs = members(experiment)
    group = train_group(task, runs, device=device, store=RunStore(tmp_path / "group"), progress=False)
    alone = [train_run(task, c, s, device=device, store=RunStore(tmp_path / "alone"), progress=False) for c, s in runs]
    ids = [run_id(c, s) for c, s in runs]
    assert len(group) == len(runs) > 1  # a record for every member: zip below stops at the shorter list
    for g, a, rid in zip(group, alone, ids):
        assert g.run_id == a.run_id == rid  # how a run was trained is not in its id
        assert g.group == ids and "group" not in a.json()
        assert close(g, a, rtol=1e-9), (rid, g.metrics, a.metrics)
    assert len({json.dumps(g.metrics, sort_keys=True) for g in group}) == len(group)  # the runs differ


@pytest.mark.parametrize("experiment", list(TASKS))
@pytest.mark.parametrize("precision", ["float32", "bf16"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                                         reason="no GPU"))])
def test_a_member_agrees_with_its_run_alone_to_the_rounding_of_batched_products(experiment, precision, device, tmp_path,
                                                                                monkeypatch):
    """In float32 and in bf16 (its products under autocast, on the fused path, alone and stacked)."""
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")  # the batched products of a GPU's path
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    _, task = TASKS[experiment]
    runs = members(experiment)
    group = train_group(task, runs, device=device, store=RunStore(tmp_path / "group"), progress=False,
                        precision=precision)
    alone = [train_run(task, c, s, device=device, store=RunStore(tmp_path / "alone"), progress=False,
                       precision=precision) for c, s in runs]
    assert [g.run_id for g in group] == [a.run_id for a in alone] and len(group) > 1  # every member, in order
    for g, a in zip(group, alone):
        assert g.precision == a.precision == (None if precision == "float32" else precision)
        assert g.path.startswith("fused") and not a.path.startswith("loop"), (g.path, a.path)
        assert close(g, a, rtol=RTOL[precision]), (g.metrics, a.metrics)


def nan_at_third_step(monkeypatch):
    """The word LM's runs with lr 0.75 get a NaN loss at their third step (epoch 2, batch 1); three runs of
    one group, the middle one so."""
    real_stepper = WordLMTask.group_stepper.__func__

    def stepper(cls, tasks, graphed=True):
        real_step = real_stepper(cls, tasks, graphed)

        def step(start):
            outs = real_step(start)
            for t, out in zip(tasks, outs):
                t.steps = getattr(t, "steps", 0) + 1
                if t.cfg.lr == 0.75 and t.steps == 3:
                    out["loss"] = out["loss"] * float("nan")
            return outs
        return step
    monkeypatch.setattr(WordLMTask, "group_stepper", classmethod(stepper))
    runs = members("word_lm")[:2]
    runs.insert(1, (runs[0][0].replace(lr=0.75), 0))
    return runs


def test_a_member_that_diverges_stops_alone_recorded_as_alone_and_the_others_finish(tmp_path, monkeypatch, float64):
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    runs = nan_at_third_step(monkeypatch)
    errors = {}
    group = train_group(WordLMTask, runs, store=RunStore(tmp_path / "group"), progress=False, errors=errors)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache-alone"))  # the group kept its last good checkpoint
    with pytest.raises(train.NonFiniteLossError, match="epoch 2, batch 1"):
        train_run(WordLMTask, *runs[1], store=RunStore(tmp_path / "alone"), progress=False)
    alone = [train_run(WordLMTask, c, s, store=RunStore(tmp_path / "alone"), progress=False) for c, s in runs]
    assert list(errors) == [group[1].run_id] and "diverged" in errors[group[1].run_id]
    assert group[1].diverged == alone[1].diverged == {"epoch": 2, "batch": 1, "loss": "nan"}
    assert close(group[1], alone[1], rtol=1e-9) and len(group[1].curves) == 1 and group[1].metrics == {}
    for g, a in zip(group[::2], alone[::2]):
        assert not g.diverged and close(g, a, rtol=1e-9) and len(g.curves) == 2
    # a second call loads the diverged record: it is a result, not retried
    assert train_group(WordLMTask, runs, store=RunStore(tmp_path / "group"), progress=False)[1] == group[1]


def test_a_member_that_diverged_is_said_so_when_the_group_is_stopped_after(tmp_path, monkeypatch):
    """The group stops with an error after a member diverged (here at the end of that epoch): the caller's
    ``errors`` still says where it diverged, and its record is stored."""
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    runs = nan_at_third_step(monkeypatch)

    def stop(event, epoch, batch):
        if event == "epoch" and epoch >= 1:  # epoch 2, after the divergence at its first batch
            raise KeyboardInterrupt

    errors = {}
    store = RunStore(tmp_path / "group")
    with pytest.raises(KeyboardInterrupt):
        train_group(WordLMTask, runs, store=store, progress=False, errors=errors, callback=stop)
    diverged = run_id(*runs[1])
    assert list(errors) == [diverged] and "epoch 2, batch 1" in errors[diverged]
    assert store.load("word_lm", runs[1][0].scale, diverged).diverged == {"epoch": 2, "batch": 1, "loss": "nan"}


SWEEP = ["word_lm", "--scale", "ci", "--no-progress", "--fuse", "--set", "epochs=14",
         "--only", "forward=without forward dropout", "rate=0.25", "sampling=per-step"]  # 3 cells, one group
KILLS = 6  # at most 2 epochs a kill (kills.kill_repeatedly): 12 of the 14


def test_a_fused_group_killed_at_random_moments_resumes_every_member_to_the_uninterrupted_records(tmp_path):
    cmd, env, ref_root = sweep_command(tmp_path, "uninterrupted", SWEEP)
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    reference = stored_records(ref_root)
    assert len(reference) == 3 and all(len(r["group"]) == 3 for r in reference.values())

    cmd, env, root = sweep_command(tmp_path, "killed", SWEEP)
    kills = kill_repeatedly(cmd, env, root, KILLS, max_pause=0.3, epoch_s=epoch_seconds(reference))
    assert kills == KILLS, f"the group finished after {kills} kills: make it longer"
    assert len(list((root / "runs").rglob("*.json"))) < 3
    for rec in resume_to_the_end(cmd, env, root, reference).values():
        assert rec["segments"][-1]["group"] == rec["group"]


def test_the_campaign_fuses_stops_at_its_budget_packs_and_resumes_elsewhere_to_the_same_records(
        tmp_path, monkeypatch, float64):
    """The lent-GPU procedure on the CPU: a fused campaign stopped by its budget mid-epoch, its checkpoints
    packed and unpacked into another store and cache, and the group resumed there."""
    real_env = train.environment
    monkeypatch.setattr(train, "environment", lambda device: {**real_env(device), "commit": "0123456789"})
    entry = Entry(experiment="word_lm", scale="ci", why="test",
                  only={"forward": "without forward dropout", "rate": 0.5})
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "ref-cache"))
    reference = {r.run_id: r for r in run_campaign([entry], "cpu", 1, 3600, RunStore(tmp_path / "ref"), False,
                                                      fuse=True)["finished"] for r in [r.record]}
    assert len(reference) == 6 and all(len(r.group) == 6 for r in reference.values())

    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "runs")
    steps = {"n": 0}  # the budget ends after the group's third step, inside its second epoch
    monkeypatch.setattr(train, "time", types.SimpleNamespace(
        perf_counter=time.perf_counter, monotonic=time.monotonic,
        time=lambda: float("inf") if steps["n"] >= 3 else time.time()))
    _count_steps(monkeypatch, steps)
    out = run_campaign([entry], "cpu", 1, 3600, store, False, fuse=True)
    assert len(out["stopped"]) == 6 and not out["finished"]
    pack(tmp_path / "pack", out["stopped"], [], store)
    monkeypatch.setattr(train, "time", time)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache2"))
    there = RunStore(tmp_path / "runs2")
    assert unpack(tmp_path / "pack", there)["checkpoints"] == 6
    done = run_campaign([entry], "cpu", 1, 3600, there, False, fuse=True)["finished"]
    assert len(done) == 6
    for run in done:
        rec = run.record
        assert close(rec, reference[rec.run_id], rtol=0.0)
        assert [s["to_epoch"] for s in rec.segments][-1] == rec.config["epochs"]


def test_groups_are_formed_by_model_shape_and_seed_and_capped(store, monkeypatch):
    monkeypatch.setattr(sweep, "free_memory", lambda device: None)  # not this machine's memory: the grouping
    word = grid_rows("word_lm", "ci", seeds=[0, 1], store=store)
    assert [len(g) for g in fuse_groups("word_lm", word, True)] == [52]  # one batch order whatever the seed
    assert [len(g) for g in fuse_groups("word_lm", word, 13)] == [13] * 4
    assert [len(g) for g in fuse_groups("word_lm", word, False)] == [1] * 52
    char = grid_rows("char_lm", "ci", seeds=[0, 1], only={"batch": "default"}, store=store)
    groups = fuse_groups("char_lm", char, True)
    assert [len(g) for g in groups] == [26, 26]  # its seed orders its batches
    assert all(len({r.seed for r in g}) == 1 for g in groups)


def test_the_runs_with_a_checkpoint_train_together_and_first(store):
    entry = Entry(experiment="word_lm", scale="ci", why="test")
    runs = [campaign.Pending.of(r, entry, resumable=i in (3, 4), unclean_record=False)
            for i, r in enumerate(grid_rows("word_lm", "ci", store=store))]
    ids = [r.run_id for r in runs]
    groups = campaign.campaign_groups(runs, 2, "cpu")
    assert [[ids.index(r.run_id) for r in g] for g in groups[:3]] == [[3, 4], [0, 1], [2, 5]]
    assert [[ids.index(r.run_id) for r in g]
            for g in campaign.campaign_groups(runs, False, "cpu")[:3]] == [[3], [4], [0]]


@pytest.mark.parametrize("fuse,message", [(0, "at least 1"), (-2, "at least 1"), (2.5, "at least 1"),
                                          ("8", "at least 1")])
def test_a_bad_cap_is_a_clear_error(store, fuse, message):
    with pytest.raises(ValueError, match=message):
        run_grid("word_lm", "ci", store=store, fuse=fuse)


def test_fuse_on_runs_that_cannot_share_a_model_is_a_clear_error(store):
    with pytest.raises(ValueError, match="cannot share one model"):
        run_grid("temporal_order", "ci", store=store, fuse=True)
    a, b = members("word_lm")[0][0], members("word_lm")[0][0].replace(hidden_size=8)
    with pytest.raises(ValueError, match="cannot train as one group"):
        train_group(WordLMTask, [(a, 0), (b, 0)], store=store, progress=False)
    with pytest.raises(ValueError, match="trains one run at a time"):
        train_group(sweep.experiments.get("temporal_order")[0],
                    [(TemporalOrderConfig.at_scale("ci"), 0), (TemporalOrderConfig.at_scale("ci"), 1)], store=store)
    with pytest.raises(ValueError, match="engine='local'"):
        run_grid("word_lm", "ci", store=store, fuse=True, engine="ray")


def test_tf32_is_a_gpu_option_and_the_stamp_reports_each_precision(store):
    with pytest.raises(ValueError, match="GPU's tensor-core format"):
        run_grid("word_lm", "ci", store=store, precision="tf32")
    with pytest.raises(ValueError, match="precision='fp16' is not valid"):
        train.set_precision("fp16", "cpu")
    from recdrop.report import stamp
    record = {"config": {"scale": "paper"}, "finished": "2026-11-25", "hardware": "H100", "torch": "2.13",
              "commit": "abc", "run_id": "x"}
    rows = [row(run_id="x", config="c", record={**record, "precision": "tf32"}),
            row(run_id="y", config="d", record={**record, "run_id": "y"})]
    assert stamp(rows).endswith("| float32 in 1 of the runs | TF32 products in 1 of the runs")
    assert stamp(rows[1:]).endswith("| float32 throughout")
    rows.append(row(run_id="z", config="e", record={**record, "run_id": "z", "segments": [{"precision": "bf16"}]}))
    # z resumed: a stretch in bf16, its last in float32; it counts under each (the counts need not sum to the runs)
    assert stamp(rows).endswith("| float32 in 2 of the runs | TF32 products in 1 of the runs | bf16 autocast in 1 "
                                "of the runs (a resumed run counts under each it used)")
    # before 295cd5e a GPU run without recurrent dropout ran cuDNN's kernels in torch's default, TF32, unrecorded
    pilot = {**record, "device": "cuda", "config": {"scale": "paper", "recurrent_dropout": 0.0}}
    rows = [row(run_id="p", config="p", record={**pilot, "run_id": "p", "finished": "2026-11-23T08:55:00"}),
            row(run_id="q", config="q", record={**pilot, "run_id": "q", "finished": "2026-11-26T01:19:00"}),
            row(run_id="r", config="r", record={**pilot, "run_id": "r", "finished": "2026-11-23T08:55:00",
                                                "config": {"scale": "paper", "recurrent_dropout": 0.25}})]
    assert stamp(rows).endswith("| float32 in 2 of the runs | cuDNN's default TF32 in 1 of the runs")


def test_a_group_that_would_not_fit_the_device_is_refused_before_it_starts(store, monkeypatch):
    per_run = WordLMTask.group_bytes(WordLMConfig.at_scale("paper"), 1)
    monkeypatch.setattr(sweep, "free_memory", lambda device: 5 * per_run)
    with pytest.raises(ValueError, match=r"a group of 26 runs .* cap the groups at 4 runs"):
        run_grid("word_lm", "paper", store=store, fuse=True)
    assert not list(store.root.rglob("*.json")) and not store.checkpoint_path("word_lm", "x").parent.exists()


def test_the_sweep_command_line_takes_fuse_with_and_without_a_cap(capsys, store):
    assert sweep.main(["word_lm", "--scale", "ci", "--fuse", "0", "--no-progress"]) == 1
    assert "at least 1" in capsys.readouterr().err
    assert sweep.main(["temporal_order", "--scale", "ci", "--fuse", "--no-progress"]) == 1
    assert "cannot share one model" in capsys.readouterr().err


@pytest.mark.parametrize("chunk", [None, 1, 2])
def test_the_batched_loss_of_a_group_is_each_runs_own_cross_entropy_a_chunk_of_steps_at_a_time(chunk):
    """``group_decoder_nll`` (a group's decoders and loss, off the CPU; ``chunk`` steps at a time) against
    torch's cross-entropy of each run's own logits, the value and the gradients of outputs and decoder."""
    g = torch.Generator().manual_seed(0)
    y = torch.randn(5, 3, 4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(7, (5, 4), generator=g)
    weights = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)  # each run's loss its own gradient
    expected = torch.stack([torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(y[:, r], w[r], b[r]).reshape(-1, 7), targets.reshape(-1)) for r in range(3)])
    want = torch.autograd.grad((expected * weights).sum(), (y, w, b))
    got = group_decoder_nll(y, w, b, targets, chunk)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    for a, e in zip(torch.autograd.grad((got * weights).sum(), (y, w, b)), want):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="needs outputs"):
        group_decoder_nll(y, w[:2], b[:2], targets)


def _stop_after_steps(monkeypatch, n):
    """The trainer's clock passes any deadline after ``n`` more group steps of the word LM."""
    steps = {"n": 0}
    monkeypatch.setattr(train, "time", types.SimpleNamespace(
        perf_counter=time.perf_counter, monotonic=time.monotonic,
        time=lambda: float("inf") if steps["n"] >= n else 0.0))
    _count_steps(monkeypatch, steps)


def _count_steps(monkeypatch, steps):
    """``steps["n"]`` counts the word LM's group steps the trainer takes (``group_stepper``'s calls)."""
    real_stepper = WordLMTask.group_stepper.__func__

    def stepper(cls, tasks, graphed=True):
        step = real_stepper(cls, tasks, graphed)
        return lambda start: (steps.__setitem__("n", steps["n"] + 1), step(start))[1]
    monkeypatch.setattr(WordLMTask, "group_stepper", classmethod(stepper))


def test_members_checkpointed_at_different_places_catch_up_and_finish_as_one_group(tmp_path, monkeypatch, float64):
    """A kill between the renames of a group's checkpoints leaves its members at different places: the
    runs behind train alone until they reach the others, then all go on as the one group."""
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache-ref"))
    runs = members("word_lm")[:3]
    reference = train_group(WordLMTask, runs, store=RunStore(tmp_path / "ref"), progress=False)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "runs")
    with monkeypatch.context() as m:
        _stop_after_steps(m, 1)  # the first run stops after its first step (epoch 1, batch 1) ...
        with pytest.raises(train.BudgetExhausted):
            train_group(WordLMTask, runs[:1], store=store, progress=False, deadline=1.0)
    with monkeypatch.context() as m:
        _stop_after_steps(m, 3)  # ... the two others after three (epoch 2, batch 1)
        with pytest.raises(train.BudgetExhausted):
            train_group(WordLMTask, runs[1:], store=store, progress=False, deadline=1.0)
    resumed = train_group(WordLMTask, runs, store=store, progress=False)
    for r, ref in zip(resumed, reference):
        assert close(r, ref, rtol=1e-9)
        assert r.group == ref.group == [run_id(c, s) for c, s in runs]  # one group at the end
        assert r.segments[-1]["group"] == r.group and r.segments[-1]["from_epoch"] == 1.5


def test_a_member_whose_checkpoint_does_not_load_fails_alone_and_the_others_finish(tmp_path, monkeypatch):
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "runs")
    runs = members("word_lm")[:3]
    bad = store.checkpoint_path("word_lm", run_id(*runs[1]))
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(train.GroupMemberError,
                       match=f"(?s)1 of 3 runs could not start.*{run_id(*runs[1])}: checkpoint"):
        train_group(WordLMTask, runs, store=store, progress=False)
    assert [store.has("word_lm", "ci", run_id(c, s)) for c, s in runs] == [True, False, True]


def test_a_checkpoint_from_another_kind_of_device_resumes_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "runs")
    config, seed = members("word_lm")[2]
    with monkeypatch.context() as m:
        _stop_after_steps(m, 1)
        with pytest.raises(train.BudgetExhausted):
            train_run(WordLMTask, config, seed, store=store, progress=False, deadline=1.0)
    path = store.checkpoint_path("word_lm", run_id(config, seed))
    ck = torch.load(path, weights_only=True)
    assert ck["generator_device"] == "cpu"
    ck.update(generator=torch.zeros(16, dtype=torch.uint8), generator_device="cuda")  # a GPU generator's state
    torch.save(ck, path)
    with pytest.warns(UserWarning, match="resumes on a cpu from a checkpoint of a cuda"):
        record = train_run(WordLMTask, config, seed, store=store, progress=False)
    assert record.metrics["epoch"] == config.epochs and record.segments


def test_a_fused_campaign_trains_the_experiments_that_cannot_fuse_one_run_at_a_time(tmp_path, monkeypatch):
    real_env = train.environment
    monkeypatch.setattr(train, "environment", lambda device: {**real_env(device), "commit": "0123456789"})
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    entries = [Entry(experiment="temporal_order", scale="ci", why="test", only={"length": "short", "scheme": "moon"}),
               Entry(experiment="word_lm", scale="ci", why="test", only={"forward": "without forward dropout",
                                                                         "rate": 0.25, "sampling": "per-step"})]
    out = run_campaign(entries, "cpu", 1, 3600, RunStore(tmp_path / "runs"), False, fuse=True)
    records = [r.record for r in out["finished"]]
    assert len(records) == 4 + 3 and not out["failed"]
    assert [len(r.group or [r.run_id]) for r in records if r.experiment == "temporal_order"] == [1] * 4
    assert [len(r.group) for r in records if r.experiment == "word_lm"] == [3] * 3
