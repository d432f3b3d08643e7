"""What a run should take, read from the stored runs like it: the campaign's budget (``--list``,
``--whole-runs``) and the sweep's forecast before it trains."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from .config import ExperimentConfig
from .records import hardware_as_written_now
from .store import CorruptCheckpointError, RunStore, load_checkpoint

DROPOUT_FIELDS = ("scheme", "sampling", "recurrent_dropout", "scaling", "input_dropout", "output_dropout")
RECENT_RUNS = 4  # the estimate reads this many of the newest stored runs like it (the code gets faster)


def expected_seconds(experiment: str, config: ExperimentConfig, store: RunStore, checkpoint: Optional[Path] = None,
                     device: Optional[str] = None, alone: bool = False,
                     also: Sequence[RunStore] = (), hardware: Optional[str] = None) -> Optional[float]:
    """What a run of ``experiment`` with ``config`` should take: the mean wall time of the newest
    ``RECENT_RUNS`` runs (not diverged) stored in ``store`` or in ``also`` at its scale whose configs
    differ from its own only in the dropout fields and the fields added since some were stored
    (``ExperimentConfig.ADDED``: the optimiser's form) and, where some of those ran, that use recurrent
    dropout as it does (without it the layers run torch.nn's kernels, at another pace); with
    ``device`` ("cpu", "cuda"), only the runs on that kind of device; with ``hardware`` (as
    ``store.hardware`` writes it: the CPU model and threads, or the GPU), only the runs on it where any
    are stored; with ``alone``, only the runs trained alone (a fused group's runs shared its time). For a
    run that resumes from ``checkpoint``, the part of it left (``checkpoint_progress``), at its own pace so
    far where no run like it is stored. None where neither tells."""
    def rest(c: Dict[str, Any]) -> Dict[str, Any]:  # nor in the fields added since (the optimiser's form)
        return {k: v for k, v in c.items() if k not in DROPOUT_FIELDS and k not in type(config).ADDED}

    mine = json.loads(json.dumps(config.to_dict()))  # as a record holds it (tuples as lists)
    kind = None if device is None else device.split(":")[0]
    like = [r for s in (store, *also) for r in s.records(experiment, config.scale)
            if r.wall_time_s and not r.diverged and rest(r.config) == rest(mine)
            and kind in (None, r.device.split(":")[0])
            and not (alone and len(r.group or ()) > 1)]  # a diverged run stopped early: it says nothing
    dropout = bool(mine.get("recurrent_dropout"))
    alike = [r for r in like if bool(r.config.get("recurrent_dropout")) == dropout] or like
    # a CPU of another kind, or the same one at another thread count, may take several times as long
    alike = [r for r in alike if hardware_as_written_now(r.hardware) == hardware] or alike
    done, spent = checkpoint_progress(checkpoint) if checkpoint is not None else (0.0, 0.0)
    if alike:
        newest = sorted(alike, key=lambda r: r.finished)[-RECENT_RUNS:]
        whole = sum(r.wall_time_s for r in newest) / len(newest)
    elif done > 0:
        whole = spent / done * config.epochs
    else:
        return None
    return whole * max(0.0, 1.0 - done / config.epochs)


def checkpoint_progress(path: Path) -> Tuple[float, float]:
    """How many epochs a run's checkpoint holds, counting a part-done epoch in part (from its last
    ``segments`` stretch), and the seconds of training they took; (0, 0) where it is unreadable."""
    try:
        ck = load_checkpoint(path)
        segments = ck.get("segments") or [{"to_epoch": ck["epoch"]}]
        return float(segments[-1]["to_epoch"]), float(ck.get("elapsed", 0.0))
    except (CorruptCheckpointError, KeyError, TypeError, ValueError):  # (the run reports it when it starts)
        return 0.0, 0.0


def resumable(path: Path, store: RunStore) -> bool:
    """Whether a run has a checkpoint at ``path`` that it will resume into ``store``
    (``RunStore.accepts_checkpoint``); an unreadable one counts, so that the run reports it."""
    if not path.exists():
        return False
    try:
        return store.accepts_checkpoint(load_checkpoint(path))
    except CorruptCheckpointError:
        return True


# A group's wall time over the steps its benchmark times: the evaluations, the warm-up and capture, the
# checkpoints and the estimate's own error.
GROUP_MARGIN = 1.4
MODELS = {"word": "word_lm", "char": "char_lm"}  # bench_groups' model names


def group_seconds(rows: Sequence[Dict[str, Any]], experiment: str, precision: str, runs: int,
                  scale: str = "paper") -> Optional[float]:
    """What a group of ``runs`` runs of ``experiment`` at ``scale`` should take at ``precision``, from this
    machine's own ``benchmarks/bench_groups.py`` rows (``model``, ``scale``: the paper's where a row has
    none, ``runs``, ``group_s``, ``run_steps``, ``precision``): its runs' steps (``run_steps``) at the
    group step's time interpolated between the sizes measured (it grows about linearly with the runs),
    times ``GROUP_MARGIN``. None where no row of that model, scale and precision tells (or ``runs`` lies
    beyond the largest size measured)."""
    mine = sorted((int(r["runs"]), float(r["group_s"]), int(float(r["run_steps"]))) for r in rows
                  if MODELS.get(r.get("model")) == experiment and r.get("precision") == precision
                  and (r.get("scale") or "paper") == scale
                  and r.get("run_steps") not in (None, "") and r.get("group_s") not in (None, ""))
    if not mine or runs > mine[-1][0]:
        return None
    below = [m for m in mine if m[0] <= runs] or mine[:1]
    above = [m for m in mine if m[0] >= runs]
    (r0, s0, steps), (r1, s1, _) = below[-1], above[0]
    step = s0 if r1 == r0 else s0 + (s1 - s0) * (runs - r0) / (r1 - r0)
    return GROUP_MARGIN * step * steps
