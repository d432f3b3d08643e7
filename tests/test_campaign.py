"""The campaign runner: its list, its time budget, resuming, packing for a lent GPU, clean records."""
import dataclasses
import itertools
import json
import multiprocessing
import os
import re
import time
import types

import pytest
import torch

from recdrop import campaign, estimates, runner, sweep, train
from recdrop.campaign import Entry, Pending, load_campaign, pack, parse_budget, pending_runs, run_campaign, unpack
from recdrop.config import run_id
from recdrop.experiments.temporal_order import TemporalOrderConfig, TemporalOrderTask
from recdrop.store import DirtyTreeError, RunStore, cache_dir, hardware, load_checkpoint
from recdrop.sweep import grid_rows, run_grid
from recdrop.train import BudgetExhausted, train_run

CI_ENTRY = Entry(experiment="temporal_order", scale="ci", why="test", only={"length": "short", "scheme": "semeniuta"})
CI_TOML = ('[[entry]]\nexperiment = "temporal_order"\nscale = "ci"\nwhy = "test"\n'
           'only = {length = "short", scheme = "semeniuta"}\n')


@pytest.fixture
def clean_code(monkeypatch):
    """Records stamped with a clean commit, whatever the state of this checkout."""
    real = train.environment
    monkeypatch.setattr(train, "environment", lambda device: {**real(device), "commit": "0123456789"})


def ci_config(**kw):
    return TemporalOrderConfig.at_scale("ci", **{"epochs": 3, **kw})


@pytest.fixture
def stop_after(monkeypatch):
    """``stop_after(event, epoch, batch)`` gives a callback that moves the trainer's clock past any
    deadline at that point, so the run stops there as it would at the end of its budget."""
    state = {"late": False}
    monkeypatch.setattr(train, "time", types.SimpleNamespace(
        perf_counter=time.perf_counter, monotonic=time.monotonic,
        time=lambda: float("inf") if state["late"] else 0.0))

    def make(*at):
        state["late"] = False

        def callback(*where):
            state["late"] = state["late"] or where == at
        return callback
    return make


@pytest.mark.parametrize("text,seconds", [("2h30m", 9000), ("9m", 540), ("45s", 45), ("1h", 3600),
                                          ("8m50s", 530), ("0.5h", 1800)])
def test_budgets(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10", "5d", "m", "0m", "0h0m0s"])
def test_bad_budgets_are_refused(text):
    with pytest.raises(ValueError, match="time budget"):
        parse_budget(text)


@pytest.mark.parametrize("path", [campaign.CAMPAIGN, campaign.CAMPAIGN.with_name("campaign-gpu.toml")])
def test_the_committed_campaign_names_real_grids(store, path):
    entries = load_campaign(path)
    assert entries and all(e.why for e in entries)
    for e in entries:
        assert grid_rows(e.experiment, e.scale, e.seeds, e.grid, e.only, store)


@pytest.mark.parametrize("text,message", [
    ('[[entry]]\nexperiment="word_lm"\nscale="ci"\nwhy="x"\ncolour="red"\n', "unknown keys"),
    ('[[entry]]\nexperiment="word_lm"\nscale="ci"\n', "lacks"),
    ('[[entry]]\nexperiment="word_lm"\nscale="ci"\nwhy="x"\ndevices=["tpu"]\n', "devices"),
    ('[[entry]]\nexperiment="word_lm"\nscale="ci"\nwhy="x"\nseeds=[-1]\n', "seeds"),
    ('title = "nothing"\n', "no \\[\\[entry\\]\\]"),
    ('[[entry]\n', "cannot be read"),
    ('[entry]\nexperiment="word_lm"\nscale="ci"\nwhy="x"\n', "a \\[\\[entry\\]\\] header"),  # one entry, not a list
    ('entry = [1, 2]\n', "a table of its own"),
])
def test_a_bad_campaign_file_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "campaign.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_campaign(path)


def test_a_run_stopped_at_its_deadline_resumes_to_the_same_record(store, tmp_path, stop_after):
    cfg = ci_config(recurrent_dropout=0.5)
    straight = train_run(TemporalOrderTask, cfg, seed=1, store=RunStore(tmp_path / "other"), progress=False)
    with pytest.raises(BudgetExhausted, match="stopped at the time budget in epoch 2, batch 3"):
        train_run(TemporalOrderTask, cfg, seed=1, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 1, 2))
    assert store.checkpoint_path("temporal_order", run_id(cfg, 1)).exists()
    resumed = train_run(TemporalOrderTask, cfg, seed=1, store=store, progress=False)
    assert resumed.curves == straight.curves and resumed.metrics == straight.metrics
    first, second = resumed.segments
    n = cfg.train_batches
    assert (first["from_epoch"], first["to_epoch"]) == (0.0, round(1 + 3 / n, 4))
    assert (second["from_epoch"], second["to_epoch"]) == (first["to_epoch"], 3.0)
    assert "segments" not in straight.json()  # a run trained in one go keeps the record format it had


def test_a_run_past_its_deadline_does_not_start(store):
    with pytest.raises(BudgetExhausted, match="before it started"):
        train_run(TemporalOrderTask, ci_config(), store=store, progress=False, deadline=time.time() - 1)
    assert not store.checkpoint_path("temporal_order", run_id(ci_config(), 0)).exists()


def test_the_campaign_runs_what_is_missing_in_order_and_reruns_unclean_records(tmp_path, store, clean_code,
                                                                               monkeypatch, capsys):
    (tmp_path / ".git").mkdir()  # the store's records are committed: it keeps only clean ones
    monkeypatch.setattr(campaign, "git_commit", lambda: "0123456789")
    entries = [CI_ENTRY]
    todo = pending_runs(entries, "cpu", store)
    assert [r["sampling"] for r in todo] == ["per-step", "per-sequence"]
    out = run_campaign(entries, "cpu", 1, 600.0, store, progress=False)
    assert len(out["finished"]) == 2 and not out["stopped"] + out["failed"] + out["not_started"]
    # without bars too, its log says what is pending, then each run as it settles, in order, timestamped
    log = [line.split(" campaign: ", 1) for line in capsys.readouterr().out.splitlines() if " campaign: " in line]
    assert [time.strptime(stamp, "%Y-%m-%d %H:%M:%S") for stamp, _ in log]
    assert log[0][1].startswith("2 runs pending in 2 groups, 1 at a time, until ")
    assert len(log) == 3 and all(re.fullmatch(rf"finished {re.escape(r.label())} in \d+ min; {i} of 2 settled", what)
                                 for i, (r, (_, what)) in enumerate(zip(todo, log[1:]), 1))
    assert pending_runs(entries, "cpu", store) == []
    # a record from uncommitted code is run again and replaced
    rec = out["finished"][0].record
    path = store.path("temporal_order", "ci", rec.run_id)
    path.write_text(json.dumps({**rec.json(), "commit": "0123456789-dirty", "finished": "never"}))
    rerun = [r for r in pending_runs(entries, "cpu", store) if r.run_id == rec.run_id]
    assert rerun and rerun[0].unclean_record
    run_campaign(entries, "cpu", 1, 600.0, store, progress=False)
    assert json.loads(path.read_text())["finished"] != "never"


