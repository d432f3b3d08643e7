"""Shared pieces of every chapter: which scale to show, the stamp, seed summaries, verdicts."""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

import numpy as np
import pandas as pd

from .config import SCALE_NAMES
from .store import RunStore


def best_scale(experiment: str, store: Optional[RunStore] = None) -> Optional[str]:
    """The largest scale with at least one stored record (``paper`` > ``quick`` > ``ci``), or None."""
    store = store or RunStore()
    for scale in reversed(SCALE_NAMES):
        if store.records(experiment, scale):
            return scale
    return None


def stamp(rows: Iterable[Dict[str, Any]]) -> str:
    """Scale, hardware, commit and dates of the records shown (one line each where they differ)."""
    recs = [r["record"] for r in rows if r.get("record")]
    if not recs:
        return "No stored runs: every cell of this table is not yet run at this scale."
    def values(key):
        return ", ".join(sorted({str(r[key]) for r in recs}))
    scales = ", ".join(sorted({r["config"]["scale"] for r in recs}))
    dates = sorted(r["finished"][:10] for r in recs)
    missing = sum(1 for r in rows if not r.get("record"))
    return (f"Scale: {scales} | runs: {len(recs)} shown, {missing} not yet run | hardware: {values('hardware')} | "
            f"torch {values('torch')} | commit: {values('commit')} | runs finished {dates[0]} to {dates[-1]}")


def summarize(rows: List[Dict[str, Any]], keys: List[str], metrics: List[str]) -> pd.DataFrame:
    """Mean, standard deviation and count over seeds of each metric, per cell (``keys``).

    Cells without a record keep a row with n = 0 and NaN values (shown as "not yet run")."""
    flat = []
    for r in rows:
        m = r["record"]["metrics"] if r.get("record") else {}
        flat.append({**{k: r[k] for k in keys}, **{name: m.get(name, np.nan) for name in metrics},
                     "_ran": bool(r.get("record"))})
    df = pd.DataFrame(flat)
    g = df.groupby(keys, sort=False)
    out = g[metrics].agg(["mean", "std"])
    out.columns = [f"{m}_{s}" for m, s in out.columns]
    out["n"] = g["_ran"].sum()
    return out.reset_index()


def fmt_mean_sd(mean: float, sd: float, n: int, digits: int = 1, scale: float = 1.0) -> str:
    """"m ± s (n)" for n > 1, "m" for n = 1, "not yet run" for n = 0."""
    if not n or pd.isna(mean):
        return "not yet run"
    if n == 1 or pd.isna(sd):
        return f"{mean * scale:.{digits}f}"
    return f"{mean * scale:.{digits}f} ± {sd * scale:.{digits}f} (n={n})"


def curves_frame(rows: List[Dict[str, Any]], keys: List[str]) -> pd.DataFrame:
    """The per-epoch curves of every stored run, long format, with the cell labels."""
    frames = []
    for r in rows:
        if r.get("record"):
            c = pd.DataFrame(r["record"]["curves"])
            for k in keys + ["seed"]:
                c[k] = r[k]
            frames.append(c)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=keys + ["seed", "epoch"])


def check_claims(checks, paper_vals: Dict[Any, float], ours: Dict[Any, float], section: str) -> pd.DataFrame:
    """Each (claim, test) evaluated on the paper's numbers and on ours ("not yet run" where a cell
    it needs has no record)."""
    out = []
    for claim, test in checks:
        on_paper = "holds" if test(paper_vals) else "does not hold"
        try:
            on_ours = "confirmed" if test(ours) else "not confirmed"
        except KeyError:
            on_ours = "not yet run"
        out.append((claim, on_paper, on_ours))
    return pd.DataFrame(out, columns=[f"observation (paper Sec. {section})", "on the paper's numbers", "on ours"])
