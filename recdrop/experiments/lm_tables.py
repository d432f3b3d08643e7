"""What Tables 2 and 3 share: the 26-cell grid, the paper's layout with ours beside it, and the
learning-curve plot. The word-level table is in perplexity, the character-level one in bits per
character; each experiment's ``report.Metric`` says which (``unit`` names the records' metrics,
``valid_<unit>`` and ``test_<unit>``), and how far from the paper a cell may be to count as reproduced.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Dict, List, Sequence, Tuple

import pandas as pd

from ..paper import paper_results
from ..report import Metric, compare, curves_frame, fmt_mean_sd, seed_values, summarize

FORWARD = {"without forward dropout": dict(input_dropout=0.0, output_dropout=0.0),
           "with forward dropout": dict(input_dropout=0.2, output_dropout=0.5)}  # Tables 2 and 3 captions
SCHEMES = ("moon", "gal", "semeniuta")
RATES = (0.25, 0.5)
SAMPLINGS = ("per-step", "per-sequence")
CELL_KEYS = ["forward", "scheme", "rate", "sampling"]
PAPER_SCHEME = {"moon": "Moon et al. (2015)", "gal": "Gal (2015)", "semeniuta": "Ours", "none": "Ours"}
Cell = Tuple[str, str, float, str]


def table_cells() -> List[Tuple[Dict[str, object], Dict[str, object]]]:
    """(labels, config overrides) of the 26 cells: no recurrent dropout, and scheme x rate x
    sampling, each without and with forward dropout."""
    cells = []
    for forward, fwd in FORWARD.items():
        cells.append(({"forward": forward, "scheme": "none", "rate": 0.0, "sampling": "-"}, dict(fwd)))
        for scheme in SCHEMES:
            for rate in RATES:
                for sampling in SAMPLINGS:
                    cells.append(({"forward": forward, "scheme": scheme, "rate": rate, "sampling": sampling},
                                  dict(fwd, scheme=scheme, recurrent_dropout=rate, sampling=sampling)))
    return cells


COMBINED = "gal+semeniuta"  # the combination the paper expects "to hold the biggest potential" (end of Sec. 3)


def conjecture_cells() -> List[Tuple[Dict[str, object], Dict[str, object]]]:
    """(labels, config overrides) of the combination at both rates and samplings, without and with
    forward dropout: the 8 cells that test the paper's conjecture beside Tables 2 and 3."""
    return [({"forward": forward, "scheme": COMBINED, "rate": rate, "sampling": sampling},
             dict(fwd, scheme=COMBINED, recurrent_dropout=rate, sampling=sampling))
            for forward, fwd in FORWARD.items() for rate in RATES for sampling in SAMPLINGS]


def headline_cells(paper_table: int) -> List[Tuple[Dict[str, object], Dict[str, object]]]:
    """The cells rerun with more seeds: in each block, no recurrent dropout and each scheme's best
    cell by the paper's test column (ties: the paper's first row). Chosen from the paper's numbers,
    not ours, so that the choice does not favour whichever of our seeds ran first."""
    paper = paper_values(paper_table)
    keep = set()
    for forward in FORWARD:
        keep.add((forward, "none", 0.0, "-"))
        for scheme in SCHEMES:
            keep.add(min(((forward, scheme, r, sm) for r in RATES for sm in SAMPLINGS), key=paper.__getitem__))
    return [(label, kw) for label, kw in table_cells() if tuple(label[k] for k in CELL_KEYS) in keep]


def pilot_cells(paper_table: int) -> List[Tuple[Dict[str, object], Dict[str, object]]]:
    """The pilot of a new scale: without forward dropout, no recurrent dropout and the
    paper's best cell of that block (by its test column). Their gap must exceed our seed noise
    before the whole grid can test the claims."""
    paper = paper_values(paper_table)
    forward = "without forward dropout"
    best_cell = min(((forward, s, r, sm) for s in SCHEMES for r in RATES for sm in SAMPLINGS), key=paper.__getitem__)
    keep = {(forward, "none", 0.0, "-"), best_cell}
    return [(label, kw) for label, kw in table_cells() if tuple(label[k] for k in CELL_KEYS) in keep]


def all_cells() -> List[Cell]:
    return [tuple(label[k] for k in CELL_KEYS) for label, _ in table_cells()]


