"""The Performance page: benchmark results from ``data/benchmarks/*.csv`` (written by
``benchmarks/bench_layers.py --out``), as ratio tables and a plot of time per step."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd

from .paths import DATA_DIR

BENCH_DIR = DATA_DIR / "benchmarks"
IMPLEMENTATIONS = {"torch_nn_ms": "torch.nn, no dropout", "recdrop_ms": "recdrop fast path, dropout 0.25",
                   "loop_ms": "recdrop plain loop, dropout 0.25"}


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# Dense peak TFLOP/s from NVIDIA's data sheets (SXM parts): plain float32, and TF32 on tensor cores.
PEAK_TFLOPS = {"H100": {"fp32": 67.0, "tf32": 494.7}, "H200": {"fp32": 67.0, "tf32": 494.7}}


def flops_per_step(kind: str, batch: int, input_size: int, hidden: int) -> int:
    """Matmul FLOPs of one time step, forward + backward: the gate pre-activations
    G*H x (input + hidden) per example (2 FLOPs a multiply-add) forward, twice that backward (the
    gradients of the inputs and of the weights). Pointwise work is left out (it is O(B*H))."""
    return 3 * 2 * batch * GATES[kind] * hidden * (input_size + hidden)


def peak_tflops(hardware: str, tf32: bool) -> Optional[float]:
    """The device's dense peak, where the data sheet is known (None for CPUs and other GPUs)."""
    for name, peaks in PEAK_TFLOPS.items():
        if name in hardware:
            return peaks["tf32" if tf32 else "fp32"]
    return None


def load_benchmarks(folder: Path = BENCH_DIR) -> pd.DataFrame:
    """Every stored benchmark row, with the file it came from."""
    frames = [pd.read_csv(p).assign(file=p.name) for p in sorted(Path(folder).glob("*.csv"))]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["kind", "hidden", "seq"])


def ratio_table(df: pd.DataFrame) -> pd.DataFrame:
    """Forward+backward time of each layer as a ratio to torch.nn without dropout (same machine, same run)."""
    cols = ["hardware", "threads", "torch", "commit", "kind", "hidden", "seq", "scheme", "torch_nn_ms",
            "recdrop_ms", "ratio", "loop_ms", "loop_over_recdrop", "gflop_per_step", "recdrop_tflops",
            "peak_fraction"]
    return df[[c for c in cols if c in df]].rename(columns={"ratio": "recdrop / torch.nn",
                                                            "loop_over_recdrop": "plain loop / recdrop"})


def plot_time_per_step(df: pd.DataFrame):
    """Milliseconds per time step (forward + backward) against hidden size, per implementation."""
    import seaborn as sns

    if df.empty:
        return None
    long = df.melt(id_vars=["hardware", "kind", "hidden", "seq"], value_vars=list(IMPLEMENTATIONS),
                   var_name="implementation", value_name="ms")
    long["ms per step"] = long["ms"] / long["seq"]
    long["implementation"] = long["implementation"].map(IMPLEMENTATIONS)
    g = sns.relplot(data=long, x="hidden", y="ms per step", hue="implementation", col="kind", row="hardware",
                    kind="line", marker="o", height=3.2, aspect=1.2, facet_kws={"sharey": False})
    g.set(xscale="log", yscale="log")
    return g