def test_the_campaign_and_the_sweep_agree_on_what_is_done(tmp_path, store, clean_code, monkeypatch):
    """One rule (``RunStore.is_done``): a diverged run's record finishes it; a record of uncommitted code
    finishes it in a scratch store, and not in one whose records are committed."""
    out = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False)
    dirty, diverged = (r.record for r in out["finished"])
    store.path("temporal_order", "ci", dirty.run_id).write_text(
        json.dumps({**dirty.json(), "commit": "0123456789-dirty"}))
    path = store.path("temporal_order", "ci", diverged.run_id)
    path.write_text(json.dumps({**diverged.json(), "metrics": {}, "diverged": {"epoch": 1, "batch": 2, "loss": "nan"}}))
    rows = run_grid("temporal_order", "ci", only=CI_ENTRY.only, store=store, progress=False)  # trains nothing
    assert [r.done for r in rows] == [True, True] and pending_runs([CI_ENTRY], "cpu", store) == []
    assert rows[1].record is None and rows[1].diverged["epoch"] == 1
    (tmp_path / ".git").mkdir()
    for module in (campaign, sweep):
        monkeypatch.setattr(module, "git_commit", lambda: "0123456789")
    assert [r.run_id for r in pending_runs([CI_ENTRY], "cpu", store)] == [dirty.run_id]
    rows = run_grid("temporal_order", "ci", only=CI_ENTRY.only, store=store, progress=False)
    assert rows[0].record.commit == "0123456789" and pending_runs([CI_ENTRY], "cpu", store) == []


def test_entries_kept_to_a_device_start_only_there_but_resume_anywhere(store, stop_after):
    entries = [Entry(**{**CI_ENTRY.__dict__, "devices": ("cuda",)})]
    assert pending_runs(entries, "cpu", store) == []
    cfg = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)[0].config
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, cfg, store=store, progress=False, deadline=1.0, callback=stop_after("batch", 0, 1))
    assert [r.run_id for r in pending_runs(entries, "cpu", store)] == [run_id(cfg, 0)]


def test_a_spent_budget_starts_nothing(store):
    out = run_campaign([CI_ENTRY], "cpu", 1, 0.0, store, progress=False)
    assert len(out["not_started"]) == 2 and not out["finished"] + out["stopped"] + out["failed"]
    rows = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)
    assert not any(store.checkpoint_path("temporal_order", r.run_id).exists() for r in rows)
    assert not any(r.record for r in rows)


def test_whole_runs_start_only_where_their_expected_time_ends_within_the_budget(store, monkeypatch):
    expected = {}  # run id -> expected seconds (None: no stored run like it to time)
    monkeypatch.setattr(campaign, "pending_seconds",
                        lambda run, store, device=None, hardware=None: expected.get(run.run_id))
    rows = pending_runs([CI_ENTRY], "cpu", store)
    expected.update({rows[0].run_id: 1e6, rows[1].run_id: None})  # the first would not end within 600 s
    out = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False, whole_runs=True)
    assert [r.run_id for r in out["not_started"]] == [rows[0].run_id]  # and the one of no known cost runs
    assert [r.run_id for r in out["finished"]] == [rows[1].run_id]
    assert "would not end within the time budget" in out["not_started"][0].error
    assert not store.checkpoint_path("temporal_order", rows[0].run_id).exists()
    expected[rows[0].run_id] = 1.0
    assert len(run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False, whole_runs=True)["finished"]) == 1


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_budget_stops_a_run_midway_and_the_next_call_resumes_it(store, clean_code, monkeypatch, jobs):
    calls = itertools.count()  # the trainer's clock: before any deadline for its first 3 readings, then past it
    monkeypatch.setattr(train, "time", types.SimpleNamespace(perf_counter=time.perf_counter, monotonic=time.monotonic,
                                                             time=lambda: 0.0 if next(calls) < 3 else float("inf")))
    if jobs > 1:  # forked workers (one thread each) share the clock above; spawned ones would import the real one
        fork = multiprocessing.get_context("fork")
        monkeypatch.setattr(runner.mp, "get_context", lambda method: fork)
        monkeypatch.setattr(os, "cpu_count", lambda: jobs)
    out = run_campaign([CI_ENTRY], "cpu", jobs, 600.0, store, progress=False)
    assert out["stopped"] and not out["finished"] + out["failed"]
    assert len(out["stopped"]) + len(out["not_started"]) == 2
    for row in out["stopped"]:
        assert "stopped at the time budget in epoch 1, batch 3" in row.error
        assert store.checkpoint_path("temporal_order", row.run_id).exists()
    monkeypatch.setattr(train, "time", time)
    again = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False)
    assert len(again["finished"]) == 2 and pending_runs([CI_ENTRY], "cpu", store) == []
    for row in out["stopped"]:
        first, _ = store.load("temporal_order", "ci", row.run_id).segments
        assert first["to_epoch"] == 0.75  # 3 of its 4 batches
        assert not store.checkpoint_path("temporal_order", row.run_id).exists()


@pytest.mark.parametrize("refused_by", ["a deadline passed", "start_by"])
def test_a_run_with_a_checkpoint_refused_before_it_starts_is_not_started(store, monkeypatch, stop_after, refused_by):
    """Its checkpoint is the one it came with: the call neither trained nor saved it."""
    rows = pending_runs([CI_ENTRY], "cpu", store)
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, rows[0].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 0, 1))
    monkeypatch.setattr(train, "time", time)
    ckpt = store.checkpoint_path("temporal_order", rows[0].run_id)
    came_with = ckpt.read_bytes()
    if refused_by == "start_by":  # whole runs: neither would end within the budget
        monkeypatch.setattr(campaign, "pending_seconds", lambda run, store, device=None, hardware=None: 1e6)
        out = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False, whole_runs=True)
    else:
        out = run_campaign([CI_ENTRY], "cpu", 1, 0.0, store, progress=False)
    assert [r.run_id for r in out["not_started"]] == [r.run_id for r in rows]  # the one that resumes first
    assert not out["stopped"] + out["finished"] + out["failed"]
    assert ckpt.read_bytes() == came_with


