"""The Performance page: benchmark results from ``data/benchmarks/*.csv`` (written by
``benchmarks/bench_layers.py --out`` and ``benchmarks/bench_matmul.py --out``) and
``data/benchmarks/groups/*.csv`` (``benchmarks/bench_groups.py --out``), as ratio tables and plots;
and the helpers those scripts write them with."""
from __future__ import annotations

import csv
import functools
import io
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import pandas as pd

from .cells import GATES  # gate blocks per cell, for the FLOP count
from .paths import DATA_DIR
from .records import hardware_as_written_now
from .store import atomic_write_bytes, git_commit, is_clean_commit

BENCH_DIR = DATA_DIR / "benchmarks"
GROUP_DIR = BENCH_DIR / "groups"  # fused groups of runs against one run at a time
IMPLEMENTATIONS = {"torch_nn_ms": "torch.nn, no dropout", "recdrop_ms": "recdrop fast path, dropout 0.25",
                   "ungraphed_ms": "recdrop fast path without CUDA graphs, dropout 0.25",
                   "loop_ms": "recdrop plain loop, dropout 0.25"}


# Dense peak TFLOP/s from NVIDIA's data sheets (SXM parts): plain float32, and TF32 on tensor cores.
PEAK_TFLOPS = {"H100": {"fp32": 67.0, "tf32": 494.7}, "H200": {"fp32": 67.0, "tf32": 494.7}}


def write_benchmark(path: Path, rows: List[Dict[str, Any]]) -> None:
    """A benchmark's rows as CSV at ``path``, written at once (``store.atomic_write_bytes``)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def require_clean_commit(out: Optional[Path]) -> None:
    """Before timing: a benchmark that will be written to ``out`` must time a clean commit, so that its
    rows say what was timed (``load_benchmarks`` refuses others)."""
    if out and not is_clean_commit(git_commit()):
        raise SystemExit(f"error: the code is not a clean commit ({git_commit()}); commit recdrop/ before writing "
                         f"{out}, so that its rows say what was timed")


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


PROVENANCE = ["hardware", "device", "threads", "torch", "commit", "batch", "tf32", "packed", "input_grad", "timing"]
# The fast path's targets on a GPU, at the language models' two shapes (hidden, sequence length).
TARGET_SHAPES = [(256, 35), (1024, 100)]
TARGET_RATIO = 1.5  # recdrop with dropout / torch.nn (cuDNN) without, at most
TARGET_LOOP_SPEEDUP = 5.0  # the plain per-step loop / the fast path, at least
# On a CPU, recdrop's LSTM with dropout over torch.nn's (oneDNN's) without, at most, on padded input: the target's
# name, then its layer's (hidden, steps, batch, bidirectional) and the bound.
CPU_TARGETS = [("LSTM, hidden 256, 35 steps, batch 32", (256, 35, 32, False), 1.2),
               ("the tagger's BiLSTM, hidden 100, 30 steps, batch 10", (100, 30, 10, True), 1.5)]


def load_benchmarks(folder: Path = BENCH_DIR) -> pd.DataFrame:
    """Every stored benchmark row, with the file it came from. A row measured on uncommitted code is
    refused, as run records are: its commit would not say what was timed."""
    # A short hash of digits around one "e" would otherwise be read as a number in scientific notation.
    frames = [pd.read_csv(p, dtype={"commit": str}).assign(file=p.name) for p in sorted(Path(folder).glob("*.csv"))]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["kind", "hidden", "seq", "commit"])
    if "hardware" in df:
        df["hardware"] = df["hardware"].map(hardware_as_written_now)
    unclean = df[~df["commit"].astype(str).map(is_clean_commit)]
    if not unclean.empty:
        raise ValueError(f"benchmark rows from uncommitted code in {sorted(set(unclean['file']))} (commits "
                         f"{sorted(set(unclean['commit']))}): measure again from a clean commit")
    return df


def benchmark_files(df: pd.DataFrame) -> pd.DataFrame:
    """Where and when each benchmark file was measured: one row per file, its date the one its rows
    record, else "on or after" the date of the commit they name (from git; the earliest rows have
    none). Whether the machine was idle is not recorded in any row."""
    cols = [c for c in PROVENANCE if c in df]
    out = df.groupby("file", sort=True)[cols].first().reset_index()
    for count in {"batch", "threads"} & set(out):  # whole numbers, where a file without the column made them float
        out[count] = out[count].astype("Int64")
    dates = df.groupby("file", sort=True)["date"].first() if "date" in df else pd.Series(dtype=object)
    out["date"] = [dates.get(f) if isinstance(dates.get(f), str) else _after_commit(str(c))
                   for f, c in zip(out["file"], out.get("commit", pd.Series("", index=out.index)))]
    return out


@functools.lru_cache(maxsize=None)  # a commit's date does not change: one git call a commit and process
def _after_commit(commit: str) -> Optional[str]:
    """"on or after <the commit's date>", from git; None where git does not know the commit."""
    try:
        day = subprocess.run(["git", "show", "-s", "--format=%cs", commit], capture_output=True, text=True,
                             cwd=DATA_DIR.parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"on or after {day}" if day else None


def _flag(df: pd.DataFrame, name: str) -> pd.Series:
    """A benchmark's yes/no column (``packed``, ``bidirectional``), False where a file lacks it."""
    return df[name].fillna(False).astype(bool) if name in df else pd.Series(False, index=df.index)


