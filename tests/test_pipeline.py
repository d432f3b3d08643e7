"""Configs, the results store, the trainer (resume, NaN) and the sweep runner (kill and resume)."""
import json
import math
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from recdrop import sweep as sweep_module, train
from recdrop.config import run_id
from recdrop.experiments.temporal_order import TemporalOrderConfig, TemporalOrderTask, generate, grid
from recdrop.store import CorruptCheckpointError, RunStore, atomic_write_bytes
from recdrop.sweep import grid_rows, run_grid
from recdrop.train import NonFiniteLossError, train_run

REPO = Path(__file__).resolve().parents[1]


def ci_config(**kw):
    return TemporalOrderConfig.at_scale("ci", **kw)


# -- configs -------------------------------------------------------------------------------------
def test_scales_and_overrides():
    assert TemporalOrderConfig.at_scale("paper").hidden_size == 256
    assert TemporalOrderConfig.at_scale("quick", epochs=3).epochs == 3
    with pytest.raises(ValueError, match="scale='huge'.*'ci', 'quick'|scale='huge'"):
        TemporalOrderConfig.at_scale("huge")
    with pytest.raises(ValueError, match="'hiden_size' is not a parameter.*hidden_size"):
        TemporalOrderConfig.at_scale("ci", hiden_size=3)
    with pytest.raises(ValueError, match="epochs must be of type int"):
        TemporalOrderConfig.at_scale("ci", epochs="3")
    with pytest.raises(ValueError, match="optimizer='rmsprop'"):
        TemporalOrderConfig.at_scale("ci", optimizer="rmsprop")


def test_a_config_built_directly_is_validated_too():
    with pytest.raises(ValueError, match="epochs must be positive"):
        TemporalOrderConfig(epochs=0)
    with pytest.raises(ValueError, match="scale='large'"):
        TemporalOrderConfig(scale="large")


