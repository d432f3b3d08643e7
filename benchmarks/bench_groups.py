"""Runs per hour of a fused group of language models, against the same runs one at a time.

One training step of R runs of a table's grid at the paper's shapes (word LM: vocabulary 10k, 256 +
256 units, batch 32, 35 steps; char LM: 50 symbols, 256 + 1024 units, batch 64, 100 steps), or at
another scale's (``--scale``; each row names its scale), the first R cells of Table 2 or 3 (each its
own scheme, rate, sampling, forward dropout and generator), through the trainer's own step
(``Task.group_stepper``: the forward as one model, one backward, each run's clipping and optimiser
step; on a GPU the whole step one CUDA graph), against the same R runs' steps one after the other (a
stepper of one run each, graphed alike). After a warm-up, the two are timed in turn, repeat after
repeat (each repeat as many steps as fill ``--min-s``), in one process on one machine; the ratio is
the group's runs per hour over one-at-a-time's. Prints a table and, with --out, writes it as CSV for
the Performance page.

    python benchmarks/bench_groups.py --out data/benchmarks/groups/cpu-amd-epyc.csv      # CPU
    python benchmarks/bench_groups.py --device cuda --models word char --sizes 1 2 4 8 13 26 \
        --out data/benchmarks/groups/gpu-nvidia-h100.csv
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from recdrop import route
from recdrop.experiments import char_lm, word_lm
from recdrop.models import set_generator
from recdrop.perf import require_clean_commit, write_benchmark
from recdrop.store import git_commit, hardware
from recdrop.train import (READ_EVERY, add_precision_options, layer_paths, mask_generator, precision_option,
                           seed_everything, set_precision, set_task_precision)

MODELS = {"word": (word_lm.WordLMTask, word_lm.grid), "char": (char_lm.CharLMTask, char_lm.grid)}  # grid(scale)


MAX_RUNS = 26  # a table's cells: the largest group


def provenance(device: str, precision: str, group_step) -> dict:
    """What every row says of how it was measured: the machine, torch, the commit, the precision, the date,
    and whether the group's step ran as one CUDA graph."""
    return {"hardware": hardware(device), "device": device, "torch": torch.__version__, "commit": git_commit(),
            "precision": precision, "step": "cuda-graph" if getattr(group_step, "captured", False) else "eager",
            "date": time.strftime("%Y-%m-%d")}


def make_tasks(name: str, n: int, device: str, precision: str = "float32", scale: str = "paper"):
    """The first ``n`` cells of the model's grid at ``scale``, seed 0, each built as the trainer builds it."""
    task_type, grid = MODELS[name]
    tasks = []
    for _, cfg in grid(scale)[:n]:
        seed_everything(0)
        task = task_type(cfg, device, 0)
        set_generator(task.model, mask_generator(0, device))
        set_task_precision(task, precision)
        task.model.train()
        tasks.append(task)
    return task_type, tasks


def per_step(step, batches, sync, min_s: float) -> float:
    """Seconds a step: steps over the batches in turn, the device waited for every ``READ_EVERY`` steps
    (where the trainer reads the steps' outputs) and at the end, until ``min_s`` has passed, at least one
    step: a median over many steps, not over three single ones."""
    sync()
    t0, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() - t0 < min_s:
        step(batches[n % len(batches)])
        n += 1
        if n % READ_EVERY == 0:
            sync()
    sync()
    return (time.perf_counter() - t0) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-s", type=float, default=0.5,
                    help="each repeat times consecutive steps for at least this long")
    ap.add_argument("--warmup-s", type=float, default=1.0,
                    help="steps first, for at least this long (captures the CUDA graphs and wakes a GPU's clocks)")
    ap.add_argument("--models", nargs="+", default=["word"], choices=sorted(MODELS))
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 13, 26])
    ap.add_argument("--scale", default="paper", choices=["paper", "reduced"],
                    help="the grid's scale, whose shapes are timed (a lease sizes its groups at each)")
    ap.add_argument("--group-only", action="store_true",
                    help="time the group's step alone, not its runs one at a time (a lease's sizing: minutes count)")
    add_precision_options(ap)
    ap.add_argument("--out", type=Path, help="write the table as CSV here (with hardware, torch and commit per row)")
    args = ap.parse_args(argv)
    if any(n < 1 or n > MAX_RUNS for n in args.sizes):
        ap.error(f"--sizes must be between 1 and {MAX_RUNS} (a table's cells), got {args.sizes}")
    require_clean_commit(args.out)
    torch.set_num_threads(args.threads)
    precision = precision_option(args)
    set_precision(precision, args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    rows = []
    for name in args.models:
        task_type, built = make_tasks(name, max(args.sizes), args.device, precision, args.scale)  # once: seconds a task
        for n in args.sizes:
            tasks = built[:n]
            batches = tasks[0].batches(0)
            # the trainer's steppers, made once: on a GPU each is one CUDA graph once warmed up
            alone_steps = [] if args.group_only else [task_type.group_stepper([t]) for t in tasks]
            group_step = task_type.group_stepper(tasks)

            def alone(b, steps=alone_steps):  # bound now: the names are deleted at the end of the size
                for step in steps:
                    step(b)

            def group(b, step=group_step):
                step(b)
            if alone_steps:
                per_step(alone, batches, sync, args.warmup_s)  # warm-up
            per_step(group, batches, sync, args.warmup_s)
            # the group's path, read while its warm-up is the last Python to have run: a replayed graph runs
            # none, so a read after the timing would name the path of the last eager run, one run's alone
            path = layer_paths(tasks[0].model)
            if n > 1 and route.stacks(args.device) and "stacked" not in (path or ""):
                print(f"warning: {name} R={n}: the group's layers ran {path!r}, not stacked", flush=True)
            times = {"alone": [], "group": []}
            for _ in range(args.repeats):  # in turn, so that a busy machine slows both alike
                if alone_steps:
                    times["alone"].append(per_step(alone, batches, sync, args.min_s))
                times["group"].append(per_step(group, batches, sync, args.min_s))
            a = statistics.median(times["alone"]) if alone_steps else float("nan")
            g = statistics.median(times["group"])
            rows.append({"model": name, "scale": args.scale, "runs": n, "alone_s": round(a, 4), "group_s": round(g, 4),
                         "alone_runs_per_hour_of_steps": round(n * 3600 / a, 1),
                         "group_runs_per_hour_of_steps": round(n * 3600 / g, 1), "speedup": round(a / g, 2),
                         "run_steps": len(batches) * tasks[0].cfg.epochs,  # a run's whole training, for sizing
                         "threads": args.threads, "batch": tasks[0].cfg.batch_size, "tf32": precision == "tf32",
                         "min_s": args.min_s, "path": path, **provenance(args.device, precision, group_step)})
            print(f"{name} R={n:2d}: one at a time {a:.4f} s, as a group {g:.4f} s a step of all {n} runs: "
                  f"{a / g:.2f}x ({path})", flush=True)
            if args.out:  # each size as it is measured: a lease's timeout keeps the sizes done
                write_benchmark(args.out, rows)
            for step in alone_steps + [group_step]:
                getattr(step, "release", lambda: None)()
            del tasks, alone_steps, group_step, alone, group
        del built
    if args.out:
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
