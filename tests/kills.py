"""Killing a sweep at random moments, for the failure tests: a sweep subprocess, what shows its progress,
and the loop that kills it after each bit of progress."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sweep_command(tmp_path: Path, name: str, args):
    """``python -m recdrop.sweep *args`` with its own store and cache under ``tmp_path / name``: the command,
    its environment and that folder."""
    env = {**os.environ, "RECDROP_RUNS": str(tmp_path / name / "runs"), "RECDROP_CACHE": str(tmp_path / name / "cache"),
           "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1",
           # one library for every process's products: a measured choice is kept per cache folder
           "RECDROP_CPU_PRODUCTS": os.environ.get("RECDROP_CPU_PRODUCTS", "mkl")}
    return [sys.executable, "-m", "recdrop.sweep", *args], env, tmp_path / name


def progress_marks(root: Path):
    """What changes as the sweep advances: the records, and each checkpoint's modification time."""
    return ({p.name for p in (root / "runs").rglob("*.json")},
            {p.name: p.stat().st_mtime_ns for p in (root / "cache").rglob("*.pt")})


def epoch_seconds(reference: dict) -> float:
    """The mean epoch (its evaluation and first-epoch warm-up included) of the quickest run of an uninterrupted
    sweep's records (a fused group's: its members' shares summed)."""
    groups = {}
    for rec in reference.values():
        key = tuple(rec.get("group") or [rec["run_id"]])
        groups[key] = groups.get(key, 0.0) + rec["wall_time_s"] / max(1, len(rec["curves"]))
    return min(groups.values())


def kill_repeatedly(cmd, env, root: Path, kills: int, signals=(signal.SIGKILL,), max_pause: float = 0.1,
                    after_each=None, epoch_s: float = float("inf")) -> int:
    """Start the sweep ``kills`` times, each time killing it (with ``signals`` in turn) at a random moment
    after it made some progress; ``after_each(k)`` checks the store after kill k. Returns the kills made
    (fewer where the sweep finished first). Each pause is at most ``max_pause`` and at most one epoch
    (``epoch_s``, ``epoch_seconds``), so that a kill lands at most one epoch after the progress it waited
    for however fast the machine: ``kills`` kills need at most twice as many epochs (a steady epoch is
    shorter than the mean, by less than the half-epoch this allows)."""
    rng = random.Random(0)
    made = 0
    pause, poll = min(max_pause, epoch_s), min(0.02, epoch_s / 4)
    while made < kills:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = progress_marks(root)
        deadline = time.time() + 120
        while progress_marks(root) == before and proc.poll() is None and time.time() < deadline:
            time.sleep(poll)  # wait for some progress (a checkpoint or a record), then kill at random
        time.sleep(rng.uniform(0.0, pause))
        if proc.poll() is not None:
            break  # the sweep finished before this kill
        proc.send_signal(signals[made % len(signals)])
        proc.wait()
        made += 1
        if after_each:
            after_each(made)
    return made


def stored_records(root: Path) -> dict:
    """The records of the sweep under ``root``, by file name."""
    return {p.name: json.loads(p.read_text()) for p in (root / "runs").rglob("*.json")}


def resume_to_the_end(cmd, env, root: Path, reference: dict) -> dict:
    """Run the sweep to its end; its records must be those of ``reference`` (an uninterrupted sweep's),
    metrics and curves alike. Returns them."""
    subprocess.run(cmd, cwd=REPO, env=env, check=True)
    final = stored_records(root)
    assert sorted(final) == sorted(reference)
    for name, rec in final.items():
        assert rec["metrics"] == reference[name]["metrics"], name
        assert rec["curves"] == reference[name]["curves"], name
    return final
