"""The sweep runner: fill a paper table's grid of runs, skipping finished ones, resuming the rest.

    python -m recdrop.sweep temporal_order --scale quick --device cpu --jobs 2 --seeds 0

From a notebook: ``run_grid("temporal_order", "quick", train=False)`` only loads what is stored.
Several worker processes may share one device (``jobs``); each writes its own records atomically,
so runs never clobber each other and a killed sweep loses no finished record.
"""
from __future__ import annotations

import argparse
import ast
import multiprocessing as mp
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Dict, List, Optional, Sequence

import torch
from tqdm.auto import tqdm

from . import experiments
from .config import run_id
from .store import RunStore
from .train import check_device, train_run


def _check_seeds(seeds) -> List[int]:
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-negative int or a non-empty list of them, got {seeds!r}")
    return list(seeds)


def _run_one(experiment: str, config, seed: int, device: str, store_root: str, threads: int, position: int,
             progress: bool) -> Dict[str, Any]:
    torch.set_num_threads(threads)
    make_task, _ = experiments.get(experiment)
    return train_run(make_task, config, seed, device, RunStore(store_root), progress=progress, position=position)


def run_grid(experiment: str, scale: str, seeds: Sequence[int] = (0,), device: str = "cpu", jobs: int = 1,
             train: bool = True, store: Optional[RunStore] = None, progress: bool = True,
             **overrides) -> List[Dict[str, Any]]:
    """Every cell of ``experiment``'s grid at ``scale`` for every seed: one row per run with the
    cell's labels, ``seed``, ``run_id`` and ``record`` (None where not run and ``train`` is False).

    Finished runs are loaded, unfinished ones resumed from their checkpoint, missing ones trained.
    """
    make_task, grid = experiments.get(experiment)
    seeds = _check_seeds(seeds)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    if not isinstance(train, bool):
        raise ValueError(f"train must be True or False, got {train!r}")
    device = check_device(device) if train else device
    store = store or RunStore()
    rows = []
    for label, cfg in grid(scale, **overrides):
        for seed in seeds:
            rid = run_id(cfg, seed)
            rec = store.load(experiment, cfg.scale, rid) if store.has(experiment, cfg.scale, rid) else None
            rows.append({**label, "seed": seed, "run_id": rid, "config": cfg, "record": rec})
    todo = [r for r in rows if r["record"] is None]
    if not train or not todo:
        return rows
    threads = max(1, (os.cpu_count() or 1) // jobs) if device == "cpu" else torch.get_num_threads()
    sweep_bar = tqdm(total=len(rows), initial=len(rows) - len(todo), desc=f"sweep {experiment} ({scale})",
                     disable=not progress, position=0, dynamic_ncols=True)
    failures = []
    try:
        if jobs == 1:
            for r in todo:
                try:
                    r["record"] = _run_one(experiment, r["config"], r["seed"], device, str(store.root),
                                           torch.get_num_threads(), 1, progress)
                except Exception as e:  # keep going: the other runs' records are worth having
                    failures.append((r, e))
                sweep_bar.update(1)
        else:
            with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
                futures = {pool.submit(_run_one, experiment, r["config"], r["seed"], device, str(store.root),
                                       threads, 1 + i % jobs, progress): r for i, r in enumerate(todo)}
                for fut in as_completed(futures):
                    r = futures[fut]
                    try:
                        r["record"] = fut.result()
                    except Exception as e:
                        failures.append((r, e))
                    sweep_bar.update(1)
    finally:
        sweep_bar.close()
    if failures:
        lines = "\n".join(f"  {r['run_id']} {r['config']}: {type(e).__name__}: {e}" for r, e in failures)
        raise RuntimeError(f"{len(failures)} of {len(todo)} runs failed (finished records are kept):\n{lines}")
    return rows


def _parse_overrides(items: Sequence[str]) -> Dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recdrop.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=sorted(experiments.EXPERIMENTS))
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes on the device")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override config fields")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        rows = run_grid(args.experiment, args.scale, args.seeds, args.device, args.jobs,
                        progress=not args.no_progress, **_parse_overrides(args.set))
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(rows)} runs of {args.experiment} at scale {args.scale} are in {RunStore().root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