def test_a_run_that_resumes_and_stops_again_is_stopped(store, monkeypatch, stop_after):
    rows = pending_runs([CI_ENTRY], "cpu", store)
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, rows[0].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 0, 1))
    calls = itertools.count()  # the trainer's clock: before the deadline at its start and first batch, then past it
    monkeypatch.setattr(train, "time", types.SimpleNamespace(perf_counter=time.perf_counter, monotonic=time.monotonic,
                                                             time=lambda: 0.0 if next(calls) < 2 else float("inf")))
    out = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False)
    assert [r.run_id for r in out["stopped"]] == [rows[0].run_id]  # after its 3rd and 4th batches
    assert [r.run_id for r in out["not_started"]] == [rows[1].run_id]
    assert load_checkpoint(store.checkpoint_path("temporal_order", rows[0].run_id))["batch"] == 4


def test_records_from_unclean_code_are_refused_where_they_can_be_committed(tmp_path, store):
    rec = train_run(TemporalOrderTask, ci_config(epochs=1), store=store, progress=False)
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed = RunStore(tmp_path / "repo" / "data" / "runs")
    for commit in ("0123456789-dirty", "unknown"):
        with pytest.raises(DirtyTreeError, match="not a clean commit"):
            committed.save({**rec.json(), "commit": commit})
    with pytest.raises(DirtyTreeError):  # a resumed run whose first stretch ran unclean code
        committed.save({**rec.json(), "commit": "0123456789", "segments": [{"commit": "abcdef0123-dirty"}]})
    with pytest.raises(DirtyTreeError, match="abcdef0123-dirty"):  # resumed from such a checkpoint
        committed.save({**rec.json(), "commit": "0123456789", "resumed_from_commit": "abcdef0123-dirty"})
    assert committed.save({**rec.json(), "commit": "0123456789"}).exists()
    assert RunStore(tmp_path / "scratch").save({**rec.json(), "commit": "0123456789-dirty"}).exists()


def test_the_campaign_refuses_to_start_from_unclean_code_for_a_committed_store(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.setattr(campaign, "git_commit", lambda: "0123456789-dirty")
    with pytest.raises(RuntimeError, match="worktree pinned at a commit"):
        run_campaign([CI_ENTRY], "cpu", 1, 60.0, RunStore(tmp_path / "runs"), progress=False)


def test_pack_and_unpack_carry_records_and_checkpoints(store, tmp_path, monkeypatch, stop_after, clean_code):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    finished = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, rows[1].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 0, 1))
    ckpt = store.checkpoint_path("temporal_order", rows[1].run_id)
    parts = pack(tmp_path / "out", rows, [finished], store)
    assert parts
    # another machine: an empty store and cache
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache2"))
    there = RunStore(tmp_path / "runs2")
    assert unpack(tmp_path / "out", there) == {"records": 1, "checkpoints": 1, "kept": 0, "refused": []}
    assert there.load("temporal_order", "ci", finished.run_id) == finished
    assert there.checkpoint_path("temporal_order", rows[1].run_id).read_bytes() == ckpt.read_bytes()
    assert unpack(tmp_path / "out", there)["kept"] == 1  # a clean record already there is kept
    # the resumed run finishes there
    assert train_run(TemporalOrderTask, rows[1].config, store=there, progress=False).segments


def _first_stopped_midway(store, stop_after):
    """The CI entry's pending runs, the first of them stopped by the budget after 2 batches: (runs, its checkpoint)."""
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, rows[0].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 0, 1))
    return rows, store.checkpoint_path("temporal_order", rows[0].run_id)


def test_unpack_leaves_out_the_checkpoint_of_a_run_in_training(store, tmp_path, stop_after, clean_code):
    rows, ckpt = _first_stopped_midway(store, stop_after)
    pack(tmp_path / "out", rows, [], store)
    ckpt.unlink()
    with store.hold_runs("temporal_order", [rows[0].run_id]):  # a campaign training it here
        counts = unpack(tmp_path / "out", store)
    assert counts["checkpoints"] == 0 and not ckpt.exists()
    assert len(counts["refused"]) == 1 and "is left out: run temporal_order/" in counts["refused"][0]
    assert unpack(tmp_path / "out", store)["checkpoints"] == 1 and ckpt.exists()  # once it is free


def test_unpack_leaves_out_the_record_of_a_run_in_training(store, tmp_path, clean_code):
    """A record unpacked while a campaign here trains its run would be replaced by that run's own record
    when it ends: it is refused until the run is free."""
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    finished = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    pack(tmp_path / "out", [], [finished], store)
    there = RunStore(tmp_path / "runs2")
    with there.hold_runs("temporal_order", [finished.run_id]):  # a campaign training it there
        counts = unpack(tmp_path / "out", there)
    assert counts["records"] == 0 and not there.has("temporal_order", "ci", finished.run_id)
    assert len(counts["refused"]) == 1 and "being trained by another process" in counts["refused"][0]
    assert unpack(tmp_path / "out", there)["records"] == 1  # once it is free
    assert there.load("temporal_order", "ci", finished.run_id) == finished


def test_unpack_refuses_a_checkpoint_of_unclean_code_where_the_store_is_committed(store, tmp_path, stop_after,
                                                                                  clean_code, monkeypatch):
    """Such a checkpoint would not be resumed here (its run would start afresh), so it replaces nothing."""
    rows, ckpt = _first_stopped_midway(store, stop_after)
    torch.save({**load_checkpoint(ckpt), "commit": "0123456789-dirty"}, ckpt)  # trained by uncommitted code
    pack(tmp_path / "out", rows, [], store)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache2"))
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed = RunStore(tmp_path / "repo" / "data" / "runs")
    counts = unpack(tmp_path / "out", committed)
    assert counts["checkpoints"] == 0 and not committed.checkpoint_path("temporal_order", rows[0].run_id).exists()
    assert len(counts["refused"]) == 1 and "of code this store does not resume" in counts["refused"][0]
    assert unpack(tmp_path / "out", RunStore(tmp_path / "scratch"))["checkpoints"] == 1  # a scratch store resumes it