def _input_names(df: pd.DataFrame) -> pd.Series:
    """Each benchmark row's input as the tables name it: "padded" (one tensor) or "packed" (a
    PackedSequence), and ", with its gradient" where the input needed its gradient (``--input-grad``)."""
    name = _flag(df, "packed").map({True: "packed", False: "padded"})
    return name + _flag(df, "input_grad").map({True: ", with its gradient", False: ""})


def _input_size(df: pd.DataFrame) -> pd.Series:
    """Each benchmark row's input size: the hidden size where a file does not name one."""
    return df["input_size"].fillna(df["hidden"]) if "input_size" in df else df["hidden"]


def _setting(df: pd.DataFrame) -> pd.Series:
    """Each ``bench_layers.py`` row's products' precision: "float32", "tf32", or "autocast <dtype>"."""
    named = df["autocast"] if "autocast" in df else pd.Series(None, index=df.index, dtype=object)
    autocast = named.astype(object).fillna("").astype(str)  # a file without autocast reads the column as NaN
    return _flag(df, "tf32").map({True: "tf32", False: "float32"}).where(autocast == "", "autocast " + autocast)


def _targets_case(df: pd.DataFrame) -> pd.Series:
    """Per row: the case the fast path's targets were set on, padded input whose gradient is not asked
    for, in float32 (``gpu_targets``, ``plot_time_per_step``; the other rows are in ``ratio_table``)."""
    return ~_flag(df, "packed") & ~_flag(df, "input_grad") & (_setting(df) == "float32")


def _layer_cells(df: pd.DataFrame) -> pd.DataFrame:
    """``bench_layers.py``'s rows with what names their cell: ``input`` (``_input_names``), ``kind`` (Bi-
    for both directions), ``shape`` (hidden x steps, with the input size where it is not the hidden
    size), ``setting`` (the products' precision: TF32, or an autocast dtype), when it was ``measured``
    (``benchmark_files``'s date), that date's ``day``, and how torch.nn and recdrop were ``timed`` (``TIMED``)."""
    size = _input_size(df)
    shape = df["hidden"].astype(str) + " x " + df["seq"].astype(str)
    shape = shape.where(size == df["hidden"], shape + ", input " + size.astype(int).astype(str))
    measured = _measured(df)
    timing = df["timing"] if "timing" in df else pd.Series(None, index=df.index, dtype=object)
    return df.assign(shape=shape, input=_input_names(df), setting=_setting(df), measured=measured,
                     day=measured.map(_day), timed=timing.map(TIMED).fillna("not recorded"),
                     kind=_flag(df, "bidirectional").map({True: "Bi", False: ""}) + df["kind"])


# How a ``bench_layers.py`` file timed torch.nn and recdrop (its ``timing`` column), as the tables say it: in
# turn each repeat, so that a load on the machine weighs on both alike; or each in a block of its own,
# torch.nn's first, which on a busy CPU reads torch.nn's time higher and so the ratio lower.
TIMED = {"in turn": "in turn", "each in a block": "each in a block, torch.nn's first"}


def superseded_layers(df: pd.DataFrame) -> pd.Series:
    """Per row of ``bench_layers.py``: a cell (machine, input, layer, shape, setting, scheme) that a file of
    a later day measured again (kept as history)."""
    if df.empty:
        return pd.Series(False, index=df.index)
    return _measured_again(_layer_cells(df), ["hardware", "input", "kind", "shape", "setting", "scheme"], "day")