def paper_row(rate: float, sampling: str) -> str:
    return "0.0 --" if rate == 0 else f"{rate} {sampling}"


def cell_name(scheme: str, rate: float, sampling: str) -> str:
    """A cell's name within its block: "semeniuta 0.25 per-step", or "none" without recurrent dropout."""
    return scheme if rate == 0 else f"{scheme} {rate} {sampling}"


def paper_value(paper, forward, scheme, rate, sampling, split) -> float:
    """The paper's number (``paper`` is paper_results(table) indexed by group, row, column)."""
    key = (forward, paper_row(rate, sampling), f"{PAPER_SCHEME[scheme]} {split}")
    return float(paper.loc[key, "value"])


def best_epoch(curves: List[Dict[str, float]], unit: str) -> Dict[str, float]:
    """The epoch of ``curves`` with the lowest finite ``valid_<unit>`` (the last epoch where none is)."""
    finite = [c for c in curves if math.isfinite(c[f"valid_{unit}"])]
    return min(finite, key=lambda c: c[f"valid_{unit}"]) if finite else curves[-1]


def lm_table(rows, paper_table: int, metric: Metric, extras: Sequence[Tuple[str, str, Tuple[str, ...]]] = ()):
    """Table 2 or 3 through ``report.compare``: one row per cell and split (Valid, Test); records hold
    ``valid_<unit>`` and ``test_<unit>``. ``extras``: (column, metric with ``{split}``, the splits it
    applies to) shown beside."""
    paper = paper_results(paper_table).set_index(["group", "row", "column"])
    cells = [({**{k: label[k] for k in CELL_KEYS}, "split": split},
              paper_value(paper, label["forward"], label["scheme"], label["rate"], label["sampling"], split),
              f"{split.lower()}_{metric.unit}")
             for label, _ in table_cells() for split in ("Valid", "Test")]
    extra_keys = [(column, lambda labels, m=m, splits=splits: m.format(split=labels["split"].lower())
                   if labels["split"] in splits else None) for column, m, splits in extras]
    t = compare(rows, cells, CELL_KEYS, metric, extras=extra_keys)
    t["setting"] = [f"{forward.replace(' forward dropout', ' fwd')}, {cell_name(scheme, rate, sampling)}"
                    for forward, scheme, rate, sampling in zip(t["forward"], t["scheme"], t["rate"], t["sampling"])]
    return t


def lm_table_wide(long, metric: Metric):
    """The paper's layout from ``lm_table``'s output: ours beside the paper's for every scheme and
    split, the best value of each column and block in bold (as the paper bolds); cells not run
    are shown as such."""
    long = long.copy()
    long["ours_value"] = long["mean"]
    long["setting"] = [paper_row(r, s) for r, s in zip(long["rate"], long["sampling"])]
    parts = []
    for source, col in (("paper", "paper"), ("ours", "ours_value")):
        w = long.pivot_table(index=["forward", "setting"], columns=["scheme", "split"], values=col, sort=False,
                             dropna=False)
        w.columns = pd.MultiIndex.from_tuples([(sc, sp, source) for sc, sp in w.columns])
        parts.append(w)
    wide = pd.concat(parts, axis=1)
    # the no-dropout row belongs to every scheme's column, as in the paper
    order = [(sc, sp, src) for sc in SCHEMES for sp in ("Valid", "Test") for src in ("paper", "ours")]
    for sc, sp, src in order:
        if ("none", sp, src) in wide and (sc, sp, src) in wide:
            wide[(sc, sp, src)] = wide[(sc, sp, src)].fillna(wide[("none", sp, src)])
    wide = wide[[c for c in order if c in wide]]

    def bold_best(block):
        return ["font-weight: bold" if v == block.min() else "" for v in block]
    styler = wide.style.format(f"{{:.{metric.digits}f}}", na_rep="not run")
    for forward in FORWARD:
        if forward in wide.index.get_level_values(0):
            styler = styler.apply(bold_best, subset=pd.IndexSlice[forward, :], axis=0)
    return styler


def cell_values(rows, metric: str) -> Dict[Cell, float]:
    """Mean of ``metric`` over seeds for every cell that has a record."""
    s = summarize(rows, CELL_KEYS, [metric]).set_index(CELL_KEYS)
    return {c: s.loc[c, f"{metric}_mean"] for c in s.index if s.loc[c, "n"]}


