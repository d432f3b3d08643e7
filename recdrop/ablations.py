"""An ablation beside its table's runs, cell by cell of the paper's table: the change of each cell's mean
over seeds, its seed noise (Welch's 95% t interval), what it found and how much nearer the paper's numbers
it brings ours. A table's own cells are compared in ``report``."""
from __future__ import annotations

import math
from typing import Callable, List

import numpy as np
import pandas as pd

from .records import Row
from .report import Metric, label_columns, weighed


def difference_noise(a: pd.Series, b: pd.Series, confidence: float = 0.95) -> float:
    """The seed noise of a difference of two cells' means over seeds (``a`` and ``b`` hold ``mean``, ``sd``
    and ``n``, as ``compare``'s rows do): the half-width of its two-sided ``confidence`` interval, Student's
    t quantile times the standard error. With two seeds or more on each side, Welch's:
    ``SE = sqrt(s_a^2 / n_a + s_b^2 / n_b)``, its degrees of freedom by Welch-Satterthwaite. Where one side
    has a single seed, that seed is taken to vary as the other side's do (a new draw against a mean of
    ``n``): ``SE = s sqrt(1 / n + 1)`` with ``n - 1`` degrees of freedom. NaN where a side has not run or
    neither has two seeds."""
    if min(a["n"], b["n"]) < 1 or max(a["n"], b["n"]) < 2:
        return float("nan")
    if min(a["n"], b["n"]) == 1:
        many = a if a["n"] > 1 else b
        se, dof = many["sd"] * math.sqrt(1 / many["n"] + 1), many["n"] - 1
    else:
        va, vb = a["sd"] ** 2 / a["n"], b["sd"] ** 2 / b["n"]
        se = math.sqrt(va + vb)
        dof = (va + vb) ** 2 / (va ** 2 / (a["n"] - 1) + vb ** 2 / (b["n"] - 1)) if va + vb > 0 else a["n"] + b["n"] - 2
    from scipy.stats import t as student_t  # here: scipy.stats takes a second to import, and few calls need it
    return float(student_t.ppf(0.5 + confidence / 2, dof) * se)


def held_cells(t: pd.DataFrame, rows: List[Row]) -> pd.DataFrame:
    """The cells of comparison ``t`` that the grid of ``rows`` holds, renumbered: an ablation may run only
    some of its table's cells (the word vectors tuned, on the RNN's), and the others are not "not yet run"
    but not in it. A cell is held where some row has its labels (those of ``t``'s label columns, before
    "paper", that the rows have)."""
    if not rows:
        return t
    keys = label_columns(t, rows)
    held = [any(all(r[k] == cell[k] for k in keys) for r in rows) for _, cell in t.iterrows()]
    return t[held].reset_index(drop=True)


def ablation_effects(comparison: Callable[[List[Row]], pd.DataFrame], rows: List[Row], ablated: List[Row],
                     metric: Metric) -> pd.DataFrame:
    """What an ablation changes, cell by cell of a paper table (``comparison``: rows -> ``compare``'s table),
    unrounded: the paper's number, ours on the table's runs (``rows``) and on the ablation's (``ablated``),
    as shown and as mean, sd and n (``table_*``, ``ablation_*``); ``change``, the ablation's mean less the
    table's; ``noise``, its seed noise (``difference_noise``); ``outcome``: *better* or *worse* (in
    ``metric``'s direction) *beyond the seed noise*, *within the seed noise*, *equal* (the same to the
    digits shown), *not judged* (one seed each way) or "" (not run both ways); ``diverged``, whether an
    ablation's run diverged; each mean's distance to the paper's number where the table is at the
    paper's scale (``table_distance``, ``ablation_distance``), else the table's (or, where the table's
    cell has not run, the ablation's) *not judged at this scale* (``below_paper``); and ``counted``, whether
    the cell is one of the paper's test numbers (``report.weighed``: what the table's verdicts weigh). Only
    the cells the ablation's grid holds (``held_cells``): an ablation of some cells (the RNN's) has no
    others to run."""
    base = held_cells(comparison(rows), ablated).set_index("setting")
    abl = comparison(ablated).set_index("setting").loc[base.index]
    resolution = 10.0 ** -metric.digits  # a change below the digits shown is no change
    out = pd.DataFrame({"setting": base.index, "paper": base["paper"].to_numpy(), "table": base["ours"].to_numpy(),
                        "ablation": abl["ours"].to_numpy()})
    for name, t in (("table", base), ("ablation", abl)):
        for k in ("mean", "sd", "n"):
            out[f"{name}_{k}"] = t[k].to_numpy()
    out["change"] = out["ablation_mean"] - out["table_mean"]
    out["noise"] = [difference_noise(base.loc[s], abl.loc[s]) for s in base.index]

    def outcome(change: float, noise: float) -> str:
        if pd.isna(change):
            return ""
        if abs(change) < resolution / 2:
            return "equal"
        if pd.isna(noise):
            return "not judged"
        better = (change > 0) == metric.higher_is_better
        return f"{'better' if better else 'worse'} {'beyond' if abs(change) > max(noise, resolution) else 'within'}"
    out["outcome"] = [outcome(c, e) for c, e in zip(out["change"], out["noise"])]
    out["diverged"] = (abl["diverged"] > 0).to_numpy()
    at_paper = (base["below"] == "").to_numpy()  # below it the level is not the paper's
    for name in ("table", "ablation"):
        out[f"{name}_distance"] = (out[f"{name}_mean"] - out["paper"]).abs().where(at_paper)
    ablation_below = (abl["below"] != "").to_numpy()  # where the table's cell has not run
    out["below_paper"] = np.where(~at_paper, base["verdict"].to_numpy(),
                                  np.where(ablation_below, abl["verdict"].to_numpy(), ""))
    out["counted"] = weighed(base).to_numpy()
    return out