def _measured_again(t: pd.DataFrame, cell: List[str], day: str) -> pd.Series:
    """Per row of ``t``: its ``cell`` (those columns' values) was measured again on a later ``day``."""
    return t[day] < t.groupby(cell)[day].transform("max")


def ratio_table(df: pd.DataFrame, value: str = "ratio") -> pd.DataFrame:
    """recdrop's fast path with dropout 0.25 over torch.nn without dropout (forward + backward, same
    machine, same run), or another column ``value`` of the rows: one row per machine, input (a padded
    tensor or a PackedSequence, and whether its gradient was asked for), cell (Bi- for both directions),
    shape (with the input size where it is not the hidden size), setting (float32, TF32 or an autocast),
    when it was measured and how it was timed (``TIMED``), one column per scheme."""
    if df.empty:
        return pd.DataFrame()
    t = _layer_cells(df)
    keys = ["hardware", "input", "kind", "hidden", "seq", "shape", "setting", "measured", "timed"]
    out = t.pivot_table(index=keys, columns="scheme", values=value, aggfunc="first").reset_index()
    out = out.rename(columns={"shape": "hidden x steps"})
    schemes = [c for c in ("semeniuta", "gal", "moon") if c in out]
    return out[["hardware", "input", "kind", "hidden x steps", "setting", *schemes, "measured", "timed"]].rename_axis(
        columns=None)


def before_graphs(df: pd.DataFrame) -> pd.Series:
    """Per row: a GPU file measured before the CUDA graphs (none of its rows timed the path without them,
    ``ungraphed_ms``): superseded, kept as history."""
    gpu = df["device"].astype(str).eq("cuda")
    if "ungraphed_ms" not in df:
        return gpu
    return gpu & ~df.groupby("file")["ungraphed_ms"].transform(lambda t: t.notna().any())


def earlier_layers(df: pd.DataFrame) -> pd.Series:
    """Per row of ``bench_layers.py``: superseded, kept as history (``before_graphs``, ``superseded_layers``).
    The page's answers and targets read the other rows alone."""
    return before_graphs(df) | superseded_layers(df)


def answer_table(df: pd.DataFrame) -> pd.DataFrame:
    """For a library user: ``recdrop.LSTM`` and ``GRU`` with our recurrent dropout 0.25 against
    ``torch.nn``'s without dropout (its time over theirs, forward + backward, in the same run, in
    float32), per machine, input (a padded tensor or a ``PackedSequence``, and whether its gradient was
    asked for) and day of measurement (two machines may share a name): the range over the shapes timed,
    how many, when, and how they were timed (``TIMED``). Superseded rows (``earlier_layers``) are left out."""
    t = _layer_cells(df[(df["scheme"] == "semeniuta") & ~earlier_layers(df)])
    t = t[t["setting"] == "float32"].assign(_packed=_flag(t, "packed"), _grad=_flag(t, "input_grad"))
    if t.empty:
        return pd.DataFrame()
    t = t.sort_values(["device", "hardware", "_packed", "_grad"], ascending=[False, True, True, True],
                      kind="stable")  # GPUs first; per machine padded, padded with the input's gradient, packed
    out = t.groupby(["hardware", "input", "kind", "measured", "timed"], sort=False).agg(  # a measurement a row
        low=("ratio", "min"), high=("ratio", "max"), shapes=("ratio", "size"))
    out["recdrop's time / torch.nn's"] = [f"{lo:.2f}" if lo == hi else f"{lo:.2f}–{hi:.2f}"
                                          for lo, hi in zip(out["low"], out["high"])]
    return out.reset_index()[["hardware", "input", "kind", "recdrop's time / torch.nn's", "shapes", "measured",
                              "timed"]]


def graph_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """What CUDA graphs gain (``recdrop.graphs``): the fast path's time without them over its time with
    them, in the same run, as ``ratio_table`` lays it out; only the current rows (``earlier_layers``) timed
    both ways."""
    if df.empty or "ungraphed_ms" not in df:
        return pd.DataFrame()
    df = df[~earlier_layers(df)]
    timed = df.assign(graphs=df["ungraphed_ms"] / df["recdrop_ms"]).dropna(subset=["graphs"])
    return ratio_table(timed, value="graphs")