def test_run_id_is_stable_and_discriminating():
    cfg = ci_config()
    rid = run_id(cfg, 0)
    assert rid == run_id(ci_config(), 0)
    assert rid != run_id(cfg, 1)
    assert rid != run_id(cfg.replace(hidden_size=17), 0)
    assert rid != run_id(TemporalOrderConfig.at_scale("quick"), 0)
    code = ("from recdrop.config import run_id; from recdrop.experiments.temporal_order import TemporalOrderConfig;"
            "print(run_id(TemporalOrderConfig.at_scale('ci'), 0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == rid  # the same in a fresh process (no hash randomisation)


def test_every_stored_record_keeps_the_id_its_config_hashes_to_and_reads_as_a_record_that_loses_nothing():
    """A new config field must not orphan the records stored before it (``ExperimentConfig.ADDED``); a
    ``Record`` holds every field of the file, as it is."""
    from recdrop.experiments import EXPERIMENTS
    paths = sorted((REPO / "data" / "runs").rglob("*.json"))
    assert len(paths) > 300
    for path in paths:
        rec = RunStore.read(path)
        assert rec.json() == json.loads(path.read_text()), path
        cfg = EXPERIMENTS[rec.experiment].config.from_record(rec.config)
        assert run_id(cfg, rec.seed) == rec.run_id == path.stem, path


def test_an_added_field_at_its_earlier_value_keeps_the_id_and_any_other_value_changes_it():
    from recdrop.experiments.ner import NERConfig
    before = {k: v for k, v in NERConfig.at_scale("ci").to_dict().items() if k not in NERConfig.ADDED}
    old = NERConfig.from_record(before)  # a record stored before issue 34's fields
    assert (old.optimizer, old.clip_norm) == ("rmsprop-torch", 0.0)
    assert "optimizer" in old.to_dict() and "optimizer" not in old.id_dict()
    ids = {run_id(old.replace(**change), 0) for change in
           ({}, {"optimizer": "rmsprop-lasagne"}, {"optimizer": "rmsprop-tf1"}, {"clip_norm": 5.0})}
    assert len(ids) == 4
    assert run_id(NERConfig.at_scale("ci"), 0) == run_id(old.replace(optimizer="rmsprop-lasagne", clip_norm=5.0), 0)
    with pytest.raises(ValueError, match="fields NERConfig does not know: momentum"):
        NERConfig.from_record({**before, "momentum": 0.9})


# -- data ----------------------------------------------------------------------------------------
def test_temporal_order_data_follows_the_definition():
    x, y = generate(500, 30, torch.Generator().manual_seed(0))
    assert x.shape == (30, 500, 2) and y.shape == (500,)
    for n in range(500):
        marks = torch.nonzero(x[:, n, 1]).flatten().tolist()
        first, second = marks[0], marks[-1]
        assert 0 <= first <= 10 and 10 <= second <= 20
        assert y[n] == 2 * x[first, n, 0] + x[second, n, 0]
    assert set(y.tolist()) == {0, 1, 2, 3}


# -- store ---------------------------------------------------------------------------------------
def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "r.json"
    atomic_write_bytes(path, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(path, object())  # fails while writing
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_record_contents(store):
    rec = train_run(TemporalOrderTask, ci_config(), seed=3, store=store, progress=False)
    saved = json.loads(store.path("temporal_order", "ci", rec.run_id).read_text())
    assert saved == rec.json() and rec is store.load("temporal_order", "ci", rec.run_id)  # the stored record itself
    for key in ("experiment", "config", "seed", "metrics", "curves", "wall_time_s", "hardware", "torch", "commit"):
        assert key in saved
    assert rec.config["scale"] == "ci" and rec.seed == 3
    assert len(rec.curves) == 2 and 0 <= rec.metrics["test_acc"] <= 1
    assert not store.checkpoint_path("temporal_order", rec.run_id).exists()
    assert train_run(TemporalOrderTask, ci_config(), seed=3, store=store) == rec  # loaded, not retrained


def test_a_process_parses_a_record_once_and_again_once_it_is_rewritten(store, monkeypatch):
    """A chapter reads the same records many times: the store parses each file once, and a record
    written since (a rerun, by a rename) is parsed again; telling whether a scale has records parses none."""
    from recdrop import store as store_module
    rec = train_run(TemporalOrderTask, ci_config(), seed=4, store=store, progress=False)
    parsed = []
    real_loads = store_module.json.loads
    monkeypatch.setattr(store_module.json, "loads", lambda text: parsed.append(1) or real_loads(text))
    assert store.has_records("temporal_order", "ci") and not store.has_records("temporal_order", "paper")
    assert parsed == []
    first = store.load("temporal_order", "ci", rec.run_id)
    assert store.load("temporal_order", "ci", rec.run_id) is first and store.records("temporal_order")[0] is first
    assert first is rec and parsed == []  # the trainer read its record back as it wrote it: parsed once, then
    store.save({**rec.json(), "finished": "later"})
    assert store.load("temporal_order", "ci", rec.run_id).finished == "later" and len(parsed) == 1


# -- trainer -------------------------------------------------------------------------------------
class Interrupt(Exception):
    pass


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])  # the paper's SGD has no state; Adam's moments must resume
@pytest.mark.parametrize("at", [("batch", 1, 1), ("epoch", 0, 4)])
def test_resume_ends_with_the_same_metrics_and_says_where_it_resumed(store, tmp_path, at, optimizer, capsys,
                                                                     monkeypatch):
    """A run stopped mid-epoch or at an epoch's end resumes to an uninterrupted run's curves (model, optimiser,
    RNG and position restored), and its wall time is its segments' summed: the campaign's estimates read it.
    The trainer's clock moves a second a step and stands still between, so the sum is exact; on a real
    clock each segment is rounded to 0.01 s and read a moment after the total."""
    cfg = ci_config(epochs=3, recurrent_dropout=0.5, sampling="per-step", optimizer=optimizer,
                    lr=0.1 if optimizer == "sgd" else 0.01)
    straight = train_run(TemporalOrderTask, cfg, seed=1, store=RunStore(tmp_path / "other"), progress=False)
    clock = [0.0]
    monkeypatch.setattr(train, "time", types.SimpleNamespace(
        perf_counter=lambda: clock[0], monotonic=time.monotonic, time=time.time))

    def step(event, epoch, batch):
        if event == "batch":
            clock[0] += 1.0

    def step_or_stop(*where):
        if where == at:
            raise Interrupt
        step(*where)
    with pytest.raises(Interrupt):
        train_run(TemporalOrderTask, cfg, seed=1, store=store, progress=False, callback=step_or_stop,
                  checkpoint_every_s=0.0)
    assert store.checkpoint_path("temporal_order", run_id(cfg, 1)).exists()
    assert not store.has("temporal_order", "ci", run_id(cfg, 1))
    assert store.find("temporal_order", "ci", run_id(cfg, 1)) is None
    capsys.readouterr()
    resumed = train_run(TemporalOrderTask, cfg, seed=1, store=store, progress=True, callback=step)
    said = capsys.readouterr().out  # beside the bar, whether or not it is drawn (TQDM_DISABLE)
    assert f"temporal_order {run_id(cfg, 1)}: resumes at epoch 2 of 3, batch " in said
    assert str(store.checkpoint_path("temporal_order", run_id(cfg, 1)).parent) in said
    assert store.find("temporal_order", "ci", run_id(cfg, 1)) == resumed
    assert resumed.curves == straight.curves
    assert resumed.metrics == straight.metrics
    first, second = resumed.segments
    assert first["wall_s"] > 0 and second["wall_s"] > 0
    assert resumed.wall_time_s == first["wall_s"] + second["wall_s"]


