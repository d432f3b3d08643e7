"""bf16 against float32 on the same run: is bf16's result within a bound of float32's?

Trains one cell of a language model's table (seed, scale and cell as given) twice from the same start,
in float32 and with ``--precision bf16`` (the products in bf16 on the fused path, the cell state and the
weights in float32), into a scratch store, and prints and writes (``--out``) one row: both runs' final
test metric, their difference and whether it is within ``--bound``. Table 3's paper cells train in
bf16; this is the check their records rest on (0.02 bpc at ``quick``).

    python benchmarks/precision_check.py --out data/benchmarks/precision/cpu-amd-epyc.csv
    python benchmarks/precision_check.py --device cuda --out data/benchmarks/precision/gpu-nvidia-h200.csv
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from recdrop import experiments
from recdrop.perf import require_clean_commit, write_benchmark
from recdrop.store import RunStore, git_commit, hardware
from recdrop.train import train_run

METRICS = {"char_lm": "test_bpc", "word_lm": "test_ppl"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default="char_lm", choices=sorted(METRICS))
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=["recurrent_dropout=0.25", "scheme=semeniuta", "sampling=per-step"],
                    metavar="FIELD=VALUE", help="the cell: config fields (default: ours at 0.25 per step)")
    ap.add_argument("--bound", type=float, default=0.02, help="the largest difference that passes (bpc or perplexity)")
    ap.add_argument("--out", type=Path, help="write the row as CSV here")
    args = ap.parse_args(argv)
    require_clean_commit(args.out)
    make_task = experiments.get(args.experiment)[0]
    base = experiments.EXPERIMENTS[args.experiment].config.at_scale(args.scale)
    fields = dict(item.split("=", 1) for item in args.set)
    cfg = base.replace(**{k: type(getattr(base, k))(v) for k, v in fields.items()})
    metric, results = METRICS[args.experiment], {}
    with tempfile.TemporaryDirectory() as scratch:
        for precision in ("float32", "bf16"):
            t0 = time.perf_counter()
            record = train_run(make_task, cfg, args.seed, device=args.device, store=RunStore(Path(scratch) / precision),
                               progress=False, precision=precision)
            results[precision] = (record.metrics[metric], time.perf_counter() - t0, record.path)
    (f32, f32_s, _), (bf16, bf16_s, path) = results["float32"], results["bf16"]
    row = {"experiment": args.experiment, "scale": args.scale, "cell": " ".join(args.set), "seed": args.seed,
           "metric": metric, "float32": round(f32, 5), "bf16": round(bf16, 5), "difference": round(bf16 - f32, 5),
           "bound": args.bound, "within": abs(bf16 - f32) <= args.bound, "bf16_path": path,
           "float32_s": round(f32_s), "bf16_s": round(bf16_s), "hardware": hardware(args.device),
           "device": args.device, "torch": torch.__version__, "commit": git_commit(), "date": time.strftime("%Y-%m-%d")}
    print(f"{args.experiment} at {args.scale}, {row['cell']}, seed {args.seed}: {metric} float32 {f32:.4f}, "
          f"bf16 {bf16:.4f} ({path}): {bf16 - f32:+.4f}, {'within' if row['within'] else 'beyond'} {args.bound}")
    if args.out:
        write_benchmark(args.out, [row])
    return row


if __name__ == "__main__":
    main()
