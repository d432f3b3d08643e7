"""Seeds (beyond the paper, which runs each cell once): the headline cells of Tables 1-3 with
several seeds, mean ± sd, and which of the paper's orderings survive the seed noise.

An ordering of two cells (the paper's test numbers differ) *survives* when every seed of the cell
the paper puts ahead beats every seed of the other, and is *reversed* when every seed of the other
beats every seed of it; where the seeds overlap, it *holds on the means only* or is *reversed on the
means only*, as the means agree with the paper or not. Each cell
needs as many seeds as a claim does to be judged (``verdicts.MIN_SEEDS_TO_JUDGE``). This is stricter
than ``verdicts.claim_verdict``, which pairs the cells' seeds: here every seed of one cell is set
against every seed of the other.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import pandas as pd

from ..report import fmt_mean_sd
from ..verdicts import Judgement, MIN_SEEDS_TO_JUDGE, Verdict
from .lm_tables import CELL_KEYS as LM_KEYS
from .lm_tables import cell_name, paper_values
from .temporal_order import CELL_KEYS as TO_KEYS
from .temporal_order import paper_test_acc


@dataclass(frozen=True)
class Study:
    keys: List[str]  # the labels that name a cell
    block: str  # the label within which the paper's cells are compared
    metric: str  # the record's metric
    lower_is_better: bool
    paper: Callable[[], Dict[Tuple, float]]  # the paper's value per cell, in the metric's unit
    unit: str
    digits: int
    name: Callable[[Dict[str, Any]], str]  # a cell's name within its block, from its labels
    factor: float = 1.0  # shown = stored x factor (accuracy in %)


def _lm_name(labels: Dict[str, Any]) -> str:
    return cell_name(labels["scheme"], labels["rate"], labels["sampling"])


def _to_name(labels: Dict[str, Any]) -> str:
    """"gal per-step", or "none" (Table 1's scaling is the paper's in every headline cell)."""
    return " ".join(labels[k] for k in ("scheme", "sampling") if labels[k] != "-")


STUDIES = {
    "temporal_order": Study(TO_KEYS, "length", "test_acc", False, paper_test_acc, "accuracy (%)", 1, _to_name,
                            100.0),
    "word_lm": Study(LM_KEYS, "forward", "test_ppl", True, lambda: paper_values(2), "perplexity", 1, _lm_name),
    "char_lm": Study(LM_KEYS, "forward", "test_bpc", True, lambda: paper_values(3), "bpc", 3, _lm_name),
}


def study(experiment: str) -> Study:
    if experiment not in STUDIES:
        raise ValueError(f"experiment={experiment!r} has no seeds study; allowed values: "
                         f"{', '.join(map(repr, STUDIES))}")
    return STUDIES[experiment]


def _label(s: Study, cell: Tuple) -> str:
    """A cell's name within its block, e.g. "semeniuta 0.25 per-step", or "none"."""
    return s.name(dict(zip(s.keys, cell)))


def _paper(s: Study) -> Dict[Tuple, float]:
    return {cell: v * s.factor for cell, v in s.paper().items()}


def _per_seed(rows, s: Study) -> Dict[Tuple, List[float]]:
    out: Dict[Tuple, List[float]] = {}
    for r in rows:
        cell = r.cell(s.keys)
        out.setdefault(cell, [])
        if r.record:
            out[cell].append(float(r.record.metrics[s.metric]) * s.factor)
    return out


def seed_table(experiment: str, rows) -> "pd.DataFrame":
    """One row per headline cell: the paper's value, ours as mean ± sd over seeds, and each seed's."""
    s = study(experiment)
    paper = _paper(s)
    out = []
    for cell, values in _per_seed(rows, s).items():
        n = len(values)
        mean = sum(values) / n if n else float("nan")
        sd = pd.Series(values).std() if n > 1 else float("nan")
        out.append({**dict(zip(s.keys, cell)), "paper": paper.get(cell),
                    "ours (mean ± sd)": fmt_mean_sd(mean, sd, n, s.digits),
                    "seeds": ", ".join(f"{v:.{s.digits}f}" for v in values) or "not yet run"})
    return pd.DataFrame(out)


