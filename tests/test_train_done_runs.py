"""Which stored records a training call loads and which it trains again: the same rule before it takes
its runs' locks and once it holds them, so that a run another process finished meanwhile is loaded, and
a record that does not finish its run (made by uncommitted code, for a committed store) is trained again."""
import contextlib
import shutil

import pytest

from recdrop import sweep, train
from recdrop.config import run_id
from recdrop.experiments.temporal_order import TemporalOrderTask
from recdrop.store import RunStore
from recdrop.sweep import grid_rows, run_grid
from recdrop.train import train_group, train_run

CLEAN, DIRTY, OLDER = "0123456789", "0123456789-dirty", "9876543210"
CELL = dict(only={"length": "short", "scheme": "none"}, epochs=1)


def stamp(monkeypatch, commit):
    """The code running is ``commit``, for the records it writes and the sweep's check of its code."""
    real = train.environment
    monkeypatch.setattr(train, "environment", lambda device: {**real(device), "commit": commit})
    monkeypatch.setattr(sweep, "git_commit", lambda: commit)


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """A store inside a git work tree, whose records are committed (checkpoints in a cache outside it)."""
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    return RunStore(tmp_path / "repo" / "data" / "runs")


@pytest.fixture
def trained(monkeypatch):
    """The trainings that ran (``GroupTraining.run``), one entry each."""
    ran, real_run = [], train.GroupTraining.run
    monkeypatch.setattr(train.GroupTraining, "run", lambda self: ran.append(self) or real_run(self))
    return ran


def made_by(commit, config, tmp_path, monkeypatch):
    """The record file of ``config``'s run (seed 0) trained by code at ``commit``, in a scratch store."""
    stamp(monkeypatch, commit)
    scratch = RunStore(tmp_path / f"made-by-{commit}")
    record = train_run(TemporalOrderTask, config, store=scratch, progress=False)
    return scratch.path(record.experiment, record.scale, record.run_id)


def put(path, store, config):
    """Place the record file ``path`` as ``config``'s run's record in ``store``, as another process would."""
    to = store.path(config.experiment, config.scale, run_id(config, 0))
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, to)


def finished_while_waiting(monkeypatch, fresh, store, config):
    """Another process finishes the run (its record ``fresh``) while this one waits for its lock."""
    real_hold = RunStore.hold_runs

    @contextlib.contextmanager
    def hold_runs(self, experiment, rids, wait=False):
        put(fresh, store, config)
        with real_hold(self, experiment, rids, wait):
            yield
    monkeypatch.setattr(RunStore, "hold_runs", hold_runs)


def test_a_sweep_that_waits_for_a_stale_run_loads_the_record_another_process_finished(
        committed, trained, tmp_path, monkeypatch):
    (row,) = grid_rows("temporal_order", "ci", store=committed, **CELL)
    stale = made_by(DIRTY, row.config, tmp_path, monkeypatch)
    fresh = made_by(CLEAN, row.config, tmp_path, monkeypatch)
    put(stale, committed, row.config)
    trained.clear()
    finished_while_waiting(monkeypatch, fresh, committed, row.config)
    (done,) = run_grid("temporal_order", "ci", store=committed, progress=False, **CELL)
    assert not trained and done.record.commit == CLEAN
    assert committed.path("temporal_order", "ci", row.run_id).read_text() == fresh.read_text()  # not overwritten


@pytest.mark.parametrize("rerun", [False, True])
def test_a_group_waiting_for_its_lock_loads_a_run_finished_meanwhile(committed, trained, tmp_path, monkeypatch,
                                                                     rerun):
    (row,) = grid_rows("temporal_order", "ci", store=committed, **CELL)
    put(made_by(DIRTY, row.config, tmp_path, monkeypatch), committed, row.config)
    fresh = made_by(CLEAN, row.config, tmp_path, monkeypatch)
    trained.clear()
    finished_while_waiting(monkeypatch, fresh, committed, row.config)
    (record,) = train_group(TemporalOrderTask, [(row.config, 0)], store=committed, progress=False, rerun=rerun,
                            wait=True)
    assert not trained and record == committed.load("temporal_order", "ci", row.run_id) and record.commit == CLEAN


@pytest.mark.parametrize("rerun", [False, True])
def test_a_record_the_store_does_not_count_as_done_is_trained_again(committed, trained, tmp_path, monkeypatch,
                                                                    rerun):
    (row,) = grid_rows("temporal_order", "ci", store=committed, **CELL)
    put(made_by(DIRTY, row.config, tmp_path, monkeypatch), committed, row.config)
    stamp(monkeypatch, CLEAN)
    trained.clear()
    (record,) = train_group(TemporalOrderTask, [(row.config, 0)], store=committed, progress=False, rerun=rerun)
    assert len(trained) == 1 and record.commit == CLEAN
    assert committed.load("temporal_order", "ci", row.run_id) == record


def test_a_rerun_trains_again_only_records_of_other_code(store, trained, tmp_path, monkeypatch):
    """In a scratch store every record is done; a rerun (a remote worker's) trains one of another commit
    again and loads one of its own."""
    (row,) = grid_rows("temporal_order", "ci", store=store, **CELL)
    put(made_by(OLDER, row.config, tmp_path, monkeypatch), store, row.config)
    stamp(monkeypatch, CLEAN)
    trained.clear()
    (kept,) = train_group(TemporalOrderTask, [(row.config, 0)], store=store, progress=False)
    assert not trained and kept.commit == OLDER
    (again,) = train_group(TemporalOrderTask, [(row.config, 0)], store=store, progress=False, rerun=True)
    assert len(trained) == 1 and again.commit == CLEAN
    (loaded,) = train_group(TemporalOrderTask, [(row.config, 0)], store=store, progress=False, rerun=True)
    assert len(trained) == 1 and loaded == again
