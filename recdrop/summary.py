"""The book's landing page: every table and figure of the paper, our number at the best stored
scale beside the paper's, the delta and a verdict, each linking to its chapter. Built from the
stored records and ``data/paper_results.csv`` by the same table functions the chapters use.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import pandas as pd

from .report import best_scale
from .store import RunStore
from .sweep import run_grid

TOLERANCE_F1_SENTIMENT = 1.0  # as Table 4's: a Table 5 cell is reproduced within 1 F1 point


def _table1(rows) -> pd.DataFrame:
    from .experiments import temporal_order as to

    t = to.table1(rows)
    t = t[(t["split"] == "test") & (t["verdict"] != "not in the paper")]
    return pd.DataFrame({
        "cell": t["length"] + " " + t["scheme"] + " " + t["sampling"],
        "paper": pd.to_numeric(t["paper (%)"].str.lstrip("<"), errors="coerce"),
        "ours": t["ours (%)"], "delta": t["delta"], "verdict": t["verdict"]})


def _lm(table_fn, unit) -> Callable[[list], pd.DataFrame]:
    def adapt(rows):
        t = table_fn(rows)
        t = t[t["split"] == "Test"]
        return pd.DataFrame({
            "cell": t["forward"].str.replace(" forward dropout", " fwd") + ", " + t["scheme"] + " " +
            t["rate"].astype(str) + " " + t["sampling"],
            "paper": t["paper"], "ours": t["ours"], "delta": t[unit.delta_column], "verdict": t["verdict"]})
    return adapt


def _table2(rows):
    from .experiments import word_lm
    return _lm(word_lm.table2, word_lm.UNIT)(rows)


def _table3(rows):
    from .experiments import char_lm
    return _lm(char_lm.table3, char_lm.UNIT)(rows)


def _table4(rows) -> pd.DataFrame:
    from .experiments import ner

    t = ner.table4(rows)
    return pd.DataFrame({"cell": t["stage"] + ", " + t["cell"] + " " + t["rate"].astype(str),
                         "paper": t["paper test F1"], "ours": t["ours test F1"], "delta": t["delta (F1)"],
                         "verdict": t["verdict"]})


def _table5(rows) -> pd.DataFrame:
    from .experiments import sentiment

    t = sentiment.table5(rows)
    verdict = ["not yet run" if pd.isna(d) else "reproduced" if abs(d) <= TOLERANCE_F1_SENTIMENT else "not reproduced"
               for d in t["delta (F1)"]]
    return pd.DataFrame({"cell": t["cell"] + " " + t["rate"].astype(str) + ", " + t["test set"],
                         "paper": t["paper"], "ours": t["ours"], "delta": t["delta (F1)"], "verdict": verdict})


# (what, experiment, chapter page, adapter, higher is better, unit, unit of the delta, the headline
# cell where the paper's best value is shared by several cells)
TABLES: List[Tuple[str, str, str, Callable, bool, str, str, Optional[str]]] = [
    ("Table 1: Temporal Order, test accuracy", "temporal_order", "temporal_order", _table1, True, "%", "points",
     "medium semeniuta per-step"),
    ("Table 2: word-level PTB, test perplexity", "word_lm", "word_lm", _table2, False, "ppl", "%", None),
    ("Table 3: character-level PTB, test bpc", "char_lm", "char_lm", _table3, False, "bpc", "bpc", None),
    ("Table 4: NER on CoNLL-2003, test F1", "ner", "ner", _table4, True, "F1", "F1", None),
    ("Table 5: Twitter sentiment, test F1", "sentiment", "sentiment", _table5, True, "F1", "F1", None),
]


def _verdict(scale: Optional[str], verdicts: pd.Series) -> str:
    ran = verdicts[verdicts != "not yet run"]
    if scale != "paper" or ran.empty:
        return "not yet run at paper scale"
    k = int((ran == "reproduced").sum())
    return "reproduced" if k == len(verdicts) else "partly" if k else "not reproduced"


def _figure2(rows, scale: Optional[str]) -> Dict[str, str]:
    """Figure 2's claim on the word-LM records (``rows`` at ``scale``): with 0.25 per-step dropout
    (ours), the final training perplexity is higher and the validation perplexity lower than without."""
    from .experiments.lm_tables import cell_values

    train, valid = cell_values(rows, "train_ppl"), cell_values(rows, "valid_ppl")
    wo = "without forward dropout"
    none, ours = (wo, "none", 0.0, "-"), (wo, "semeniuta", 0.25, "per-step")
    if not all(c in train for c in (none, ours)):
        found = "not yet run"
    else:
        holds = train[ours] > train[none] and valid[ours] < valid[none]
        found = (f"train {train[ours]:.1f} vs {train[none]:.1f}, valid {valid[ours]:.1f} vs {valid[none]:.1f}: "
                 + ("confirmed" if holds else "not confirmed"))
    verdict = ("not yet run at paper scale" if scale != "paper" or found == "not yet run" else
               "reproduced" if found.endswith(": confirmed") else "not reproduced")
    return {"scale": scale or "—", "ours": found, "verdict": verdict}


def landing_table(store: Optional[RunStore] = None) -> pd.DataFrame:
    """One row per table and figure of the paper: the scale shown (the best stored), the paper's best
    cell and ours at that cell, the delta, how many cells are within the chapter's tolerance, and
    the verdict (reproduced / partly / not reproduced at `paper` scale; else not yet run there)."""
    store = store or RunStore()
    out = [{"what": "Figure 1: the three schemes", "chapter": "schemes", "scale": "—", "the paper's best cell": "—",
            "paper": "—", "ours": "drawn by code from the scheme definitions", "delta": "—",
            "cells within tolerance": "—", "verdict": "drawn (no numbers)"}]
    for what, experiment, page, adapt, higher, unit, delta_unit, headline in TABLES:
        scale = best_scale(experiment, store)
        rows = run_grid(experiment, scale or "quick", train=False, store=store)
        t = adapt(rows).reset_index(drop=True)
        best = (t.index[t["cell"] == headline][0] if headline else
                t["paper"].idxmax() if higher else t["paper"].idxmin())
        ran = t[t["verdict"] != "not yet run"]
        delta = t.loc[best, "delta"]
        out.append({"what": what, "chapter": page, "scale": scale or "none stored",
                    "the paper's best cell": t.loc[best, "cell"], "paper": f"{t.loc[best, 'paper']:g} {unit}",
                    "ours": t.loc[best, "ours"],
                    "delta": "—" if delta is None or pd.isna(delta) else f"{delta:+g} {delta_unit}",
                    "cells within tolerance": f"{int((ran['verdict'] == 'reproduced').sum())} of {len(t)}"
                                              + ("" if len(ran) == len(t) else f" ({len(t) - len(ran)} not run)"),
                    "verdict": _verdict(scale, t["verdict"])})
        if experiment == "word_lm":
            fig2 = _figure2(rows, scale)
            out.append({"what": "Figure 2: learning curves, word-level PTB", "chapter": "word_lm",
                        "scale": fig2["scale"], "the paper's best cell": "with dropout: higher training, "
                        "lower validation perplexity", "paper": "—", "ours": fig2["ours"], "delta": "—",
                        "cells within tolerance": "—", "verdict": fig2["verdict"]})
    cols = ["what", "scale", "the paper's best cell", "paper", "ours", "delta", "cells within tolerance", "verdict",
            "chapter"]
    return pd.DataFrame(out)[cols]


def landing_html(table: pd.DataFrame) -> str:
    """The landing table as HTML, each row's first cell linking to its chapter's page."""
    t = table.copy()
    t["what"] = [f'<a href="{page}.html">{what}</a>' for what, page in zip(t["what"], t["chapter"])]
    return t.drop(columns="chapter").to_html(index=False, escape=False, classes="landing", border=0)