def orderings(experiment: str, rows) -> "pd.DataFrame":
    """Every pair of headline cells in the same block that the paper orders (their test numbers
    differ), with the paper's order and whether ours keeps it, against the seed noise."""
    s = study(experiment)
    paper = _paper(s)
    values = _per_seed(rows, s)
    better = (lambda a, b: a < b) if s.lower_is_better else (lambda a, b: a > b)
    idx = s.keys.index(s.block)
    out = []
    for a, b in itertools.combinations(values, 2):
        if a[idx] != b[idx] or a not in paper or b not in paper or paper[a] == paper[b]:
            continue
        ahead, behind = (a, b) if better(paper[a], paper[b]) else (b, a)
        va, vb = values[ahead], values[behind]
        n = min(len(va), len(vb))
        if n < MIN_SEEDS_TO_JUDGE:  # as for every claim (verdicts.claim_verdict)
            verdict = Judgement(Verdict.NOT_JUDGED, f"fewer than {MIN_SEEDS_TO_JUDGE} seeds", n)
        elif all(better(x, y) for x in va for y in vb):
            verdict = Judgement(Verdict.REPRODUCED, SURVIVES, n)
        elif all(better(y, x) for x in va for y in vb):
            verdict = Judgement(Verdict.NOT_REPRODUCED, REVERSED, n)
        elif better(sum(va) / len(va), sum(vb) / len(vb)):
            verdict = Judgement(Verdict.WITHIN_NOISE, HELD_ON_MEANS, n)
        else:
            verdict = Judgement(Verdict.WITHIN_NOISE, REVERSED_ON_MEANS, n)
        out.append({s.block: a[idx], "the paper: ahead": _label(s, ahead), "behind": _label(s, behind),
                    "paper values": f"{paper[ahead]:.{s.digits}f} vs {paper[behind]:.{s.digits}f}",
                    "seeds (ahead, behind)": f"{len(va)}, {len(vb)}", "ours": verdict})
    return pd.DataFrame(out)


SURVIVES, REVERSED = "every seed in the paper's order", "every seed in the reverse order"
HELD_ON_MEANS, REVERSED_ON_MEANS = "holds on the means only", "reversed on the means only"


def orderings_verdict(table: "pd.DataFrame") -> Judgement:
    """One verdict for the landing page from ``orderings``: *reproduced* where every ordering judged
    survives the seed noise, *not reproduced* where some is reversed in every seed, else *within seed
    noise*; beside it, how many of each, and how many of the paper's orderings wait for their seeds."""
    if not len(table):
        return Judgement(Verdict.NOT_JUDGED, f"fewer than {MIN_SEEDS_TO_JUDGE} seeds of its cells")
    judged = [j for j in table["ours"] if j.verdict is not Verdict.NOT_JUDGED]
    waiting = len(table) - len(judged)
    if not judged:
        return Judgement(Verdict.NOT_JUDGED, f"fewer than {MIN_SEEDS_TO_JUDGE} seeds of its cells: 0 of the "
                                             f"paper's {len(table)} orderings judged")
    count = Counter(j.verdict for j in judged)
    survive, reversed_ = count[Verdict.REPRODUCED], count[Verdict.NOT_REPRODUCED]
    verdict = (Verdict.REPRODUCED if survive == len(judged) else
               Verdict.NOT_REPRODUCED if reversed_ else Verdict.WITHIN_NOISE)
    on_means = Counter(j.detail for j in judged if j.verdict is Verdict.WITHIN_NOISE)
    held = on_means[HELD_ON_MEANS]
    detail = (f"{survive} of {len(judged)} orderings survive in every seed, {reversed_} reversed in every seed, "
              f"{held} hold{'s' * (held == 1)} on the means only, {on_means[REVERSED_ON_MEANS]} reversed on the "
              f"means only")
    return Judgement(verdict, detail + (f"; {waiting} of the paper's {len(table)} orderings wait for "
                                        f"{MIN_SEEDS_TO_JUDGE} seeds" if waiting else ""),
                     min(j.seeds for j in judged))


def plot_seeds(experiment: str, rows):
    """Each seed's value per headline cell (dots), the mean (bar) and the paper's value (cross)."""
    import matplotlib.pyplot as plt

    s = study(experiment)
    paper = _paper(s)
    values = _per_seed(rows, s)
    blocks = list(dict.fromkeys(c[s.keys.index(s.block)] for c in values))
    fig, axes = plt.subplots(1, len(blocks), figsize=(5.5 * len(blocks), 3.6), squeeze=False)
    for ax, block in zip(axes[0], blocks):
        cells = [c for c in values if c[s.keys.index(s.block)] == block]
        for i, c in enumerate(cells):
            v = values[c]
            ax.plot([i] * len(v), v, "o", color="tab:blue", alpha=0.7, label="ours, one seed" if i == 0 else None)
            if v:
                ax.hlines(sum(v) / len(v), i - 0.3, i + 0.3, color="tab:blue")
            if c in paper:
                ax.plot(i, paper[c], "x", color="tab:red", ms=8, label="the paper" if i == 0 else None)
        ax.set_xticks(range(len(cells)))
        ax.set_xticklabels([_label(s, c) for c in cells], rotation=25, ha="right", fontsize=8)
        ax.set_title(str(block), fontsize=9)
        ax.set_ylabel(f"test {s.unit}")
    fig.tight_layout()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if labels:  # below the panels, outside the data
        fig.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels))
    return fig
