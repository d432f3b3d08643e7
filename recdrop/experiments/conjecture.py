"""The paper's conjecture (end of Sec. 3): combining Gal's scheme and ours "hold[s] the biggest
potential". gal+semeniuta at both rates and samplings, without and with forward dropout, beside the
single schemes of Tables 2 and 3 at the same scale (test metric of the final model, mean over
seeds). The paper gives no numbers for the combination, so there is nothing of theirs to compare.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import pandas as pd

from ..report import summarize
from ..verdicts import Judgement, MIN_SEEDS_TO_JUDGE, NOT_RUN, Verdict
from .char_lm import table_rows  # char_lm's batch-size check aside
from .lm_tables import CELL_KEYS, COMBINED, FORWARD, RATES, SAMPLINGS, SCHEMES, cell_seeds, cell_values, fit_table

METRICS = {"word_lm": ("test_ppl", 1), "char_lm": ("test_bpc", 3)}


def _metric(experiment: str):
    if experiment not in METRICS:
        raise ValueError(f"experiment={experiment!r} has no conjecture study; allowed values: "
                         f"{', '.join(map(repr, METRICS))}")
    return METRICS[experiment]


def conjecture_table(experiment: str, table_runs, conjecture_runs, seed_runs: Optional[List] = None) -> "pd.DataFrame":
    """One row per (forward, rate, sampling): the combination beside Moon, Gal and ours at the same
    setting, and whether the combination beats both of its parts: by more than twice the block's
    seed noise (``pooled_seed_sd``), or "within seed noise"; without it, the verdict says so."""
    metric, digits = _metric(experiment)
    rows = table_rows(table_runs)
    single, combined = cell_values(rows, metric), cell_values(conjecture_runs, metric)
    n_single, n_combined = cell_seeds(rows, metric), cell_seeds(conjecture_runs, metric)
    sd = pooled_seed_sd([*(seed_runs or []), *conjecture_runs], metric)
    out = []
    for forward in FORWARD:
        for rate in RATES:
            for sampling in SAMPLINGS:
                row = {"forward": forward, "rate": rate, "sampling": sampling}
                cell = (forward, COMBINED, rate, sampling)
                c = combined.get(cell)
                # each to the metric's digits (not 278 beside 276.7), a cell not run as "—" (not "None")
                row[COMBINED] = "—" if c is None else f"{c:.{digits}f}"
                for scheme in SCHEMES:
                    v = single.get((forward, scheme, rate, sampling))
                    row[scheme] = "—" if v is None else f"{v:.{digits}f}"
                parts = [p for p in ((forward, s, rate, sampling) for s in ("gal", "semeniuta")) if p in single]
                if c is None or len(parts) < 2:
                    row["beats gal and ours"] = NOT_RUN
                else:
                    better_part = min(parts, key=single.get)
                    delta = c - single[better_part]
                    row["beats gal and ours"] = _judged(delta, sd.get(forward),
                                                        min(n_combined[cell], n_single[better_part]),
                                                        f"the combination {'better' if delta < 0 else 'worse'}")
                out.append(row)
    return pd.DataFrame(out)


def _within_noise(delta: float, noise: Optional[float]) -> bool:
    """Whether a difference of two cells is within twice the seed noise (unknown: not within)."""
    return noise is not None and abs(delta) <= 2 * noise


def _judged(delta: float, noise: Optional[float], seeds: int, lean: str) -> Judgement:
    """Whether the combination beats the cell it is compared with, ``delta`` the difference (lower is better):
    "within seed noise" within twice ``noise``; beyond it, judged only where ``seeds`` (the fewer of the two
    cells' seeds) reach ``MIN_SEEDS_TO_JUDGE``, as for every claim (``verdicts.claim_verdict``), else not
    judged, saying which way it leans (``lean``)."""
    if _within_noise(delta, noise):
        return Judgement(Verdict.WITHIN_NOISE, "", seeds)
    if noise is None or seeds < MIN_SEEDS_TO_JUDGE:
        why = ("one seed a cell: no seed noise to judge against" if noise is None else
               f"{seeds} seed{'s' * (seeds != 1)} of the cells compared, too few to judge against seed noise")
        return Judgement(Verdict.NOT_JUDGED, f"{lean}; {why}", seeds)
    return Judgement(Verdict.REPRODUCED if delta < 0 else Verdict.NOT_REPRODUCED, "", seeds)


def pooled_seed_sd(runs, metric: str) -> Dict[str, float]:
    """Per forward block, the seed-to-seed standard deviation of the cells with recurrent dropout that
    ran several seeds, pooled: sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)). The cells without recurrent
    dropout are left out: at ``reduced`` they over-fit, and their spread (about 10x the others' in
    Table 2) is not the noise of the dropout cells that the conjecture compares."""
    runs = list(runs)
    if not runs:
        return {}
    s = summarize(runs, CELL_KEYS, [metric])
    s = s[(s["n"] > 1) & (s["scheme"] != "none")].dropna(subset=[f"{metric}_std"])  # a record without the metric
    out = {}
    for forward, block in s.groupby("forward"):
        dof = block["n"] - 1
        out[forward] = float(((dof * block[f"{metric}_std"] ** 2).sum() / dof.sum()) ** 0.5)
    return out


def _fit(runs, metric: str) -> "pd.DataFrame":
    """``lm_tables.fit_table`` of the stored ``runs`` (a run shown by two grids counts once)."""
    unique = list({r.run_id: r for r in runs if r.record}.values())
    return fit_table(unique, metric.split("_")[1])


def _unsettled(fit: "pd.DataFrame", cells):
    """(how many, of how many) of the runs of ``cells`` in ``fit`` (``_fit``) are not settled by its rule:
    their last epochs moved validation by more than the seed noise."""
    picked = fit[[tuple(c) in cells for c in fit[CELL_KEYS].itertuples(index=False)]]
    return int(picked["settled"].str.startswith("no:").sum()), len(picked)


def conjecture_summary(experiment: str, table_runs, conjecture_runs, seed_runs: Optional[List] = None):
    """Per forward block: the best single-scheme cell (any scheme, rate, sampling), the best
    combination cell, the difference, and the verdict. The seed noise is ``pooled_seed_sd`` over the
    seeds study's cells (``seed_runs``) and the combination's own cells; a difference within two of
    it is called "within seed noise", with the side it leans to. Without several seeds of some cell,
    the verdict says so; until every cell of the block has run, it says how many have (the numbers
    beside are the best of those, each with its seeds). Where a run of the two cells compared is not
    settled (``_unsettled``), the verdict is called provisional."""
    metric, digits = _metric(experiment)
    rows = table_rows(table_runs)
    single, combined = cell_values(rows, metric), cell_values(conjecture_runs, metric)
    n_single, n_combined = cell_seeds(rows, metric), cell_seeds(conjecture_runs, metric)
    sd = pooled_seed_sd([*(seed_runs or []), *conjecture_runs], metric)
    fit = _fit([*table_runs, *conjecture_runs, *(seed_runs or [])], metric)
    out = []
    for forward in FORWARD:
        singles = {c: v for c, v in single.items() if c[0] == forward and c[1] in SCHEMES}
        combos = {c: v for c, v in combined.items() if c[0] == forward}
        row = {"forward": forward}
        if not singles or not combos:
            row.update({"verdict": NOT_RUN})
            out.append(row)
            continue
        b_single = min(singles, key=singles.get)
        b_combo = min(combos, key=combos.get)
        delta = combos[b_combo] - singles[b_single]
        noise = sd.get(forward)
        better = "the combination" if delta < 0 else "the best single scheme"
        seeds = min(n_single[b_single], n_combined[b_combo])
        cells = len(RATES) * len(SAMPLINGS)
        if len(combos) < cells or len(singles) < len(SCHEMES) * cells:  # a best of some cells is no best
            verdict = Judgement(Verdict.NOT_JUDGED, f"not yet run in full ({len(combos)} of {cells} combination cells, "
                                                    f"{len(singles)} of {len(SCHEMES) * cells} single-scheme cells)")
        else:
            lean = f"{better} better by {abs(delta):.{digits}f} {metric.split('_')[1]}"
            verdict = _judged(delta, noise, seeds, lean)
            if verdict.verdict is Verdict.WITHIN_NOISE:
                verdict = verdict.noted(lean)
            elif verdict.verdict is not Verdict.NOT_JUDGED:
                verdict = verdict.noted(f"{better} is better")
        if verdict.verdict is not Verdict.NOT_JUDGED:
            moving, compared = _unsettled(fit, {b_single, b_combo})
            if moving:
                verdict = verdict.noted(f"provisional: {moving} of the {compared} runs compared still moving at "
                                        "their last epoch")
        unit = metric.split("_")[1]
        row.update({"best single cell": f"{b_single[1]} {b_single[2]} {b_single[3]}",  # numbers to the metric's digits
                    f"single's test {unit}": f"{singles[b_single]:.{digits}f} (n={n_single[b_single]})",
                    "best combination cell": f"{b_combo[2]} {b_combo[3]}",
                    f"combination's test {unit}": f"{combos[b_combo]:.{digits}f} (n={n_combined[b_combo]})",
                    "combination − single": f"{delta:+.{digits}f}",
                    "seed sd (pooled)": "—" if noise is None else f"{noise:.{digits}f}",
                    "verdict": verdict})
        out.append(row)
    return pd.DataFrame(out)