def test_nan_loss_stops_the_run_records_it_as_diverged_and_keeps_the_checkpoint(store):
    class Exploding(TemporalOrderTask):
        calls = 0

        def train_step(self, batch):
            out = super().train_step(batch)
            Exploding.calls += 1
            return {**out, "loss": math.nan} if Exploding.calls == 6 else out
    cfg = ci_config(epochs=3)
    rid = run_id(cfg, 0)
    with pytest.raises(NonFiniteLossError, match=f"temporal_order/{rid}.*nan at epoch 2, batch 2"):
        train_run(Exploding, cfg, seed=0, store=store, progress=False)
    ck = torch.load(store.checkpoint_path("temporal_order", rid), weights_only=True)
    assert ck["epoch"] == 1 and ck["batch"] == 0  # the last good one, at the end of epoch 1
    record = store.load("temporal_order", "ci", rid)  # a result: recorded, with where it diverged
    assert record.diverged == {"epoch": 2, "batch": 2, "loss": "nan"} and record.metrics == {}
    assert [c["epoch"] for c in record.curves] == [1]
    calls = Exploding.calls
    assert train_run(Exploding, cfg, seed=0, store=store, progress=False) == record  # not tried again
    assert Exploding.calls == calls


def test_a_record_gives_back_exactly_the_fields_its_file_has():
    from made import RECORD_DEFAULTS
    from recdrop.records import Record
    for extra in ({}, {"segments": []}, {"segments": [{"commit": "abc"}], "group": ["a", "b"], "precision": "tf32"}):
        assert Record.from_json({**RECORD_DEFAULTS, **extra}).json() == {**RECORD_DEFAULTS, **extra}


def test_a_row_reads_its_cells_labels_by_key_and_its_run_by_attribute():
    row = grid_rows("temporal_order", "ci", [1], store=RunStore("/nonexistent"))[0]
    assert row["length"] == row.labels["length"] == "short" and row.seed == 1 and row.run_id == run_id(row.config, 1)
    assert row.stored is None and row.record is None and row.diverged is None and row.metrics == {} and not row.done
    with pytest.raises(KeyError, match="'record' is not a label of this row .* read row.record"):
        row["record"]