def gpu_targets(df: pd.DataFrame) -> pd.DataFrame:
    """The fast path's targets (``TARGET_RATIO``, ``TARGET_LOOP_SPEEDUP``) on each GPU measured: the worst
    ratio to cuDNN and the worst speed-up over the plain loop at the target shapes, over cells and schemes,
    in the targets' case (``_targets_case``), and whether each target is met ("yes" / "no"); on the current
    rows alone (``earlier_layers``)."""
    rows = []
    gpu = df[df["device"].astype(str).str.startswith("cuda") & ~earlier_layers(df)] if not df.empty else df
    gpu = gpu[_targets_case(gpu)]
    for hardware, g in gpu.groupby("hardware"):
        at = g[[tuple(x) in TARGET_SHAPES for x in g[["hidden", "seq"]].itertuples(index=False)]]
        if at.empty:
            continue
        worst_ratio, worst_speedup = at["ratio"].max(), at["loop_over_recdrop"].min()
        rows += [{"hardware": hardware, "target": f"fast path / cuDNN at most {TARGET_RATIO}x, padded input",
                  "measured (worst cell)": f"{worst_ratio:.2f}x",
                  "met": "yes" if worst_ratio <= TARGET_RATIO else "no"},
                 {"hardware": hardware,
                  "target": f"plain loop / fast path at least {TARGET_LOOP_SPEEDUP:.0f}x, padded input",
                  "measured (worst cell)": f"{worst_speedup:.2f}x",
                  "met": "yes" if worst_speedup >= TARGET_LOOP_SPEEDUP else "no"}]
    return pd.DataFrame(rows, columns=["hardware", "target", "measured (worst cell)", "met"])


def cpu_targets(df: pd.DataFrame) -> pd.DataFrame:
    """The CPU path's targets (``CPU_TARGETS``) on each CPU and thread count measured: recdrop's LSTM over
    torch.nn's at the targets' shapes, the worst scheme, in the targets' case (``_targets_case``), whether each
    target is met ("yes" / "no"), and when and how that cell was timed; on the current rows alone
    (``earlier_layers``)."""
    columns = ["hardware", "target", "measured (worst cell)", "met", "measured", "timed"]
    if df.empty:
        return pd.DataFrame(columns=columns)
    cpu = df[(df["device"].astype(str) == "cpu") & (df["kind"] == "LSTM") & ~earlier_layers(df) & _targets_case(df)]
    cpu = _layer_cells(cpu).assign(bidirectional=_flag(cpu, "bidirectional"))
    rows = []
    for hardware, g in cpu.groupby("hardware"):
        shapes = list(zip(g["hidden"], g["seq"], g["batch"], g["bidirectional"]))
        for name, shape, bound in CPU_TARGETS:
            at = g[[s == shape for s in shapes]]
            if not at.empty:
                worst = at.loc[at["ratio"].idxmax()]
                rows.append({"hardware": hardware, "target": f"{name}: at most {bound}x torch.nn",
                             "measured (worst cell)": f"{worst['ratio']:.2f}x",
                             "met": "yes" if worst["ratio"] <= bound else "no", "measured": worst["measured"],
                             "timed": worst["timed"]})
    return pd.DataFrame(rows, columns=columns)


def plot_time_per_step(df: pd.DataFrame):
    """Milliseconds per time step (forward + backward) against hidden size, per implementation, in the
    targets' case (``_targets_case``), a panel per machine and cell that was timed: a line joins only
    the hidden sizes timed at one sequence length, input size and direction (the line's dashes and
    markers), so no line runs between two shapes; each point is the mean over the schemes and files that
    timed it."""
    import seaborn as sns

    one = df[_targets_case(df)]
    if one.empty:
        return None
    size = _input_size(one)
    one = one.assign(shape=one["seq"].astype(str) + " steps, input "
                     + size.astype(int).astype(str).where(size != one["hidden"], "= hidden")
                     + _flag(one, "bidirectional").map({True: ", both directions", False: ""}),
                     panel=panel_names(one, "kind"))
    long = one.melt(id_vars=["panel", "hidden", "seq", "shape"],
                    value_vars=[c for c in IMPLEMENTATIONS if c in one], var_name="implementation", value_name="ms")
    long["ms per step"] = long["ms"] / long["seq"]
    long["implementation"] = long["implementation"].map(IMPLEMENTATIONS)
    long = long.dropna(subset=["ms"])
    # markers as well as dashes: a shape's marker names its unjoined points too
    g = sns.relplot(data=long, x="hidden", y="ms per step", hue="implementation", style="shape", col="panel",
                    col_wrap=3, col_order=sorted(long["panel"].unique()), kind="line", markers=True, dashes=True,
                    height=3.2, aspect=1.2, facet_kws={"sharey": False, "sharex": False})
    g.set(xscale="log", yscale="log")
    g.set_titles(template="{col_name}", size=9)
    _plain_ticks(g, "hidden units", "milliseconds per step")
    return g