def test_pack_splits_into_parts_and_leaves_behind_what_does_not_fit(store, tmp_path, capsys, stop_after):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    for i, r in enumerate(rows):
        with pytest.raises(BudgetExhausted):
            train_run(TemporalOrderTask, r.config, store=store, progress=False, deadline=1.0,
                      callback=stop_after("batch", 0, i + 1))
    sizes = [store.checkpoint_path("temporal_order", r.run_id).stat().st_size for r in rows]
    part_bytes = 4096  # parts of 4 KiB: room for the first checkpoint and the tar's headers, not for both
    max_parts = -(-campaign._tar_size([sizes[0], 200]) // part_bytes)
    assert campaign._tar_size(sizes + [400]) > max_parts * part_bytes
    parts = pack(tmp_path / "out", rows, [], store, part_bytes=part_bytes, max_parts=max_parts)
    assert 2 <= len(parts) <= max_parts and all(p.stat().st_size <= part_bytes for p in parts)
    assert f"{rows[1].run_id}.pt did not fit" in capsys.readouterr().err
    there = RunStore(tmp_path / "runs2")
    assert unpack(tmp_path / "out", there)["checkpoints"] == 1


def test_pack_refuses_records_that_alone_do_not_fit(store, tmp_path):
    rows = pending_runs([CI_ENTRY], "cpu", store)
    records = [train_run(TemporalOrderTask, r.config, store=store, progress=False) for r in rows]
    sizes = [store.path("temporal_order", "ci", r.run_id).stat().st_size for r in records]
    part_bytes, max_parts = 4096, 2  # less than a tar of them takes, by whole 10 KiB records
    assert campaign._tar_size(sizes + [400]) > max_parts * part_bytes
    with pytest.raises(ValueError, match=f"the 2 records take more than {max_parts} parts"):
        pack(tmp_path / "out", [], records, store, part_bytes=part_bytes, max_parts=max_parts)
    assert not (tmp_path / "out").exists()


def test_the_pack_takes_the_unfinished_runs_in_campaign_order(store, tmp_path, monkeypatch, clean_code):
    """The most valuable checkpoints first, whatever stopped them: a failed run ahead of a stopped one."""
    first, second = pending_runs([CI_ENTRY], "cpu", store)
    monkeypatch.setattr(campaign, "run_campaign", lambda *args, **kwargs: {
        "finished": [], "diverged": [], "stopped": [second], "failed": [first], "not_started": []})
    packed = []
    monkeypatch.setattr(campaign, "pack", lambda out_dir, runs, records, store: packed.extend(runs))
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    campaign.main(["--for", "1m", "--no-progress", "--pack", str(tmp_path / "out"),
                   "--file", str(tmp_path / "campaign.toml")])
    assert packed == [first, second]


def test_a_pack_that_cannot_be_made_is_a_clear_error(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(campaign, "run_campaign", lambda *args, **kwargs: {
        "finished": [], "diverged": [], "stopped": [], "failed": [], "not_started": []})

    def too_big(*args):
        raise ValueError("pack: the 9 records take more than 6 parts of 10 MiB; nothing is packed")
    monkeypatch.setattr(campaign, "pack", too_big)
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    assert campaign.main(["--for", "1m", "--no-progress", "--pack", str(tmp_path / "out"),
                          "--file", str(tmp_path / "campaign.toml")]) == 1
    assert "error: pack: the 9 records take more than 6 parts" in capsys.readouterr().err  # no traceback


def test_unpack_keeps_a_further_checkpoint_and_none_for_a_run_with_a_record(store, tmp_path, stop_after, clean_code):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    ahead, done = [store.checkpoint_path("temporal_order", r.run_id) for r in rows]
    for r in rows:
        with pytest.raises(BudgetExhausted):
            train_run(TemporalOrderTask, r.config, store=store, progress=False, deadline=1.0,
                      callback=stop_after("batch", 0, 1))
    pack(tmp_path / "out", rows, [], store)  # both checkpoints at epoch 1, batch 2
    with pytest.raises(BudgetExhausted):  # here, the first goes on to epoch 2, batch 1
        train_run(TemporalOrderTask, rows[0].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 1, 0))
    train_run(TemporalOrderTask, rows[1].config, store=store, progress=False)  # and the second finishes
    further = ahead.read_bytes()
    assert unpack(tmp_path / "out", store) == {"records": 0, "checkpoints": 0, "kept": 2, "refused": []}
    assert ahead.read_bytes() == further and not done.exists()


def test_unpack_goes_on_past_a_refused_record_and_reports_it(store, tmp_path, monkeypatch, capsys, clean_code):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    records = sorted((train_run(TemporalOrderTask, r.config, store=store, progress=False) for r in rows),
                     key=lambda rec: rec.run_id)
    dirty, clean = records  # the refused one comes first in the pack
    store.path("temporal_order", "ci", dirty.run_id).write_text(
        json.dumps({**dirty.json(), "commit": "0123456789-dirty"}))
    pack(tmp_path / "out", [], records, store)
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed = RunStore(tmp_path / "repo" / "data" / "runs")
    counts = unpack(tmp_path / "out", committed)
    assert (counts["records"], counts["kept"]) == (1, 0)
    assert len(counts["refused"]) == 1 and dirty.run_id in counts["refused"][0]
    assert committed.load("temporal_order", "ci", clean.run_id) == clean
    assert not committed.has("temporal_order", "ci", dirty.run_id)
    # from the command line: what went in stays, the refusal is an error line and the exit status 1
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path / "repo" / "data" / "runs2"))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    assert campaign.main(["--unpack", str(tmp_path / "out"), "--list", "--file", str(tmp_path / "campaign.toml")]) == 1
    assert "error: unpack: run record" in capsys.readouterr().err
    assert RunStore(tmp_path / "repo" / "data" / "runs2").load("temporal_order", "ci", clean.run_id) == clean


def test_unpack_alone_brings_the_files_back_and_runs_nothing(store, tmp_path, monkeypatch, clean_code):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    record = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    pack(tmp_path / "out", [], [record], store)
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    campaigns = []
    monkeypatch.setattr(campaign, "run_campaign", lambda *a, **kw: campaigns.append(kw) or {
        outcome: [] for outcome in ("finished", "diverged", "stopped", "failed", "not_started")})
    for k, budget in enumerate([[], ["--for", "9m"]]):
        monkeypatch.setenv("RECDROP_RUNS", str(tmp_path / f"runs{k}"))
        assert campaign.main(["--unpack", str(tmp_path / "out"), "--file", str(tmp_path / "campaign.toml"),
                              *budget]) == 0
        assert RunStore(tmp_path / f"runs{k}").load("temporal_order", "ci", record.run_id) == record
        assert len(campaigns) == k  # only with a budget does a campaign follow the unpacking


def test_unpack_puts_records_in_first_and_reports_a_checkpoint_that_does_not_load(store, tmp_path, monkeypatch,
                                                                                   stop_after, clean_code):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    unfinished, done = (store.checkpoint_path("temporal_order", r.run_id) for r in rows)
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, rows[0].config, store=store, progress=False, deadline=1.0,
                  callback=stop_after("batch", 0, 1))
    finished = train_run(TemporalOrderTask, rows[1].config, store=store, progress=False)
    done.write_bytes(unfinished.read_bytes())  # a pack with a record and a checkpoint of one run
    pack(tmp_path / "out", rows, [finished], store)
    unfinished.write_bytes(b"not a checkpoint")
    pack(tmp_path / "out2", rows[:1], [], store)  # a pack whose checkpoint does not load
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache2"))  # another machine
    there = RunStore(tmp_path / "runs2")
    assert unpack(tmp_path / "out", there) == {"records": 1, "checkpoints": 1, "kept": 1, "refused": []}
    assert there.load("temporal_order", "ci", finished.run_id) == finished
    assert there.checkpoint_path("temporal_order", rows[0].run_id).exists()
    assert not there.checkpoint_path("temporal_order", rows[1].run_id).exists()
    # a pack's checkpoint that does not load is reported, and the local one stays
    local = there.checkpoint_path("temporal_order", rows[0].run_id)
    ours = local.read_bytes()
    counts = unpack(tmp_path / "out2", there)
    assert (counts["records"], counts["checkpoints"], counts["kept"]) == (0, 0, 0)
    assert len(counts["refused"]) == 1 and "is not a checkpoint that loads" in counts["refused"][0]
    assert local.read_bytes() == ours


