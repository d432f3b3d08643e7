"""The big float32 products of the experiments on a CPU: torch's (MKL's sgemm) against recdrop's
(``recdrop.fused.matmul``, through the library ``recdrop.cpu_products`` measures to be the faster for
each, named in the ``library`` column), in one run on one machine, as GFLOP/s and their ratio; and the
oneDNN route itself, whichever is chosen. The three are timed in turn, each repeat, so that a load on the
machine weighs on all alike. ``best_library`` is the faster of MKL and oneDNN here, and ``best_over_chosen``
how much faster it was than the library chosen (1.0 where the chosen is the best).

    python benchmarks/bench_matmul.py --threads 1 --out data/benchmarks/matmul/cpu-amd-epyc-1thread.csv
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from recdrop import cpu_products
from recdrop.fused import onednn_matmul, matmul
from recdrop.perf import require_clean_commit, write_benchmark
from recdrop.store import git_commit, hardware

# (what, m, k, n, whether a is a transposed view): the products of a training step
SHAPES = [
    ("char LM reduced: input projection W_ih x, all steps", 1600, 256, 2048, False),
    ("char LM reduced: recurrent weight gradient dG^T h", 2048, 1600, 512, True),
    ("char LM reduced: input gradient dG W_ih", 1600, 2048, 256, False),
    ("word LM reduced: decoder h W_out^T", 1120, 256, 10000, False),
    ("word LM reduced: decoder weight gradient dY^T h", 10000, 1120, 256, True),
    ("NER paper: recurrent weight gradient dG^T h, 5-word spans", 4096, 160, 1024, True),
    ("NER paper: recurrent weight gradient dG^T h, 15-word spans", 4096, 480, 1024, True),
]


def median_seconds(products, repeats: int):
    """The median time of each of ``products``, timed in turn, one call each, ``repeats`` times."""
    times = [[] for _ in products]
    for f in products:
        f()
    for _ in range(repeats):
        for f, kept in zip(products, times):
            t0 = time.perf_counter()
            f()
            kept.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, help="write the table as CSV here (with hardware, torch and commit per row)")
    args = ap.parse_args(argv)
    require_clean_commit(args.out)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    env = {"hardware": hardware("cpu"), "threads": torch.get_num_threads(), "torch": torch.__version__,
           "commit": git_commit()}
    print(f"# {env}")
    rows = []
    for what, m, k, n, transposed in SHAPES:
        a = torch.randn(k, m).t() if transposed else torch.randn(m, k)
        b = torch.randn(k, n)
        cpu_products.forget()  # this product's choice alone, timed afresh
        matmul(a, b)  # the choice, timed (where not kept) before the timings
        t_torch, t_ours, t_onednn = median_seconds(
            [lambda: torch.mm(a, b), lambda: matmul(a, b), lambda: onednn_matmul(a, b)], args.repeats)
        gflop = 2 * m * k * n / 1e9
        chosen = cpu_products.chosen()
        best = "onednn" if t_onednn < t_torch else "mkl"
        rows.append({"product": what, "m": m, "k": k, "n": n, "torch_mm_gflops": round(gflop / t_torch, 1),
                     "recdrop_gflops": round(gflop / t_ours, 1), "speedup": round(t_torch / t_ours, 2),
                     "library": chosen, "onednn_gflops": round(gflop / t_onednn, 1), "best_library": best,
                     "best_over_chosen": round({"mkl": t_torch, "onednn": t_onednn}.get(chosen, t_ours)
                                               / min(t_torch, t_onednn), 2), **env})
        row = rows[-1]
        print(f"{what:55s} torch.mm {row['torch_mm_gflops']:6.1f} GFLOP/s   recdrop {row['recdrop_gflops']:6.1f} "
              f"GFLOP/s ({row['library']})   oneDNN {row['onednn_gflops']:6.1f}   {row['speedup']:.2f}x   "
              f"best {best}, {row['best_over_chosen']:.2f}x the chosen", flush=True)
    if args.out:
        write_benchmark(args.out, rows)
    return rows


if __name__ == "__main__":
    main()