def cell_seeds(rows, metric: str) -> Dict[Cell, int]:
    """How many seeds each mean of ``cell_values`` is over."""
    s = summarize(rows, CELL_KEYS, [metric]).set_index(CELL_KEYS)
    return {c: int(s.loc[c, "n"]) for c in s.index if s.loc[c, "n"]}


def seed_cell_values(rows, metric: str) -> Dict[int, Dict[Cell, float]]:
    """``metric`` of every cell that has a record, seed by seed (what the claims are judged on)."""
    return seed_values(rows, lambda r, m: {r.cell(CELL_KEYS): m.get(metric)})


def paper_values(paper_table: int, split: str = "Test") -> Dict[Cell, float]:
    paper = paper_results(paper_table).set_index(["group", "row", "column"])
    return {c: paper_value(paper, *c, split) for c in all_cells()}


def block(forward: str, *schemes: str) -> List[Cell]:
    """The four (rate, sampling) cells of each of ``schemes``, with or without forward dropout."""
    return [(forward, scheme, r, sm) for scheme in schemes for r in RATES for sm in SAMPLINGS]


def best(values: Dict[Cell, float], forward: str, scheme: str) -> float:
    """The lowest value over the four (rate, sampling) cells of ``scheme`` (``block``)."""
    return min(values[c] for c in block(forward, scheme))


def _draw_curves(ax, df, unit: str, cells, ylabel: str, log: bool, legend_below: bool = False) -> None:
    """On ``ax``: training (solid) and validation (dashed) ``train_<unit>``/``valid_<unit>`` per epoch of
    each of ``cells`` ((scheme, rate, sampling), colour, legend name), without forward dropout, the mean
    over its seeds; a cell without a stored run is named in the legend as not yet run."""
    from matplotlib.ticker import MaxNLocator

    wo = next(iter(FORWARD))
    for (scheme, rate, sampling), color, name in cells:
        c = df[(df["forward"] == wo) & (df["scheme"] == scheme) & (df["rate"] == rate) & (df["sampling"] == sampling)]
        if c.empty:
            ax.plot([], [], " ", label=f"{name}: not yet run at this scale")
            continue
        c = c.groupby("epoch")[[f"train_{unit}", f"valid_{unit}"]].mean()
        ax.plot(c.index, c[f"train_{unit}"], "-", color=color, label=name)
        ax.plot(c.index, c[f"valid_{unit}"], "--", color=color)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole: no tick at 1.5
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    if ax.lines:
        ax.plot([], [], "-", color="black", label="training")
        ax.plot([], [], "--", color="black", label="validation")
        # outside the data: below a panel of a grid (clear of its "epoch" label), else to the right
        where = (dict(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2) if legend_below else
                 dict(loc="center left", bbox_to_anchor=(1.02, 0.5)))
        ax.legend(fontsize=7, **where)