def test_unpack_refuses_a_record_under_another_runs_name(store, tmp_path):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    finished = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    other = rows[1].run_id
    first = store.path("temporal_order", "ci", finished.run_id)
    store.path("temporal_order", "ci", other).write_bytes(first.read_bytes())
    # the first run's record, named as the second
    pack(tmp_path / "out", [], [dataclasses.replace(finished, run_id=other)], store)
    there = RunStore(tmp_path / "runs2")
    with pytest.raises(ValueError, match=f"runs/temporal_order/ci/{other}.json .* holds the record of another run"):
        unpack(tmp_path / "out", there)
    assert not list(there.root.rglob("*.json"))


def test_a_damaged_pack_is_a_clear_error(store, tmp_path):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    finished = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    (part,) = pack(tmp_path / "out", rows, [finished], store)
    blob = bytearray(part.read_bytes())
    blob[blob.index(b'"curves"') + 2] ^= 0x01  # change a letter inside the record
    part.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="does not match its SHA-256 sum"):
        unpack(tmp_path / "out", RunStore(tmp_path / "runs2"))
    part.write_bytes(bytes(blob[:1000]))
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        unpack(tmp_path / "out", RunStore(tmp_path / "runs2"))
    part.unlink()
    with pytest.raises(FileNotFoundError, match="no campaign-pack"):
        unpack(tmp_path / "out", RunStore(tmp_path / "runs2"))


def test_the_list_estimates_a_runs_time_from_the_stored_runs_like_it(store):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    assert campaign.pending_seconds(rows[0], store) is None  # nothing of its kind has run
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    assert campaign.pending_seconds(rows[1], store) == rec.wall_time_s
    bigger = dataclasses.replace(rows[1], config=rows[1].config.replace(hidden_size=32))
    assert campaign.pending_seconds(bigger, store) is None  # another model size says nothing of it
    plain = dataclasses.replace(rows[1], config=rows[1].config.replace(recurrent_dropout=0.0))
    assert campaign.pending_seconds(plain, store) == rec.wall_time_s  # no run without dropout yet: any of its size
    plain_rec = train_run(TemporalOrderTask, plain.config, store=store, progress=False)
    assert campaign.pending_seconds(plain, store) == plain_rec.wall_time_s  # now the runs like it
    assert campaign.pending_seconds(rows[1], store) == rec.wall_time_s


def test_the_estimate_reads_the_newest_runs_and_what_a_resumed_run_has_left(store, stop_after):
    rows = [Pending.of(r, CI_ENTRY, False, False)
            for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)]
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    for i in range(estimates.RECENT_RUNS + 2):  # older runs, slower ones first, then the newest runs
        store.save({**rec.json(), "run_id": f"old{i}", "wall_time_s": 1000.0 if i < 2 else 10.0,
                    "finished": f"2000-01-0{i + 1}T00:00:00+00:00"})
    store.save({**rec.json(), "finished": "2000-02-01T00:00:00+00:00", "wall_time_s": 10.0})
    assert campaign.pending_seconds(rows[1], store) == pytest.approx(10.0)  # the slow old runs are not read
    cfg = rows[1].config  # stopped early in its second epoch, with a checkpoint
    n_batches = len(TemporalOrderTask(cfg, "cpu", 0).batches(0))
    with pytest.raises(BudgetExhausted):
        train_run(TemporalOrderTask, cfg, store=store, progress=False, deadline=1.0,
                  callback=stop_after("epoch", 0, n_batches))
    path = store.checkpoint_path("temporal_order", rows[1].run_id)
    ck = load_checkpoint(path)
    done = ck["epoch"] + ck["batch"] / n_batches
    assert 1 <= done < 2 and estimates.checkpoint_progress(path) == pytest.approx((done, ck["elapsed"]))
    resumable = dataclasses.replace(rows[1], resumable=True)
    assert campaign.pending_seconds(resumable, store) == pytest.approx(10.0 * (1 - done / cfg.epochs))
    elsewhere = RunStore(store.root.parent / "no-records")  # the same checkpoint, no run like it stored: its own pace
    elsewhere.checkpoint_path("temporal_order", rows[1].run_id).parent.mkdir(parents=True)
    elsewhere.checkpoint_path("temporal_order", rows[1].run_id).write_bytes(path.read_bytes())
    assert campaign.pending_seconds(resumable, elsewhere) == pytest.approx(ck["elapsed"] / done * (cfg.epochs - done))
    assert campaign.pending_seconds(rows[1], elsewhere) is None  # not resuming, and nothing like it
    store.checkpoint_path("temporal_order", rows[1].run_id).write_bytes(b"not a checkpoint")
    assert campaign.pending_seconds(resumable, store) == pytest.approx(10.0)  # unreadable: all of it


def test_the_estimate_reads_this_machines_runs_where_it_has_any(store):
    rows = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    store.path("temporal_order", "ci", rec.run_id).unlink()
    for i, (on, took) in enumerate([("Slow CPU (1 threads)", 4000.0), ("Slow CPU (2 threads)", 2500.0),
                                    ("Fast CPU (1 thread)", 1000.0)]):  # the first as records once wrote it
        store.save({**rec.json(), "run_id": f"run{i}", "hardware": on, "wall_time_s": took,
                    "finished": f"2100-01-0{i + 1}T00:00:00+00:00"})
    config = rows[1].config
    assert estimates.expected_seconds("temporal_order", config, store, hardware="Slow CPU (1 thread)") == 4000.0
    assert estimates.expected_seconds("temporal_order", config, store, hardware="Slow CPU (2 threads)") == 2500.0
    assert estimates.expected_seconds("temporal_order", config, store, hardware="Fast CPU (1 thread)") == 1000.0
    # a machine with no runs of its own: all of them, as without ``hardware``
    assert (estimates.expected_seconds("temporal_order", config, store, hardware="Other CPU (1 thread)")
            == estimates.expected_seconds("temporal_order", config, store) == 2500.0)