def test_a_sweep_shows_a_run_that_diverges_as_diverged_and_goes_on(store, monkeypatch):
    real_step = TemporalOrderTask.train_step
    monkeypatch.setattr(TemporalOrderTask, "train_step", lambda self, batch: {
        **real_step(self, batch), **({"loss": math.inf} if self.cfg.sampling == "per-sequence" else {})})
    with pytest.warns(RuntimeWarning, match="training loss is inf at epoch 1, batch 1"):
        rows = run_grid("temporal_order", "ci", store=store, progress=False, epochs=1,
                        only={"length": "short", "scheme": "semeniuta"})
    assert [(r["sampling"], r.record is None, r.diverged) for r in rows] == [
        ("per-step", False, None), ("per-sequence", True, {"epoch": 1, "batch": 1, "loss": "inf"})]
    assert all(r.done for r in rows)


def test_corrupt_checkpoint_is_a_clear_error(store):
    cfg = ci_config()
    path = store.checkpoint_path("temporal_order", run_id(cfg, 0))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CorruptCheckpointError, match="cannot be read.*delete it"):
        train_run(TemporalOrderTask, cfg, seed=0, store=store, progress=False)


def test_device_is_checked(store):
    with pytest.raises(ValueError, match="device='tpu'"):
        train_run(TemporalOrderTask, ci_config(), device="tpu", store=store)


# -- sweep ---------------------------------------------------------------------------------------
def test_sweep_render_only_and_train(store, capsys, monkeypatch):
    rows = run_grid("temporal_order", "ci", seeds=[0], train=False, store=store)
    assert len(rows) == len(grid("ci")) == 18 and all(r.record is None for r in rows)
    rows = run_grid("temporal_order", "ci", seeds=[0], store=store, progress=False, epochs=1)
    assert all(r.record is not None for r in rows)
    capsys.readouterr()
    again = run_grid("temporal_order", "ci", seeds=[0], store=store, epochs=1)  # a rerun: all stored
    assert [r.record for r in again] == [r.record for r in rows]
    said = capsys.readouterr().out
    assert f"all 18 runs already in {store.root}; nothing to train\n" in said  # no hint to use a scratch store
    monkeypatch.setattr(sweep_module, "DEFAULT_RUNS", store.root)  # the repository's own store: the hint
    run_grid("temporal_order", "ci", seeds=[0], store=store, epochs=1)
    assert "nothing to train (an empty RECDROP_RUNS trains them anew)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="seeds"):
        run_grid("temporal_order", "ci", seeds=[-1], store=store)
    with pytest.raises(ValueError, match="experiment='nope'"):
        run_grid("nope", "ci", store=store)


SUBSET = {"length": "short", "scheme": "moon"}  # 4 cells: both samplings, both scalings


def test_sweep_only_some_cells(store):
    rows = run_grid("temporal_order", "ci", seeds=[0, 1], train=False, store=store, only=SUBSET)
    assert len(rows) == 8 and all(r["length"] == "short" and r["scheme"] == "moon" for r in rows)
    with pytest.raises(ValueError, match="only: \\['colour'\\] are not labels"):
        run_grid("temporal_order", "ci", train=False, store=store, only={"colour": "red"})


def test_sweep_with_two_workers_equals_one(store, tmp_path):
    one = run_grid("temporal_order", "ci", seeds=[0], store=store, progress=False, only=SUBSET, epochs=1)
    two = run_grid("temporal_order", "ci", seeds=[0], store=RunStore(tmp_path / "two"), jobs=2,
                   progress=False, only=SUBSET, epochs=1)
    assert len(two) == 4
    assert [r.record.metrics for r in one] == [r.record.metrics for r in two]