def plot_learning_curves(rows, unit: str, cells, ylabel: str, log: bool = False):
    """``_draw_curves`` of ``cells`` in one panel (Figure 2, and its counterpart for characters)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    _draw_curves(ax, curves_frame(rows, CELL_KEYS), unit, cells, ylabel, log)
    drawn = {cell for cell, _, _ in cells}
    ax.set_title(_what_the_curves_show([r for r in rows if r.cell(("scheme", "rate", "sampling")) in drawn]),
                 fontsize="medium")
    return fig


def _what_the_curves_show(rows) -> str:
    """A title for ``_draw_curves``' lines of ``rows``: the block they come from and how many seeds each
    line is the mean of."""
    wo = next(iter(FORWARD))
    seeds = Counter(r.cell(("scheme", "rate", "sampling")) for r in rows if r.record and r["forward"] == wo).values()
    low, high = min(seeds, default=0), max(seeds, default=0)
    return ("Without forward dropout; each line the mean over its cell's seeds "
            f"({low if low == high else f'{low}–{high}'})")


FIT_TOLERANCE, FIT_WINDOW, FIT_DECAYED = 0.01, 5, 0.1  # fit_table's rule: 1%, 5 epochs, a tenth


def _last_valid_sds(rows, unit: str) -> Dict[Cell, float]:
    """The seed noise of a run's final validation ``valid_<unit>`` (its curves' last epoch): the standard
    deviation over seeds, for every cell run with two seeds or more."""
    by_cell: Dict[Cell, List[float]] = {}
    for r in rows:
        if r.record:
            by_cell.setdefault(r.cell(CELL_KEYS), []).append(r.record.curves[-1][f"valid_{unit}"])
    sds = {cell: float(pd.Series(v).std()) for cell, v in by_cell.items() if len(v) > 1}
    return {cell: sd for cell, sd in sds.items() if not pd.isna(sd)}


def fit_table(rows, unit: str) -> "pd.DataFrame":
    """Per stored run, from its curves: does it over-fit, has it converged, and is its number settled
    (the conditions a reduced scale must meet; ``describe_fit`` says the rules in words)? The epoch of
    the lowest validation ``valid_<unit>``; how far validation and training (``train_<unit>``) moved
    from that epoch to the last, in %; the last learning rate as a fraction of the first; the fit;
    whether it converged; how far validation moved over the last ``FIT_WINDOW`` epochs (what stopping
    there, an early-stopping rule's patience sooner, would change), against the seed noise of the final
    validation (``_last_valid_sds``): its cell's, else the smallest measured, so that *settled* is earned."""
    tol, window = FIT_TOLERANCE, FIT_WINDOW
    noises = _last_valid_sds(rows, unit)
    out = []
    for r in rows:
        if not r.record:
            continue
        c = pd.DataFrame(r.record.curves).set_index("epoch")
        valid, train = c[f"valid_{unit}"], c[f"train_{unit}"]
        best_at, last = int(valid.idxmin()), int(c.index.max())
        valid_up = valid[last] / valid[best_at] - 1
        train_move = train[last] / train[best_at] - 1
        recent = valid.iloc[-(window + 1):]
        flat = len(c) > window and (recent.max() - recent.min()) / valid[best_at] < tol
        no_new_best = best_at <= last - window
        lr_left = c.loc[last, "lr"] / c["lr"].iloc[0]
        if valid_up > tol:
            fit = "over-fits" if no_new_best and train_move < 0 else "validation rising"
        else:
            fit = "flat" if flat else "still improving" if recent.iloc[-1] < recent.iloc[0] else "still moving"
        converged = ("yes: learning rate decayed" if lr_left <= FIT_DECAYED else
                     f"yes: no new best for {window} epochs" if no_new_best else
                     f"yes: validation flat for {window} epochs" if flat else "no")
        move = float(recent.iloc[-1] - recent.iloc[0]) if len(c) > window else float("nan")
        noise = noises.get(r.cell(CELL_KEYS), min(noises.values(), default=float("nan")))
        stable = ("—" if pd.isna(move) else "no seed noise yet" if pd.isna(noise) else
                  "yes" if abs(move) <= noise else "no: still falling" if move < 0 else "no: still rising")
        out.append({**{k: r[k] for k in CELL_KEYS}, "seed": r.seed, "epochs": last, "best validation epoch": best_at,
                    "validation, last vs best (%)": round(100 * valid_up, 1),
                    "training, last vs best epoch (%)": round(100 * train_move, 1),
                    "last lr / first": float(f"{lr_left:.3g}"), "fit": fit, "converged": converged,  # not 0.0 for 1e-5
                    f"validation change, last {window} epochs ({unit})": float(f"{move:.3g}"),
                    "settled": stable})
    return pd.DataFrame(out, columns=CELL_KEYS + ["seed", "epochs", "best validation epoch",
                                                  "validation, last vs best (%)", "training, last vs best epoch (%)",
                                                  "last lr / first", "fit", "converged",
                                                  f"validation change, last {window} epochs ({unit})", "settled"])


def pilot_table(rows, unit: str, paper_table: int, digits: int) -> "pd.DataFrame":
    """The pilot's test of a new scale, one row per model tested: the final test
    ``test_<unit>`` (the model the paper tests) and that of the best-validation epoch (what early
    stopping would test), each of its two cells (no dropout, and the paper's best cell; without
    forward dropout), mean ± sd over seeds; the gap between their means; and the seed noise of that
    gap, two standard errors of a difference of means. The scale can test the claims where the final
    models' gap favours dropout and exceeds the noise; where the best-validation models' does not,
    dropout's gain is the baseline's over-fitting, which early stopping would also have removed. Numbers
    to ``digits`` decimals (the table's metric's)."""
    none, best_cell = [tuple(label[k] for k in CELL_KEYS) for label, _ in pilot_cells(paper_table)]
    name = cell_name(*best_cell[1:])
    out = []
    for tested, metric in (("final", f"test_{unit}"), ("best validation", f"best_test_{unit}")):
        values = {c: [r.metrics[metric] for r in rows if metric in r.metrics and r.cell(CELL_KEYS) == c]
                  for c in (none, best_cell)}
        a, b = (pd.Series(values[c], dtype=float) for c in (none, best_cell))
        gap = a.mean() - b.mean()  # lower is better: > 0 where dropout helps
        noise = 2 * (a.var() / len(a) + b.var() / len(b)) ** 0.5 if min(len(a), len(b)) > 1 else float("nan")
        if min(len(a), len(b)) < 2:
            verdict = "not yet: fewer than 2 seeds a cell"
        elif gap > noise:
            verdict = "the gap favours dropout and exceeds the seed noise" + (
                ": this scale can test the claims" if tested == "final" else "")
        else:
            verdict = "the gap does not favour dropout by more than the seed noise" + (
                ": this scale cannot test the claims" if tested == "final"
                else ": with early stopping, dropout gains nothing here")
        out.append({"model tested": tested, "no dropout": fmt_mean_sd(a.mean(), a.std(), len(a), digits),
                    f"the paper's best cell without forward dropout ({name})":
                        fmt_mean_sd(b.mean(), b.std(), len(b), digits),
                    f"gap ({unit})": round(gap, digits), "seed noise (2 SE)": round(noise, digits), "pilot": verdict})
    return pd.DataFrame(out)


def describe_fit() -> str:
    """``fit_table``'s rule in words, for a chapter."""
    tol, window = f"{FIT_TOLERANCE:.0%}", FIT_WINDOW
    return (f"A run *over-fits* where validation is more than {tol} above its best, its best is at least {window} "
            f"epochs before the last, and training has fallen since; *validation rising* where it is more than "
            f"{tol} above its best but the best is more recent; *flat* where validation moved by less than {tol} "
            f"over the last {window} epochs; else *still improving* where it is lower than {window} epochs before, "
            f"*still moving* where it is not. A run has *converged* where its learning rate "
            f"has decayed to {FIT_DECAYED:g} of its first value or less, or validation has had no new best for "
            f"{window} epochs (an early-stopping rule's patience), or has moved by less than {tol} over them. "
            f"Its number is *settled* where validation moved over its last {window} epochs by less than the seed "
            f"noise, the standard deviation over seeds of the final validation number: its cell's where the cell "
            f"ran with several seeds, else the smallest measured at that scale. Stopping {window} epochs sooner, "
            f"as an early-stopping rule might, would then have moved the number by less than a change of seed. "
            f"The *validation change* is the last epoch's validation minus that of {window} epochs before: "
            f"negative while it still falls.")


def plot_run_curves(rows, unit: str, ylabel: str, log: bool = False):
    """The curves (``_draw_curves``) of every cell without forward dropout that has runs, one panel per
    scheme with no dropout in each for reference: whether a model over-fits, and when each run converged."""
    import matplotlib.pyplot as plt

    wo = next(iter(FORWARD))
    ran = {r.cell(("scheme", "rate", "sampling")) for r in rows if r.record and r["forward"] == wo}
    schemes = [s for s in dict.fromkeys(r["scheme"] for r in rows) if s != "none" and any(c[0] == s for c in ran)]
    schemes = schemes or ["none"]
    fig, axes = plt.subplots(1, len(schemes), figsize=(4.5 * len(schemes), 3.8), sharey=True, squeeze=False)
    df = curves_frame(rows, CELL_KEYS)
    colours = ["tab:red", "tab:orange", "tab:green", "tab:purple"]
    for ax, scheme in zip(axes[0], schemes):
        mine = sorted(c for c in ran if c[0] == scheme and scheme != "none")
        cells = [(("none", 0.0, "-"), "tab:blue", "no dropout")] * (("none", 0.0, "-") in ran)
        cells += [(c, colours[i % len(colours)], f"{c[1]} {c[2]}") for i, c in enumerate(mine)]
        _draw_curves(ax, df, unit, cells, ylabel if ax is axes[0][0] else "", log, legend_below=True)
        ax.set_title(scheme if scheme != "none" else "no dropout")
    fig.suptitle(_what_the_curves_show(rows), fontsize="medium")
    fig.tight_layout()
    return fig