def test_a_sweep_forecasts_its_time_by_the_stored_runs_like_its_own_on_its_kind_of_device(store):
    rows = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    for i in range(estimates.RECENT_RUNS):  # the newest runs on a CPU took an hour each; one on a GPU, a minute
        store.save({**rec.json(), "run_id": f"cpu{i}", "wall_time_s": 3600.0,
                    "finished": f"2100-01-0{i + 1}T00:00:00+00:00"})
    store.save({**rec.json(), "run_id": "gpu", "device": "cuda:0", "wall_time_s": 60.0,
                "finished": "2100-02-01T00:00:00+00:00"})
    config = rows[1].config
    assert estimates.expected_seconds("temporal_order", config, store, device="cpu") == 3600.0
    store.save({**rec.json(), "run_id": "fused", "group": ["fused", "cpu0"], "wall_time_s": 1.0,  # a group's share
                "finished": "2100-03-01T00:00:00+00:00"})
    assert (estimates.expected_seconds("temporal_order", config, store, device="cpu")
            == pytest.approx((3 * 3600 + 1) / 4))
    assert estimates.expected_seconds("temporal_order", config, store, device="cpu", alone=True) == 3600.0
    assert estimates.expected_seconds("temporal_order", config, store, device="cuda", alone=True) == 60.0
    store.path("temporal_order", "ci", "fused").unlink()
    assert estimates.expected_seconds("temporal_order", config, store, device="cuda:0") == 60.0
    assert estimates.expected_seconds("temporal_order", config, store) == pytest.approx((3 * 3600.0 + 60.0) / 4)
    todo = rows[:2]  # (forecast times whatever it is given)
    assert sweep.forecast("temporal_order", "ci", todo, "cpu", 1, store) == (
        "sweep temporal_order (ci): 2 runs of 2 epochs to train, about 2.0 h running 1 at a time, going by the stored "
        "runs like "
        "them trained alone on cpu; another machine differs")
    assert "about 60 min running 2 at a time" in sweep.forecast("temporal_order", "ci", todo, "cpu", 2, store)
    assert "about 1 min running 2 at a time" in sweep.forecast("temporal_order", "ci", todo, "cuda", 4, store)  # 2 runs
    store.save({**rec.json(), "run_id": "gpu-long", "device": "cuda", "config": {**rec.config, "hidden_size": 32},
                "wall_time_s": 600.0, "finished": "2100-02-01T00:00:00+00:00"})
    long_and_short = [dataclasses.replace(todo[0], config=config.replace(hidden_size=32)), todo[1]]
    assert "about 10 min running 2 at a time" in sweep.forecast("temporal_order", "ci", long_and_short, "cuda", 2,
                                                                store)  # no sooner than its longest run
    bigger = [dataclasses.replace(todo[0], config=config.replace(hidden_size=32))]
    assert sweep.forecast("temporal_order", "ci", bigger + todo, "cpu", 1, store).endswith(
        "; 1 of them have none like them, not counted")
    assert sweep.forecast("temporal_order", "ci", bigger, "cpu", 1, store) == (
        "sweep temporal_order (ci): 1 run of 2 epochs to train; no stored run like them trained alone on cpu to say "
        "how long they take")
    scratch = RunStore(store.root.parent / "scratch")  # a scratch store's forecast reads the tracked store's runs
    assert "26 runs of 20 epochs to train, about" in sweep.forecast("word_lm", "reduced",
                                                      grid_rows("word_lm", "reduced", [9], store=scratch),
                                                      "cpu", 1, scratch)


def test_the_sweeps_forecast_trains_nothing_and_says_what_is_missing(store, monkeypatch, capsys):
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    only = ["--only", *(f"{k}={v}" for k, v in CI_ENTRY.only.items())]
    rows = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)
    assert sweep.main(["temporal_order", "--scale", "ci", "--forecast", *only]) == 0
    assert capsys.readouterr().out.startswith(f"sweep temporal_order (ci): {len(rows)} runs of 2 epochs to train")
    assert not store.records("temporal_order", "ci")
    for r in rows:
        train_run(TemporalOrderTask, r.config, store=store, progress=False)
    assert sweep.main(["temporal_order", "--scale", "ci", "--forecast", *only]) == 0
    assert capsys.readouterr().out == (f"sweep temporal_order (ci): all {len(rows)} runs are in {store.root}; nothing "
                                       "to train\n")
    assert sweep.main(["temporal_order", "--scale", "ci", "--forecast", "--fuse", *only]) == 1  # not a group's time
    assert "--forecast times runs trained alone" in capsys.readouterr().err


def test_the_command_line_runs_and_lists_a_campaign(store, tmp_path, monkeypatch, capsys, clean_code):
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    assert load_campaign(tmp_path / "campaign.toml") == [CI_ENTRY]
    file = ["--file", str(tmp_path / "campaign.toml")]
    assert campaign.main(["--list", *file]) == 0
    head, legend, *listed = capsys.readouterr().out.splitlines()
    assert head == (f"# store {store.root} (RECDROP_RUNS); list {tmp_path / 'campaign.toml'}; checkpoints "
                    f"{store.checkpoint_dir()} (in RECDROP_CACHE)")  # which store it read: the wrong one, all is new
    assert store.checkpoint_dir().parent.parent == cache_dir()
    assert legend.startswith("# new: no record; resumes: from its checkpoint; reruns:")
    assert [line.split()[0] for line in listed[:-1]] == ["new", "new"]
    assert listed[0].endswith("length=short scheme=semeniuta sampling=per-step scaling=paper seed=0")
    assert campaign.main(["--for", "10m", "--no-progress", *file]) == 0
    assert "campaign: 2 finished, 0 diverged (recorded), 0 stopped" in capsys.readouterr().out
    assert len(store.records("temporal_order", "ci")) == 2
    assert campaign.main(["--list", *file]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("about 0.0 hours")


def test_the_list_times_a_run_by_the_stored_runs_on_its_kind_of_device(store, tmp_path, monkeypatch, capsys,
                                                                       clean_code):
    """As the campaign plans: a GPU's runs say nothing of a CPU's time."""
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    rows = grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=store)
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    store.save({**rec.json(), "device": "cuda:0", "wall_time_s": 120.0})  # the one run like the pending one: a GPU's
    file = ["--file", str(tmp_path / "campaign.toml")]
    for device, minutes in (("cpu", "?"), ("cuda", "2 min")):
        assert campaign.main(["--list", "--device", device, *file]) == 0
        head, legend, pending, total = capsys.readouterr().out.splitlines()
        assert pending.startswith(f"{'new':8s} {minutes:>8s}  temporal_order/ci {rows[1].run_id}")
        assert f"the stored runs like it on a {device.upper()}" in legend


