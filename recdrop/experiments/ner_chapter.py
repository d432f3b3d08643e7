"""Table 4 and the claims of Section 4.4, from the stored runs of the NER tagger (``ner``: its config,
data and task)."""
from __future__ import annotations

import math
from typing import Dict, Tuple

import pandas as pd

from ..data.conll2003 import load_conll2003
from ..paper import paper_results
from ..report import Metric, compare, plain_label, seed_values
from ..verdicts import Claim, check_claims
from .cell_grid import CELLS, RATES

# -- Table 4 and the claims of Sec. 4.4 --------------------------------------------------------------
STAGES = {"short": "5 word long sequences", "long": "15 word long sequences"}  # the paper's row groups
TOLERANCE_F1 = 1.0  # a cell within this many F1 points of the paper's is reproduced


def chance_loss() -> float:
    """The cross-entropy of a uniform guess over the training set's tags, ln of their number: where
    training starts (``cell_grid.stability``)."""
    return math.log(len({t for s in load_conll2003()["train"] for t in s.tags}))


METRIC = Metric("F1", digits=2, tolerance=TOLERANCE_F1)


def paper_f1() -> Dict[Tuple[str, float, str], float]:
    """The paper's Table 4: (stage, rate, cell) -> test F1."""
    paper = paper_results(4).set_index(["group", "row", "column"])
    return {(stage, rate, cell): float(paper.loc[(group, "0.25" if rate else "0.0", cell), "value"])
            for stage, group in STAGES.items() for rate in RATES for cell in CELLS}


def table4(rows) -> "pd.DataFrame":
    """Table 4 through ``report.compare``: one row per stage, rate and cell, the test F1 of the stage's
    last epoch against the paper's; beside, our validation F1 (eng.testa, not in the paper) and the
    test F1 of the stage's epoch with the best validation F1."""
    paper = paper_f1()
    stage_of = {group: stage for stage, group in STAGES.items()}
    cells = [({"stage": group, "rate": rate, "cell": cell}, paper[(stage, rate, cell)], f"test_f1_{stage}")
             for stage, group in STAGES.items() for cell in CELLS for rate in RATES]
    t = compare(rows, cells, ["cell", "rate"], METRIC,
                extras=[("ours valid F1", lambda labels: f"valid_f1_{stage_of[labels['stage']]}"),
                        ("ours, the stage's best-valid epoch",
                         lambda labels: f"best_test_f1_{stage_of[labels['stage']]}")])
    t["setting"] = t["stage"] + ", " + t["cell"] + " " + t["rate"].astype(str)
    return t


def table4_wide(rows):
    """The paper's layout: stage and rate down, cell across, paper | ours (the mean over seeds)."""
    long = table4(rows)
    wide = long.pivot_table(index=["stage", "rate"], columns="cell", values=["paper", "mean"], sort=False,
                            dropna=False)
    wide.columns = [f"{c} {'paper' if v == 'paper' else 'ours'}" for v, c in wide.columns]
    shown = wide[[f"{c} {w}" for c in CELLS for w in ("paper", "ours")]]
    return shown.style.format("{:.2f}", na_rep="not run").format_index(plain_label)


def claims(rows) -> "pd.DataFrame":
    """The observations of Sec. 4.4 on the paper's Table 4 and on ours (test F1)."""
    ours = seed_values(rows, lambda r, m: {(st, r["rate"], r["cell"]): m.get(f"test_f1_{st}") for st in STAGES})

    def gain(f, st, cell):
        return f[(st, 0.25, cell)] - f[(st, 0.0, cell)]

    def cells(*stages):
        """Both rates of every cell after each of ``stages``: what a gain reads."""
        return [(st, rate, c) for st in stages for rate in (0.0, 0.25) for c in CELLS]

    checks = [Claim("recurrent dropout 0.25 helps every cell, after either stage", cells(*STAGES),
                    lambda f: all(gain(f, st, c) > 0 for st in STAGES for c in CELLS)),
              Claim("the gain is larger after the 5-word stage than after the 15-word stage, for every cell",
                    cells(*STAGES), lambda f: all(gain(f, "short", c) > gain(f, "long", c) for c in CELLS))]
    # "The gain from using recurrent dropout is larger for the LSTM network": the paper does not say
    # after which stage, and its own numbers bear it out after one only, so each stage is a claim.
    for st, words in zip(STAGES, ("5", "15")):
        checks.append(Claim(f"the gain is larger for the LSTM than for the RNN and the GRU, after the {words}-word "
                            "stage", cells(st),
                            lambda f, st=st: all(gain(f, st, "LSTM") > gain(f, st, c) for c in CELLS if c != "LSTM")))
    return check_claims(checks, paper_f1(), ours, "4.4")