def test_killed_sweep_loses_no_finished_record(tmp_path):
    """A sweep killed while a run trains, after another has finished, keeps that record as it was through the
    kill and the resume (test_failures' random kills may all land before its first run finishes)."""
    env = {**os.environ, "RECDROP_RUNS": str(tmp_path / "runs"), "RECDROP_CACHE": str(tmp_path / "cache"),
           "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}  # one thread: fast on a busy machine too
    cmd = [sys.executable, "-m", "recdrop.sweep", "temporal_order", "--scale", "ci", "--no-progress",
           "--set", "epochs=30", "--only", *(f"{k}={v}" for k, v in SUBSET.items())]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    folder = tmp_path / "runs" / "temporal_order" / "ci"
    deadline = time.time() + 120
    # killed once a record is stored and a run is part-way (a checkpoint): mid-sweep, whatever the machine's speed
    while not (list(folder.glob("*.json")) and list((tmp_path / "cache").rglob("*.pt"))) \
            and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {p.name: p.read_text() for p in folder.glob("*.json")}
    assert 1 <= len(before) < 4, "the kill must land mid-sweep"
    for text in before.values():
        json.loads(text)  # every record left is whole
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    after = {p.name: p.read_text() for p in folder.glob("*.json")}
    assert len(after) == 4
    assert all(after[name] == text for name, text in before.items())  # finished records untouched


def test_sweep_through_ray_equals_the_plain_runner(store, tmp_path):
    pytest.importorskip("ray")
    import ray

    plain = run_grid("temporal_order", "ci", seeds=[0], store=store, progress=False, only=SUBSET, epochs=1)
    ray_store = RunStore(tmp_path / "ray")
    try:
        via_ray = run_grid("temporal_order", "ci", seeds=[0], store=ray_store, jobs=2, progress=False,
                           engine="ray", only=SUBSET, epochs=1)
    finally:
        ray.shutdown()
    assert [r.record.metrics for r in via_ray] == [r.record.metrics for r in plain]
    assert [r.record.curves for r in via_ray] == [r.record.curves for r in plain]
    assert len(ray_store.records("temporal_order", "ci")) == len(plain)  # written by the driver


def test_sweep_through_submitit_equals_the_plain_runner(store, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.setenv("RECDROP_SUBMITIT_CLUSTER", "local")  # SLURM's code path, run as local processes
    monkeypatch.setenv("RECDROP_SUBMITIT_DIR", str(tmp_path / "submitit"))
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "worker-cache"))
    plain = run_grid("temporal_order", "ci", seeds=[0], store=store, progress=False, only=SUBSET, epochs=1)
    driver_store = RunStore(tmp_path / "driver")
    via_submitit = run_grid("temporal_order", "ci", seeds=[0], store=driver_store, jobs=2, progress=False,
                            engine="submitit", only=SUBSET, epochs=1)
    assert [r.record.metrics for r in via_submitit] == [r.record.metrics for r in plain]
    assert [r.record.curves for r in via_submitit] == [r.record.curves for r in plain]
    assert len(driver_store.records("temporal_order", "ci")) == len(plain)  # written by the driver


def test_training_on_a_cpu_computes_denormals_as_zero_and_restores_the_mode(store, monkeypatch):
    """A dropped unit's carried cell state decays into denormal floats, which slow an Intel CPU's products
    several times over (train.denormals_flushed); training flushes them, and leaves the mode as it was."""
    from recdrop.train import flushing_denormals

    seen = []
    real_step = TemporalOrderTask.train_step
    monkeypatch.setattr(TemporalOrderTask, "train_step", lambda self, batch: (
        seen.append(flushing_denormals()), real_step(self, batch))[1])
    assert not flushing_denormals()
    train_run(TemporalOrderTask, ci_config(epochs=1), seed=0, store=store, progress=False)
    assert seen and all(seen)
    assert not flushing_denormals()  # restored
    torch.set_flush_denormal(True)
    try:
        assert flushing_denormals()
        train_run(TemporalOrderTask, ci_config(epochs=1), seed=1, store=store, progress=False)
        assert flushing_denormals()  # a caller's own choice is kept too
    finally:
        torch.set_flush_denormal(False)