def _plain_ticks(g, xlabel: str, ylabel: str) -> None:
    """Log axes ticked in plain numbers ("300", not "3 x 10^2"), each axis named once per row or column,
    and room between the rows for the panels' titles."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for ax in g.axes.flat:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # a tick or more within one decade
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
    g.set_axis_labels(xlabel, ylabel)  # the bottom row's and left column's only
    g.figure.subplots_adjust(hspace=0.45)


def panel_names(df: pd.DataFrame, what: str) -> pd.Series:
    """A figure's panel per machine and ``what`` that was measured (no panel stands empty), titled on two
    short lines, ordered by machine."""
    return df["hardware"].astype(str) + "\n" + df[what].astype(str)


def group_setting(df: pd.DataFrame) -> pd.Series:
    """How a benchmark's group steps ran: the whole step as one CUDA graph or eagerly (rows without a
    ``step`` column ran eagerly), its products' precision, "stacked" where its largest group's layers
    ran stacked (``recdrop.stacked``; a row's ``path`` is the one its first run's layers took last, which
    at one run is not the group's, nor, in an older benchmark file, at 8 runs either), and "per-step loop"
    where they ran the reference loop (``route``'s "loop"), not the fused path: one run at a time is then
    far slower, and so a group's speed-up over it far larger, than on the fused path."""
    step = df["step"].fillna("eager") if "step" in df else pd.Series("eager", index=df.index)
    setting = step + ", " + _precision(df).map(PRECISION_NAMES)
    if "path" not in df:
        return setting
    keyed = df.assign(_setting=setting, _path=df["path"].fillna("").astype(str))
    keys = [k for k in ("file", "hardware", "commit", "model", "_setting") if k in keyed]
    largest = keyed.sort_values("runs", kind="stable").groupby(keys, dropna=False)["_path"].transform("last")
    path = largest.reindex(df.index).fillna("")
    return (setting + path.str.contains("stacked").map({True: ", stacked", False: ""})
            + path.str.contains(r"(?:^|; )loop\b").map({True: ", per-step loop", False: ""}))  # any layer's


# A benchmark's precision as a table names it.
PRECISION_NAMES = {"float32": "float32", "tf32": "TF32", "bf16": "bf16 autocast"}
MODEL_NAMES = {"word": "word LM", "char": "char LM", "word-reduced": "word LM, reduced",
               "char-reduced": "char LM, reduced"}  # ``bench_groups.py``'s models, at each scale (``load_groups``)


def load_groups(folder: Path = GROUP_DIR) -> pd.DataFrame:
    """``load_benchmarks`` of ``bench_groups.py``'s files, each row's model named with its scale where it
    is not the paper's ("char-reduced"): a scale's shapes are another model's. Rows without a scale are
    the paper's."""
    df = load_benchmarks(folder)
    if "scale" in df and "model" in df:
        other = df["scale"].notna() & (df["scale"] != "paper")
        df.loc[other, "model"] = df.loc[other, "model"] + "-" + df.loc[other, "scale"]
    return df


def _precision(df: pd.DataFrame) -> pd.Series:
    """Each row's precision: its ``precision`` column, else "tf32" or "float32" by its ``tf32`` flag (the
    files from before the column)."""
    named = df["precision"] if "precision" in df else pd.Series(None, index=df.index, dtype=object)
    return named.where(named.isin(list(PRECISION_NAMES)), _flag(df, "tf32").map({True: "tf32", False: "float32"}))


def _measured(df: pd.DataFrame) -> pd.Series:
    """Each row's date of measurement, as its file's ``benchmark_files`` gives it ("—" where none is known)."""
    if "file" not in df:
        return pd.Series("—", index=df.index)
    return df["file"].map(benchmark_files(df).set_index("file")["date"]).fillna("—")


def _day(measured: str) -> str:
    """The ISO day (YYYY-MM-DD) in a ``benchmark_files`` date, which may read "on or after" it; "" where none."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", str(measured))
    return found.group(0) if found else ""


def superseded_groups(df: pd.DataFrame) -> pd.Series:
    """Per row of ``bench_groups.py``: measured on a machine, for a model, at a precision that a later file
    measured again (kept as history)."""
    if df.empty:
        return pd.Series(False, index=df.index)
    keyed = df.assign(_precision=_precision(df), _day=_measured(df).map(_day))
    return _measured_again(keyed, ["hardware", "model", "_precision"], "_day")


def grid_answer_table(df: pd.DataFrame) -> pd.DataFrame:
    """For a grid's runner: one training step of a table's first R runs, one run at a time against one
    stacked group (``bench_groups.py``), at the largest R measured, per machine, model and way of stepping
    (``group_setting``); superseded measurements (``superseded_groups``) are left out."""
    t = df[~superseded_groups(df)]
    if t.empty:
        return pd.DataFrame()
    t = t.assign(how=group_setting(t), measured=_measured(t))
    largest = t.sort_values("runs", kind="stable").groupby(["hardware", "how", "model"], sort=False).tail(1)
    largest = largest.sort_values(["device", "hardware", "model"], ascending=[False, True, False], kind="stable")
    return pd.DataFrame({
        "machine": largest["hardware"], "model": largest["model"].map(MODEL_NAMES),
        "how": largest["how"], "runs R": largest["runs"],
        "a step of the R runs, one at a time (ms)": (1000 * largest["alone_s"]).round(1),
        "as one stacked group (ms)": (1000 * largest["group_s"]).round(1),
        "the group's speed-up": largest["speedup"], "measured": largest["measured"]}).reset_index(drop=True)


def cpus_without_products(matmuls: pd.DataFrame, layers: pd.DataFrame) -> List[str]:
    """The CPUs (their model, at any thread count) whose layers were timed (``layers``, ``bench_layers.py``'s
    rows) but not the big products (``matmuls``, ``bench_matmul.py``'s): the product table's missing machines."""
    def cpus(df: pd.DataFrame) -> set:
        if df.empty or "hardware" not in df:
            return set()
        on_cpu = df if "device" not in df else df[df["device"].astype(str) == "cpu"]
        return {re.sub(r" \(\d+ threads?\)$", "", h) for h in on_cpu["hardware"].astype(str)}
    return sorted(cpus(layers) - cpus(matmuls))


def matmul_table(df: pd.DataFrame) -> pd.DataFrame:
    """The big products on a CPU (``bench_matmul.py``), a row per product and machine: GFLOP/s through
    MKL (``torch.mm``), through recdrop (``fused.matmul``, the library it chose) and through oneDNN, and
    where a file has them, the library faster in that run and the chosen library's time over its."""
    if df.empty:
        return pd.DataFrame()
    out = pd.DataFrame({
        "product": df["product"], "m × k × n": [f"{m} × {k} × {n}" for m, k, n in zip(df["m"], df["k"], df["n"])],
        "machine": df["hardware"], "MKL": df["torch_mm_gflops"], "recdrop": df["recdrop_gflops"],
        "recdrop chose": df.get("library"), "oneDNN": df.get("onednn_gflops"),
        "faster here": df.get("best_library"), "chosen's time / faster's": df.get("best_over_chosen")})
    return out.reset_index(drop=True)


def group_table(df: pd.DataFrame) -> pd.DataFrame:
    """A fused group's speed-up over its runs one at a time (``bench_groups.py``: one training step of
    R runs of a table's paper grid), one row per machine, way of stepping (``group_setting``), the date its
    file was measured, model and thread count, one column per group size R; above 1 the group is faster per run."""
    if df.empty:
        return pd.DataFrame()
    df = df.assign(step=group_setting(df), measured=_measured(df))
    out = df.pivot_table(index=["hardware", "step", "measured", "model", "threads"], columns="runs", values="speedup",
                         aggfunc="first")
    out.columns = [f"R = {r}" for r in out.columns]
    return out.reset_index().rename_axis(columns=None)


def plot_group_speedup(df: pd.DataFrame):
    """A stacked group's speed-up over its runs one at a time against the group size R, a line per machine
    and way of stepping, a panel per model (log-log): above the line at 1, the group is faster."""
    import seaborn as sns

    if df.empty:
        return None
    df = df.assign(machine=df["hardware"] + " (" + group_setting(df) + ")",
                   model=df["model"].map(MODEL_NAMES).fillna(df["model"]))
    g = sns.relplot(data=df, x="runs", y="speedup", hue="machine", col="model", kind="line", marker="o",
                    height=3.4, aspect=1.2, facet_kws={"sharey": False})
    g.set(xscale="log", yscale="log")
    g.set_titles(template="{col_name}")
    _plain_ticks(g, "runs trained together, R", "group's speed-up over one at a time")
    for ax in g.axes.flat:
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    return g