def side_by_side(effects: pd.DataFrame, digits: int = 2) -> pd.DataFrame:
    """An ablation's ``ablation_effects`` as its chapter shows them: setting | paper | ours, the table's
    runs | ours, the ablation's | the change | its seed noise (95%) | the outcome | each one's distance to
    the paper's number (at the paper's scale; below it, *not judged at this scale*, as the table says)."""
    def distance(a: float, b: float, below: str) -> str:
        return below or ("—" if pd.isna(a) or pd.isna(b) else f"{a:.{digits}f} → {b:.{digits}f}")
    words = {"better beyond": "better, beyond the seed noise", "worse beyond": "worse, beyond the seed noise",
             "better within": "better, within the seed noise", "worse within": "worse, within the seed noise",
             "not judged": "not judged: one seed each way"}
    return pd.DataFrame({
        "setting": effects["setting"], "paper": effects["paper"], "ours, the table's runs": effects["table"],
        "ours, the ablation's": effects["ablation"],  # each number to the metric's digits, as the table's
        "ablation − table": ["—" if pd.isna(c) else f"{c:+.{digits}f}" for c in effects["change"]],
        "seed noise (95%)": ["—" if pd.isna(e) else f"{e:.{digits}f}" for e in effects["noise"]],
        "the ablation is": [(words.get(o, o) or "—") + ("; a run diverged" if d else "")  # —: not run both ways
                            for o, d in zip(effects["outcome"], effects["diverged"])],
        "distance to the paper's, table → ablation": [distance(a, b, below) for a, b, below in zip(
            effects["table_distance"], effects["ablation_distance"], effects["below_paper"])]})


def ablation_finding(effects: pd.DataFrame, short: bool = False) -> str:
    """What an ablation found (``ablation_effects``), over the paper's test cells that ran both ways: in
    how many it is better, worse or equal, how many of those beyond the seed noise, how many have one seed
    each way (not judged) and how many of its runs diverged, and how much nearer the paper's numbers it
    brings ours, pooled over those cells (the sum of the distances it removes over the sum of the table's
    distances; at the paper's scale only). A sentence for the chapter, or with ``short`` a phrase for the
    landing page."""
    e = effects[effects["counted"]]
    both = e[e["outcome"] != ""]
    diverged = int(e["diverged"].sum())
    if both.empty:
        return ((f"{diverged} of the ablation's cells diverged, none ran both ways" if diverged else
                 "no cell run both ways yet") if short else
                "*What it found:* nothing yet: no cell of the paper's table has run both ways"
                + (f" ({diverged} of the ablation's diverged)." if diverged else "."))
    count = both["outcome"].value_counts()

    def of(kind: str) -> str:
        beyond = int(count.get(f"{kind} beyond", 0))
        n = beyond + int(count.get(f"{kind} within", 0))
        return f"{kind} in {n}" + (f" ({beyond} beyond the seed noise)" if n else "")
    parts = [of("better"), of("worse")]
    parts += [f"equal in {int(count['equal'])}"] if "equal" in count else []
    parts += [f"not judged in {int(count['not judged'])} (one seed each way)"] if "not judged" in count else []
    parts += [f"{diverged} diverged"] if diverged else []
    dist = both.dropna(subset=["table_distance", "ablation_distance"])
    nearer = ""
    if len(dist) and dist["table_distance"].sum() > 0:
        share = (dist["table_distance"] - dist["ablation_distance"]).sum() / dist["table_distance"].sum() * 100
        nearer = (f"{share:.0f}% nearer the paper's numbers" if share >= 0 else
                  f"{-share:.0f}% further from the paper's numbers")
    cells = f"{len(both)} cell{'s' * (len(both) > 1)}"
    if short:
        return (f"against the table's runs, in {cells}: {', '.join(parts)}"
                + (f"; overall {nearer}" if nearer else ""))
    return (f"*What it found:* of the {cells} of the paper's table that ran both ways, the ablation is "
            f"{', '.join(parts)}."
            + (f" Pooled over those cells, it brings our numbers {nearer} (the change of the sum of their "
               f"distances to the paper's, over the table's sum)." if nearer else "")
            + " A cell counts as beyond the seed noise where the change is outside its 95% interval (Student's t "
              "over the seeds: Welch's with several seeds each way; a single seed taken to vary as the other "
              "side's seeds do). A cell of the paper's table is one number of it: one trained model can fill "
              "several (a stage, a test set).")