def test_the_list_refuses_a_device_that_is_not_one(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    assert campaign.main(["--list", "--device", "gpu", "--file", str(tmp_path / "campaign.toml")]) == 1
    assert "error: device='gpu' is not valid" in capsys.readouterr().err


def test_a_checkpoint_of_uncommitted_code_is_not_resumable_into_a_committed_store(tmp_path, monkeypatch):
    from recdrop.store import save_checkpoint
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed, scratch = RunStore(tmp_path / "repo" / "data" / "runs"), RunStore(tmp_path / "scratch")
    rid = pending_runs([CI_ENTRY], "cpu", committed)[0].run_id
    path = committed.checkpoint_path("temporal_order", rid)
    save_checkpoint(path, {"commit": "0123456789-dirty", "segments": []})
    save_checkpoint(scratch.checkpoint_path("temporal_order", rid), {"commit": "0123456789-dirty", "segments": []})
    assert not next(r for r in pending_runs([CI_ENTRY], "cpu", committed) if r.run_id == rid).resumable
    assert next(r for r in pending_runs([CI_ENTRY], "cpu", scratch) if r.run_id == rid).resumable
    save_checkpoint(path, {"commit": "0123456789", "segments": [{"commit": "0123456789"}]})
    assert next(r for r in pending_runs([CI_ENTRY], "cpu", committed) if r.run_id == rid).resumable


def test_a_run_that_diverges_is_recorded_packed_and_not_run_again(store, tmp_path, monkeypatch, capsys, clean_code):
    calls = itertools.count()
    real_step = TemporalOrderTask.train_step
    monkeypatch.setattr(TemporalOrderTask, "train_step",  # the first run's loss turns NaN in its 3rd batch
                        lambda self, batch: {**real_step(self, batch),
                                             **({"loss": float("nan")} if next(calls) == 2 else {})})
    monkeypatch.setenv("RECDROP_RUNS", str(store.root))
    (tmp_path / "campaign.toml").write_text(CI_TOML)
    file = ["--file", str(tmp_path / "campaign.toml")]
    with pytest.warns(RuntimeWarning, match="training loss is nan at epoch 1, batch 3; it is recorded as diverged"):
        assert campaign.main(["--for", "10m", "--no-progress", "--pack", str(tmp_path / "out"), *file]) == 0
    assert "campaign: 1 finished, 1 diverged (recorded), 0 stopped" in capsys.readouterr().out
    assert pending_runs([CI_ENTRY], "cpu", store) == []
    there = RunStore(tmp_path / "runs2")
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache2"))
    assert unpack(tmp_path / "out", there) == {"records": 2, "checkpoints": 0, "kept": 0, "refused": []}
    assert pending_runs([CI_ENTRY], "cpu", there) == []
    assert [r.diverged is not None for r in grid_rows("temporal_order", "ci", only=CI_ENTRY.only, store=there)] \
        == [True, False]


def test_the_sweep_and_the_campaign_share_the_cpus_out_alike(monkeypatch):
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 8)
    assert [runner.worker_threads(jobs) for jobs in (2, 3, 8, 16)] == [4, 2, 1, 1]
    assert runner.worker_threads(1) == torch.get_num_threads()  # one worker: torch's own default
    assert campaign.worker_threads is sweep.worker_threads is runner.worker_threads
    assert campaign.run_groups is sweep.run_groups is runner.run_groups  # one runner of groups


def _bench_rows(model, precision, steps_by_size, run_steps):
    return [{"model": model, "precision": precision, "runs": str(r), "group_s": str(s), "run_steps": str(run_steps)}
            for r, s in steps_by_size.items()]


def test_a_groups_time_comes_from_its_measured_step_interpolated_between_sizes():
    rows = _bench_rows("char", "bf16", {1: 0.002, 8: 0.009}, 39_050) + _bench_rows("word", "tf32", {1: 0.0013}, 82_900)
    margin = estimates.GROUP_MARGIN
    assert estimates.group_seconds(rows, "char_lm", "bf16", 8) == pytest.approx(margin * 0.009 * 39_050)
    assert estimates.group_seconds(rows, "char_lm", "bf16", 4) == pytest.approx(margin * 0.005 * 39_050)
    assert estimates.group_seconds(rows, "word_lm", "tf32", 1) == pytest.approx(margin * 0.0013 * 82_900)
    # beyond the largest size measured, at a precision not measured, or of a model not measured: unknown
    assert estimates.group_seconds(rows, "char_lm", "bf16", 9) is None
    assert estimates.group_seconds(rows, "char_lm", "tf32", 4) is None
    assert estimates.group_seconds(rows, "ner", "bf16", 1) is None


def test_fit_sizes_each_experiments_groups_to_the_time_left_in_the_campaigns_order():
    """Table 2's last two cells first (its entry's two runs, though six would fit), then the largest char
    group that finishes in the time they leave; a later entry's runs wait their turn."""
    word0, char0, word12 = (Entry(experiment=e, scale="paper", why="test", precision=p)
                            for e, p in (("word_lm", None), ("char_lm", "bf16"), ("word_lm", None)))
    todo = [types.SimpleNamespace(experiment=e.experiment, entry=e, config=types.SimpleNamespace(scale="paper"))
            for e, n in ((word0, 2), (char0, 26), (word12, 52)) for _ in range(n)]
    rows = (_bench_rows("word", "tf32", {1: 0.001, 26: 0.014}, 1000)
            + _bench_rows("char", "bf16", {1: 0.001, 26: 0.026}, 1000))
    word_pair = estimates.group_seconds(rows, "word_lm", "tf32", 2)
    budget = word_pair + estimates.group_seconds(rows, "char_lm", "bf16", 6) + 0.001
    assert campaign.fitting_caps(todo, rows, budget, "tf32") == {("word_lm", "paper"): 2, ("char_lm", "paper"): 6}
    assert campaign.fitting_caps(todo, rows, word_pair, "tf32") == {("word_lm", "paper"): 2}  # no char group finishes
    assert campaign.fitting_caps(todo, [], budget, "tf32") == {}  # nothing measured: nothing known to fit


def test_fit_sizes_a_reduced_scales_groups_by_that_scales_own_step_times():
    """Table 3 at the paper's scale, then its reduced seeds in float32: each scale's groups sized by its own
    rows (a row without a scale is the paper's); a scale not measured runs no group."""
    paper, reduced = (Entry(experiment="char_lm", scale=s, why="test", precision=p)
                      for s, p in (("paper", "bf16"), ("reduced", "float32")))
    todo = [types.SimpleNamespace(experiment="char_lm", entry=e, config=types.SimpleNamespace(scale=e.scale))
            for e, n in ((paper, 26), (reduced, 13)) for _ in range(n)]
    rows = (_bench_rows("char", "bf16", {1: 0.001, 26: 0.026}, 1000)
            + [{**r, "scale": "reduced"} for r in _bench_rows("char", "float32", {1: 0.001, 13: 0.004}, 500)])
    assert estimates.group_seconds(rows, "char_lm", "float32", 13) is None  # the paper's shapes: not measured
    whole = estimates.group_seconds(rows, "char_lm", "bf16", 26) + estimates.group_seconds(
        rows, "char_lm", "float32", 13, "reduced")
    assert campaign.fitting_caps(todo, rows, whole + 0.001, "tf32") == {("char_lm", "paper"): 26,
                                                                        ("char_lm", "reduced"): 13}
    assert campaign.fitting_caps(todo, rows[:2], whole, "tf32") == {("char_lm", "paper"): 26}


