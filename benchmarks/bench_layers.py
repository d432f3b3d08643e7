"""Forward+backward time of recdrop layers with recurrent dropout, as a ratio to torch.nn without.

Everything is measured in one run on one machine: torch.nn (cuDNN on a GPU, its fused kernel on a
CPU) without dropout; recdrop with Semeniuta per-step dropout p=0.25 (and optionally the other
schemes) on its default path (the fused sequence of recdrop.fused, its loops as CUDA graphs on a
GPU); on a GPU the same without graphs (``RECDROP_CUDA_GRAPHS=0``); and the same module's plain
per-step loop (``fused=False``). torch.nn and recdrop are timed in turn, each repeat, so that a load on
the machine weighs on both alike; the ratio is the median of the repeats' ratios. With ``--autocast
bf16`` every forward, torch.nn's too, runs under ``torch.autocast`` to that dtype (a mixed-precision
user's model). By default the input needs no gradient (a first layer over fixed features), which
recdrop then skips; with ``--input-grad`` it needs one, as over an embedding or another layer:
torch.nn's fused kernels (cuDNN's, and oneDNN's LSTM on a CPU) compute it either way, so there only
recdrop's time grows. Prints a table and, with --out, writes it as CSV.

    python benchmarks/bench_layers.py                   # CPU, 2 threads
    python benchmarks/bench_layers.py --device cuda --schemes semeniuta gal moon
    python benchmarks/bench_layers.py --device cuda --autocast bf16
    python benchmarks/bench_layers.py --input-grad      # the input's gradient too
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import List, Optional

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

import recdrop
from recdrop.perf import flops_per_step, peak_tflops, require_clean_commit, write_benchmark
from recdrop.store import git_commit, hardware
from recdrop.train import layer_paths

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
TIMING = "in turn"  # each repeat times torch.nn and recdrop one after the other (``time_fwd_bwd``)
SHAPES = [(256, 35), (1024, 35), (1024, 100)]  # (hidden, steps): perf.TARGET_SHAPES and one between


def fwd_bwd(module, x, device: str, autocast: Optional[torch.dtype] = None) -> None:
    """One forward+backward pass of ``module``, the forward under ``torch.autocast`` to ``autocast`` where
    given."""
    with torch.autocast(torch.device(device).type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        y, _ = module(x)
    (y.data if isinstance(y, PackedSequence) else y).float().sum().backward()


def time_fwd_bwd(modules, x, repeats: int, device: str, autocast: Optional[torch.dtype] = None) -> List[List[float]]:
    """Seconds of each repeat's forward+backward pass of each of ``modules`` (after two warm-up passes
    each), timed in turn each repeat, so that a load on the machine weighs on all alike."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for module in modules:
        for _ in range(2):
            fwd_bwd(module, x, device, autocast)
    times = [[] for _ in modules]
    for _ in range(repeats):
        for module, kept in zip(modules, times):
            sync()
            t0 = time.perf_counter()
            fwd_bwd(module, x, device, autocast)
            sync()
            kept.append(time.perf_counter() - t0)
    return times


