"""The trainer shared by every experiment: progress, checkpoints, resume, NaN checks, records.

An experiment supplies a ``Task`` (its model, optimiser, batches, one training step, an
evaluation); ``train_run`` owns the loop. A checkpoint (model, optimiser, task state, RNG states,
position, curves) is written atomically after every epoch and every ``checkpoint_every_s``
seconds inside one, so ``resume`` continues an interrupted run and ends with the same metrics as an
uninterrupted one (same seed, CPU). The finished record is written last.
"""
from __future__ import annotations

import math
import random
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from .config import ExperimentConfig, run_id
from .store import CorruptCheckpointError, RunStore, environment, load_checkpoint, save_checkpoint, utc_now

DEVICES = ("cpu", "cuda")


class NonFiniteLossError(FloatingPointError):
    """A NaN or infinite training loss; the last good checkpoint is kept."""


class BudgetExhausted(RuntimeError):
    """The run reached its deadline: its checkpoint is saved, and the next call resumes it."""


class Task:
    """What an experiment gives the trainer. Subclasses set ``model`` and ``optimizer`` in
    ``__init__(config, device, seed)`` and implement the methods below."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    progress_metric: str = ""  # the metric shown on the progress bar

    def batches(self, epoch: int) -> Sequence[Any]:
        """The training batches of ``epoch``: deterministic given the seed and the epoch."""
        raise NotImplementedError

    def train_step(self, batch) -> Dict[str, float]:
        """One optimisation step; returns at least {"loss": ...}, plus sums to average per epoch."""
        raise NotImplementedError

    def optimise(self, loss: torch.Tensor, clip_norm: float = 0.0) -> torch.Tensor:
        """One step of ``self.optimizer`` on ``loss``: gradients from zero, scaled to a global norm of
        ``clip_norm`` where it is positive and exceeded (Pascanu et al. 2013; what ``clip_grad_norm_``
        does), then the update. Returns the global gradient norm before clipping."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        if clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), clip_norm, norm)
        self.optimizer.step()
        return norm

    def evaluate(self, epoch: int, train_stats: Dict[str, float]) -> Dict[str, float]:
        """The epoch's metrics (``train_stats`` holds the means of train_step's outputs)."""
        raise NotImplementedError

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        """Learning-rate schedules and the like."""

    def like_epoch(self, epoch: int) -> int:
        """An epoch whose batch count ``epoch``'s is about, for the progress bar's total and ETA and
        the segments' epoch fractions: by default epoch 0 (every epoch alike)."""
        return 0

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, float]:
        """The record's headline metrics; by default the last epoch's."""
        return dict(curves[-1])

    def state_dict(self) -> Dict[str, Any]:
        """Task state beyond model and optimiser (learning rate, carried hidden state...)."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass


def check_device(device: str, available: bool = True) -> str:
    """``device`` if it names a device ('cpu', 'cuda', 'cuda:N'); with ``available``, one this machine has."""
    if isinstance(device, torch.device):
        device = str(device)
    kind, sep, index = str(device).partition(":")
    if not isinstance(device, str) or kind not in DEVICES or (sep and (kind == "cpu" or not index.isdigit())):
        raise ValueError(f"device={device!r} is not valid; allowed values: 'cpu', 'cuda', 'cuda:N'")
    if available and kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was asked for but no CUDA device is available here; use device='cpu'")
    return str(device)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of an epoch's shuffling, fixed by the run's seed and the epoch (so that a resumed
    run shuffles as an uninterrupted one does)."""
    return torch.Generator().manual_seed(seed * 100_003 + epoch)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> Dict[str, Any]:
    """Python's, NumPy's, torch's (and CUDA's) RNG states as tensors and plain values, so that a
    checkpoint loads with ``torch.load(weights_only=True)``."""
    _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                       "cached_gaussian": float(cached_gaussian)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    if isinstance(n, dict):
        np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    else:  # a checkpoint of recdrop before weights_only checkpoints: NumPy's own tuple
        np.random.set_state(n)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _restore(task, ck: Dict[str, Any], path) -> None:
    """Put a checkpoint's model, optimiser, task and RNG states in place; one that does not fit this run's
    model (its shapes or format changed) is a CorruptCheckpointError naming the file."""
    try:
        missing = {"model", "optimizer", "task", "rng", "epoch", "batch", "curves", "sums", "elapsed"} - set(ck)
        if missing:
            raise KeyError(f"it has no {', '.join(sorted(missing))}")
        task.model.load_state_dict(ck["model"])
        task.optimizer.load_state_dict(ck["optimizer"])
        task.load_state_dict(ck["task"])
        _set_rng_state(ck["rng"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        why = " ".join(str(e).split())[:300]
        raise CorruptCheckpointError(f"checkpoint {path} does not fit this run ({type(e).__name__}: {why}); "
                                     "delete it to restart that run from scratch") from e


def train_run(make_task: Callable[..., Task], config: ExperimentConfig, seed: int = 0, device: str = "cpu",
              store: Optional[RunStore] = None, resume: bool = True, progress: bool = True,
              checkpoint_every_s: float = 180.0, callback: Optional[Callable[[str, int, int], None]] = None,
              position: int = 0, deadline: Optional[float] = None, rerun: bool = False) -> Dict[str, Any]:
    """Train one run of ``config`` with ``seed`` (or load its record if it is finished).

    ``callback(event, epoch, batch)`` is called after every batch ("batch") and epoch ("epoch");
    tests use it to interrupt a run. At ``deadline`` (a ``time.time()`` value) the run saves its
    checkpoint and raises ``BudgetExhausted``; the next call resumes it where it stopped. A run
    resumed on other hardware or code lists each stretch in its record's ``segments``. With
    ``rerun``, a stored record (one from uncommitted code, say) is trained again and replaced when
    the new one is finished.
    """
    device = check_device(device)
    store = store or RunStore()
    rid = run_id(config, seed)
    name = config.experiment
    if store.has(name, config.scale, rid) and not rerun:
        return store.load(name, config.scale, rid)
    ckpt_path = store.checkpoint_path(name, rid)
    if deadline is not None and time.time() >= deadline:
        raise BudgetExhausted(f"run {name}/{rid}: the time budget ended before it started")
    env = environment(device)  # taken at the start: the commit of the code that runs
    store.refuse_unclean_code(env["commit"], f"run {name}/{rid} is")
    seed_everything(seed)
    task = make_task(config, device, seed)
    epochs = config.epochs
    start_epoch, start_batch, curves, sums, elapsed, segments = 0, 0, [], {}, 0.0, []
    ck = load_checkpoint(ckpt_path) if resume and ckpt_path.exists() else None
    if ck is not None and not store.accepts_checkpoint(ck):
        warnings.warn(f"checkpoint {ckpt_path} holds training by uncommitted code, whose record {store.root} would "
                      f"refuse: run {name}/{rid} starts from scratch, and its new checkpoints replace that one")
        ck = None
    if ck is not None:
        _restore(task, ck, ckpt_path)
        start_epoch, start_batch, curves, sums, elapsed = (ck["epoch"], ck["batch"], ck["curves"], ck["sums"],
                                                           ck["elapsed"])
        env["resumed_from_commit"] = ck.get("commit", "unknown")
        segments = ck.get("segments", [])
    segment = {k: env[k] for k in ("hardware", "device", "torch", "commit")}

    batch_counts: Dict[int, int] = {}

    def expected_batches(epoch: int) -> int:
        """About how many batches ``epoch`` has: those of the epoch it is like (``Task.like_epoch``)."""
        like = task.like_epoch(epoch)
        if like not in batch_counts:
            batch_counts[like] = len(task.batches(like))
        return batch_counts[like]

    def with_this_segment(epoch: int, batch: int) -> List[Dict[str, Any]]:
        """The stretches of training so far: earlier ones, then this process's, in epochs (fractions
        for a stretch that began or ended inside an epoch) and seconds."""
        def at(e: int, b: int) -> float:
            return round(e + b / max(1, expected_batches(e)), 4) if b else float(e)
        return segments + [{**segment, "from_epoch": at(start_epoch, start_batch), "to_epoch": at(epoch, batch),
                            "wall_s": round(time.perf_counter() - t_start, 2)}]

    def checkpoint(epoch: int, batch: int) -> None:
        save_checkpoint(ckpt_path, {"model": task.model.state_dict(), "optimizer": task.optimizer.state_dict(),
                                    "task": task.state_dict(), "rng": _rng_state(), "epoch": epoch,
                                    "batch": batch, "curves": curves, "sums": sums,
                                    "elapsed": elapsed + time.perf_counter() - t_start, "run_id": rid,
                                    "commit": env["commit"],
                                    "segments": with_this_segment(epoch, batch)})

    def make_record(metrics: Dict[str, Any], epoch: int, batch: int, **extra) -> Dict[str, Any]:
        """The run's record, with its curves so far, as training stands at (epoch, batch)."""
        record = {"experiment": name, "run_id": rid, "seed": seed, "config": config.to_dict(),
                  "metrics": metrics, "curves": curves, **extra,
                  "wall_time_s": round(elapsed + time.perf_counter() - t_start, 2), **env, "finished": utc_now()}
        if segments:  # resumed: say on what hardware and code each stretch of training ran
            record["segments"] = with_this_segment(epoch, batch)
        return record

    t_start = time.perf_counter()
    last_ckpt = time.monotonic()
    if expected_batches(0) == 0:
        raise ValueError(f"run {name}/{rid}: its training split gives no batch of {config}; use more data or "
                         "smaller batches")
    bar = tqdm(total=sum(map(expected_batches, range(epochs))),
               initial=sum(map(expected_batches, range(start_epoch))) + start_batch, disable=not progress,
               desc=f"{name} {rid}", position=position, leave=position == 0, dynamic_ncols=True)
    try:
        for epoch in range(start_epoch, epochs):
            task.model.train()
            batches = task.batches(epoch)
            first = start_batch if epoch == start_epoch else 0
            if first == 0:
                sums = {}
            for b in range(first, len(batches)):
                out = task.train_step(batches[b])
                loss = float(out["loss"])
                if not math.isfinite(loss):  # a result too: recorded, so that it is not retried forever
                    where = {"epoch": epoch + 1, "batch": b + 1, "loss": str(loss)}
                    path = store.save(make_record({}, epoch, b, diverged=where))
                    raise NonFiniteLossError(f"run {name}/{rid} (seed {seed}): training loss is {loss} at epoch "
                                             f"{epoch + 1}, batch {b + 1}; it is recorded as diverged in {path}, "
                                             f"and its last good checkpoint is kept at {ckpt_path}")
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                sums["_n"] = sums.get("_n", 0) + 1
                bar.update(1)
                if callback:
                    callback("batch", epoch, b)
                if deadline is not None and time.time() >= deadline:
                    checkpoint(epoch, b + 1)
                    raise BudgetExhausted(f"run {name}/{rid}: stopped at the time budget in epoch {epoch + 1}, "
                                          f"batch {b + 1}; its checkpoint {ckpt_path} resumes it")
                if time.monotonic() - last_ckpt > checkpoint_every_s and b + 1 < len(batches):
                    checkpoint(epoch, b + 1)
                    last_ckpt = time.monotonic()
            n = sums.pop("_n")
            train_stats = {k: v / n for k, v in sums.items()}
            task.model.eval()
            with torch.no_grad():
                metrics = {"epoch": epoch + 1, **task.evaluate(epoch, train_stats)}
            curves.append(metrics)
            task.end_epoch(epoch, metrics)
            if task.progress_metric:
                bar.set_postfix(epoch=epoch + 1, loss=f"{train_stats['loss']:.4g}",
                                **{task.progress_metric: f"{metrics.get(task.progress_metric, float('nan')):.4g}"})
            sums = {}
            checkpoint(epoch + 1, 0)
            last_ckpt = time.monotonic()
            if callback:
                callback("epoch", epoch, len(batches))
    finally:
        bar.close()
    record = make_record(task.final_metrics(curves), epochs, 0)
    store.save(record)
    ckpt_path.unlink(missing_ok=True)
    return record