@pytest.mark.parametrize("words,fuse", [(None, False), ([], True), (["3"], 3), (["fit"], "fit"),
                                        (["word_lm=2", "char_lm=6"], {"word_lm": 2, "char_lm": 6})])
def test_fuse_takes_a_cap_each_experiments_cap_or_fit(words, fuse):
    assert campaign.parse_fuse(words) == fuse


@pytest.mark.parametrize("fuse,caps", [
    (False, [False, False, False]), (True, [True, True, False]), (3, [3, 3, False]),
    ({"word_lm": 2}, [2, 2, False]), ({("word_lm", "ci"): 2, "word_lm": 4}, [2, 4, False]),
    ({("char_lm", "ci"): 2}, [False, False, False])])
def test_each_form_of_fuse_gives_a_cap_to_each_experiment_and_scale(fuse, caps):
    """Caps by experiment and scale before those by experiment; temporal order's runs cannot share a model."""
    todo = [types.SimpleNamespace(experiment=e, config=types.SimpleNamespace(scale=s))
            for e, s in (("word_lm", "ci"), ("word_lm", "paper"), ("temporal_order", "ci"))]
    assert campaign.group_caps(fuse, todo) == {("word_lm", "ci"): caps[0], ("word_lm", "paper"): caps[1],
                                               ("temporal_order", "ci"): caps[2]}


@pytest.mark.parametrize("words", [["word_lm=0"], ["words=2"], ["word_lm"], ["2", "3"]])
def test_a_bad_fuse_is_a_clear_error(words):
    with pytest.raises(ValueError, match="--fuse takes N or EXPERIMENT=N"):
        campaign.parse_fuse(words)


def test_fit_needs_the_group_times_and_whole_runs(store, capsys):
    assert campaign.main(["--for", "1m", "--fuse", "fit"]) == 1
    assert "--fuse fit (fuse='fit') sizes the groups by --group-times" in capsys.readouterr().err
    # called from Python too, before anything is pending or trained: not every run alone, silently
    times = [{"experiment": "word_lm"}]
    for kwargs in ({}, {"group_times": times}, {"whole_runs": True}):
        with pytest.raises(ValueError, match="needs --whole-runs"):
            run_campaign([CI_ENTRY], "cpu", 1, 60.0, store, progress=False, fuse="fit", **kwargs)
    assert not list(store.root.rglob("*.json"))


def test_each_entry_trains_at_its_own_precision_in_groups_of_one_precision(store, monkeypatch, tmp_path):
    (tmp_path / "c.toml").write_text(CI_TOML + CI_TOML.replace('why = "test"', 'why = "test"\nprecision = "bf16"')
                                     .replace('"short"', '"medium"'))
    entries = load_campaign(tmp_path / "c.toml")
    assert [e.precision for e in entries] == [None, "bf16"]
    jobs = []
    monkeypatch.setattr(campaign, "run_groups", lambda groups, n, job, *rest: jobs.extend(
        job(i, g) for i, g in enumerate(groups)))
    run_campaign(entries, "cpu", 1, 600.0, store, progress=False, precision="float32")
    assert sorted(j.precision for j in jobs) == ["bf16", "bf16", "float32", "float32"]
    (tmp_path / "bad.toml").write_text(CI_TOML + 'precision = "fp8"\n')
    with pytest.raises(ValueError, match="entry 1: precision must be one of"):
        load_campaign(tmp_path / "bad.toml")


def test_a_reduced_group_starts_where_its_own_scale_was_measured_to_finish(store, monkeypatch):
    """On a lease that timed Table 3's reduced groups, a reduced group starts by the time its scale's rows
    give, whatever the CPU's stored runs of it took; by the paper's rows alone it is not known to finish,
    and waits."""
    def on_a_cpu_only(experiment, config, store, checkpoint, device=None, hardware=None):  # the CPU's runs stored
        return None if device == "cuda" else 12_436.0
    monkeypatch.setattr(estimates, "expected_seconds", on_a_cpu_only)
    entry = Entry(experiment="char_lm", scale="reduced", why="test", precision="float32")
    group = [types.SimpleNamespace(experiment="char_lm", entry=entry, config=types.SimpleNamespace(scale="reduced"),
                                   run_id=f"run{i}", resumable=False) for i in range(13)]
    paper = _bench_rows("char", "float32", {1: 0.001, 13: 0.004}, 500)
    reduced = [{**r, "scale": "reduced"} for r in paper]
    deadline = 10_000.0
    for rows, starts in ((paper, False), (reduced, True)):
        call = campaign._CampaignCall([], "cuda", 2, store, deadline, False, "tf32", True, rows)
        latest = call.start_by(group)
        assert (latest > 0) == starts
        if starts:
            took = estimates.group_seconds(rows, "char_lm", "float32", 13, "reduced")
            assert latest == pytest.approx(deadline - took)


def test_whole_runs_go_by_this_machines_runs_at_its_workers_thread_count(store):
    rows = pending_runs([CI_ENTRY], "cpu", store)
    rec = train_run(TemporalOrderTask, rows[0].config, store=store, progress=False)
    store.path("temporal_order", "ci", rec.run_id).unlink()
    call = campaign._CampaignCall([], "cpu", 1, store, 10_000.0, True, "float32", True, None)
    workers = runner.worker_threads(1)  # the threads of its one worker, which its records name
    for i, (threads, took) in enumerate([(workers + 1, 9_000.0), (workers, 3_000.0)]):
        store.save({**rec.json(), "run_id": f"run{i}", "hardware": hardware("cpu", threads), "wall_time_s": took,
                    "finished": f"2100-01-0{i + 1}T00:00:00+00:00"})
    assert call.start_by(rows[1:2]) == pytest.approx(10_000.0 - 3_000.0)


def test_with_measured_group_times_a_run_not_known_to_finish_does_not_start(store, monkeypatch):
    monkeypatch.setattr(campaign, "pending_seconds", lambda run, store, device=None, hardware=None: None)
    rows = _bench_rows("word", "tf32", {1: 0.001}, 1000)  # measures the paper's word LM, not temporal order at ci
    out = run_campaign([CI_ENTRY], "cpu", 1, 600.0, store, progress=False, whole_runs=True, group_times=rows)
    assert len(out["not_started"]) == 2 and not out["finished"]