def median_time(module, x, repeats: int, device: str, autocast: Optional[torch.dtype] = None) -> float:
    """The median seconds of one forward+backward pass of ``module``."""
    return statistics.median(time_fwd_bwd([module], x, repeats, device, autocast)[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--kinds", nargs="+", default=["LSTM", "GRU"])
    ap.add_argument("--schemes", nargs="+", default=["semeniuta"])
    ap.add_argument("--hidden", type=int, nargs="+",
                    help="hidden sizes to sweep at --seq (instead of SHAPES)")
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--packed", action="store_true",
                    help="a PackedSequence in, of lengths spread evenly from half the sequence length to all of it")
    ap.add_argument("--input", type=int, help="input size (default: the hidden size)")
    ap.add_argument("--bidirectional", action="store_true", help="both directions, as a tagger's BiLSTM")
    ap.add_argument("--input-grad", action="store_true",
                    help="the input needs its gradient too, as over an embedding or another layer (cuDNN, and "
                         "oneDNN's LSTM on a CPU, compute it either way)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls on the GPU (both torch.nn and recdrop)")
    ap.add_argument("--autocast", choices=sorted(AUTOCAST), help="every forward under torch.autocast to this dtype")
    ap.add_argument("--out", type=Path, help="write the table as CSV here (with hardware, torch and commit per row)")
    args = ap.parse_args(argv)
    require_clean_commit(args.out)
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):  # a GPU's flags: a CPU run leaves them as they are
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = args.tf32
    torch.manual_seed(0)
    input_note = ", with the input's gradient" if args.input_grad else ""
    print(f"# hardware: {hardware(args.device)} | threads: {torch.get_num_threads()} | torch {torch.__version__} "
          f"| commit {git_commit()} | float32{' (TF32 matmuls)' if args.tf32 else ''}"
          f"{f', autocast {args.autocast}' if args.autocast else ''}, batch {args.batch}"
          f"{input_note}")
    autocast = AUTOCAST.get(args.autocast)
    rows = []
    # on a GPU the fast path runs as CUDA graphs unless RECDROP_CUDA_GRAPHS=0 (then recdrop_ms is without them)
    graphed = args.device.startswith("cuda") and os.environ.get("RECDROP_CUDA_GRAPHS", "1") != "0"
    env = {"hardware": hardware(args.device), "device": args.device, "threads": torch.get_num_threads(),
           "torch": torch.__version__, "commit": git_commit(), "batch": args.batch, "tf32": args.tf32,
           "packed": args.packed, "bidirectional": args.bidirectional, "input_grad": args.input_grad,
           "autocast": args.autocast, "timing": TIMING}
    peak = peak_tflops(env["hardware"], args.tf32)
    shapes = [(h, args.seq) for h in args.hidden] if args.hidden else SHAPES
    for kind in args.kinds:
        for hidden, steps in shapes:
            size = args.input or hidden
            x = torch.randn(steps, args.batch, size, device=args.device)
            if args.packed:
                lengths = torch.linspace(steps, steps // 2, args.batch).round().long()
                x = pack_padded_sequence(x, lengths, enforce_sorted=False)
            # on the leaf itself: packed from a tensor that needs its gradient, x would carry a graph that
            # the first backward frees
            (x.data if args.packed else x).requires_grad_(args.input_grad)
            ref = getattr(torch.nn, kind)(size, hidden, bidirectional=args.bidirectional).to(args.device)
            try:
                fwd_bwd(ref, x, args.device, autocast)
            except RuntimeError as e:  # a CPU's oneDNN LSTM may not take autocast's dtype
                print(f"torch.nn.{kind} cannot run here: {str(e).splitlines()[0]}")
                ref = None
            for scheme in args.schemes:
                ours = getattr(recdrop, kind)(size, hidden, bidirectional=args.bidirectional, recurrent_dropout=0.25,
                                              scheme=scheme, sampling="per-step").to(args.device)
                fused = ours.fused
                if ref is None:
                    t_ref, t_ours = float("nan"), median_time(ours, x, args.repeats, args.device, autocast)
                    ratio = float("nan")
                else:
                    refs, ourss = time_fwd_bwd([ref, ours], x, args.repeats, args.device, autocast)
                    t_ref, t_ours = statistics.median(refs), statistics.median(ourss)
                    # the median of each repeat's ratio: a repeat's two timings, made in turn, share the
                    # machine's state of the moment, which drifts between repeats on a shared machine
                    ratio = statistics.median(o / r for o, r in zip(ourss, refs))
                path = layer_paths(ours)  # the path the timed calls took, and on a CPU its products' libraries
                t_ungraphed = None
                if graphed:  # the fast path without CUDA graphs (recdrop.graphs)
                    os.environ["RECDROP_CUDA_GRAPHS"] = "0"
                    try:
                        t_ungraphed = median_time(ours, x, args.repeats, args.device, autocast)
                    finally:
                        os.environ.pop("RECDROP_CUDA_GRAPHS")
                ours.fused = False  # the plain per-step loop, for comparison
                t_loop = median_time(ours, x, args.repeats, args.device, autocast) if fused else t_ours
                rows.append({"kind": kind, "hidden": hidden, "input_size": size, "seq": steps, "scheme": scheme,
                             "torch_nn_ms": round(t_ref * 1e3, 2), "recdrop_ms": round(t_ours * 1e3, 2),
                             "loop_ms": round(t_loop * 1e3, 2), "ratio": round(ratio, 2),
                             "ungraphed_ms": None if t_ungraphed is None else round(t_ungraphed * 1e3, 2),
                             "loop_over_recdrop": round(t_loop / t_ours, 2), "cuda_graphs": graphed, "path": path,
                             **env})
                r = rows[-1]
                flops = flops_per_step(kind, args.batch, size, hidden) * (2 if args.bidirectional else 1)
                r["gflop_per_step"] = round(flops / 1e9, 4)
                r["recdrop_tflops"] = round(flops * steps / t_ours / 1e12, 4)
                r["peak_fraction"] = round(r["recdrop_tflops"] / peak, 4) if peak else None
                print(f"{'Bi' if args.bidirectional else ''}{kind:4s} input {size:5d} hidden {hidden:5d} "
                      f"seq {steps:4d} {scheme:14s} torch.nn {r['torch_nn_ms']:9.2f} ms"
                      f"   recdrop {r['recdrop_ms']:9.2f} ms ({path})"
                      f"   ratio {r['ratio']:.2f}x   plain loop {r['loop_ms']:9.2f} ms"
                      + (f"   without graphs {r['ungraphed_ms']:9.2f} ms" if t_ungraphed is not None else "")
                      + f"   {r['gflop_per_step']:.3f} GFLOP/step, {r['recdrop_tflops']:.3f} TFLOP/s"
                      + (f" = {r['peak_fraction']:.1%} of peak" if peak else " (peak unknown)"), flush=True)
    if args.out:
        write_benchmark(args.out, rows)
    return rows


if __name__ == "__main__":
    main()
