"""Where a fused group's training step spends its time: ``torch.profiler`` over the trainer's own group
step (the steppers ``bench_groups.py`` times, the first R cells of Table 2 or 3 at the paper's shapes),
after a warm-up that captures its CUDA graph. Two kinds of rows, each kind's times summing to the
step's: the kernels, ranked by their own device time, and the operators (with the device time of the
kernels each launched itself), ranked by it on a GPU and by their own host time on a CPU, which has no
kernels; all per step. The first row, ``[step]``, is the wall time of a step while profiled.
``RECDROP_STEP_GRAPH=0`` profiles the eager step; a graphed step's operators are mostly its replay.

    python benchmarks/profile_group.py --device cuda --model word --runs 8 --tf32 --out profile.csv

It says what bounds a group's step: the host's launches, the kernels or the copies.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench_groups import MAX_RUNS, MODELS, make_tasks, per_step, provenance
from recdrop.perf import require_clean_commit, write_benchmark
from recdrop.train import add_precision_options, precision_option, set_precision


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="word", choices=sorted(MODELS))
    ap.add_argument("--runs", type=int, default=8, help=f"the group's size R (1 to {MAX_RUNS})")
    ap.add_argument("--steps", type=int, default=20, help="steps profiled")
    ap.add_argument("--warmup-s", type=float, default=1.0, help="steps first (captures the CUDA graph)")
    ap.add_argument("--top", type=int, default=40, help="rows kept, by their own time")
    add_precision_options(ap)
    ap.add_argument("--out", type=Path, help="write the rows as CSV here")
    args = ap.parse_args(argv)
    if not 1 <= args.runs <= MAX_RUNS:
        ap.error(f"--runs must be between 1 and {MAX_RUNS} (a table's cells), got {args.runs}")
    if args.steps < 1 or args.top < 1:
        ap.error("--steps and --top must be at least 1")
    require_clean_commit(args.out)
    precision = precision_option(args)
    set_precision(precision, args.device)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    task_type, tasks = make_tasks(args.model, args.runs, args.device, precision)
    batches = tasks[0].batches(0)
    group_step = task_type.group_stepper(tasks)
    per_step(group_step, batches, sync, args.warmup_s)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync()
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for n in range(args.steps):
            group_step(batches[n % len(batches)])
        sync()
        wall = time.perf_counter() - t0
    kinds = {"kernel": [], "operator": []}
    for e in prof.key_averages():  # an operator's own device time is its kernels': each kind apart
        kinds["operator" if e.device_type == DeviceType.CPU else "kernel"].append(e)
    ranked = [(kind, e) for kind, found in kinds.items()
              for e in sorted(found, key=lambda e: e.self_device_time_total if cuda else e.self_cpu_time_total,
                              reverse=True)[:args.top]]
    meta = {"model": args.model, "runs": args.runs, **provenance(args.device, precision, group_step)}
    rows = [{"kind": "step", "name": "[step]", "calls_per_step": 1,
             "own_host_ms_per_step": round(1e3 * wall / args.steps, 4), "own_device_ms_per_step": None, **meta}]
    for kind, e in ranked:  # the profiler's times are in microseconds
        rows.append({"kind": kind, "name": e.key, "calls_per_step": round(e.count / args.steps, 2),
                     "own_host_ms_per_step": round(e.self_cpu_time_total / 1e3 / args.steps, 4),
                     "own_device_ms_per_step": round(e.self_device_time_total / 1e3 / args.steps, 4) if cuda else None,
                     **meta})
    if args.out:  # before printing: a closed pipe on the printout must not lose the rows
        write_benchmark(args.out, rows)
    width = max(len(r["name"][:60]) for r in rows)
    for r in rows:
        dev = "" if r["own_device_ms_per_step"] is None else f"{r['own_device_ms_per_step']:9.4f} ms device"
        print(f"{r['kind']:<8} {r['name'][:60]:<{width}} {r['calls_per_step']:7.2f} calls "
              f"{r['own_host_ms_per_step']:9.4f} ms host {dev}")


if __name__ == "__main__":
    main()
