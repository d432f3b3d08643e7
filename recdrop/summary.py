"""The book's landing page: every table and figure of the paper, our number at the best stored
scale beside the paper's, the delta and a verdict, each linking to its chapter. Built from the
stored records and ``data/paper_results.csv`` by the same table functions the chapters use.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from .experiments import EXPERIMENTS
from .report import best_scale
from .store import RunStore
from .sweep import run_grid

def _verdict(scale: Optional[str], verdicts: pd.Series) -> str:
    ran = verdicts[verdicts != "not yet run"]
    if scale != "paper" or ran.empty:
        return "not yet run at paper scale"
    k = int((ran == "reproduced").sum())
    return "reproduced" if k == len(verdicts) else "partly" if k else "not reproduced"


def _landing_rows(t: pd.DataFrame) -> pd.DataFrame:
    """The rows of a comparison that the landing page weighs: the paper's test numbers."""
    t = t[t["verdict"] != "not in the paper"]
    if "split" in t:
        t = t[t["split"].str.lower() == "test"]
    return t.reset_index(drop=True)


def landing_table(store: Optional[RunStore] = None) -> pd.DataFrame:
    """One row per table and figure of the paper: the scale shown (the best stored), the paper's best
    cell and ours at that cell, the delta, how many cells are within the chapter's tolerance, and
    the verdict (reproduced / partly / not reproduced at `paper` scale; else not yet run there)."""
    store = store or RunStore()
    out = [{"what": "Figure 1: the three schemes", "chapter": "schemes", "scale": "—", "the paper's best cell": "—",
            "paper": "—", "ours": "drawn by code from the scheme definitions", "delta": "—",
            "cells within tolerance": "—", "verdict": "drawn (no numbers)"}]
    for e in EXPERIMENTS.values():
        if e.comparison is None:
            continue
        scale = best_scale(e.name, store)
        rows = run_grid(e.name, scale or "quick", train=False, store=store)
        t = _landing_rows(e.comparison(rows))
        m = e.metric
        best = (t.index[t["setting"] == e.headline][0] if e.headline else
                t["paper"].idxmax() if m.higher_is_better else t["paper"].idxmin())
        ran = t[t["verdict"] != "not yet run"]
        delta = t.loc[best, "delta"]
        out.append({"what": e.title, "chapter": e.name, "scale": scale or "none stored",
                    "the paper's best cell": t.loc[best, "setting"], "paper": f"{t.loc[best, 'paper']:g} {m.unit}",
                    "ours": t.loc[best, "ours"],
                    "delta": "—" if delta is None or pd.isna(delta) else f"{delta:+g} {m.delta_unit}",
                    "cells within tolerance": f"{int((ran['verdict'] == 'reproduced').sum())} of {len(t)}"
                                              + ("" if len(ran) == len(t) else f" ({len(t) - len(ran)} not run)"),
                    "verdict": _verdict(scale, t["verdict"])})
        for figure in e.figures:  # the paper's figures drawn from this experiment's runs
            row = figure(rows, scale)
            out.append({"chapter": e.name, "paper": "—", "delta": "—", "cells within tolerance": "—", **row,
                        "verdict": _verdict(scale, pd.Series([row["verdict"]]))})
    cols = ["what", "scale", "the paper's best cell", "paper", "ours", "delta", "cells within tolerance", "verdict",
            "chapter"]
    return pd.DataFrame(out)[cols]


def landing_html(table: pd.DataFrame) -> str:
    """The landing table as HTML, each row's first cell linking to its chapter's page."""
    t = table.copy()
    t["what"] = [f'<a href="{page}.html">{what}</a>' for what, page in zip(t["what"], t["chapter"])]
    return t.drop(columns="chapter").to_html(index=False, escape=False, classes="landing", border=0)
