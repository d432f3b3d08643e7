"""The paper's own numbers (Tables 1-5), from ``data/paper_results.csv``.

Columns: ``table``, ``group`` (the table's block, e.g. "with forward dropout"), ``row`` (as the
paper labels it, e.g. "0.25 per-step"), ``column`` (e.g. "Ours Test"), ``value`` (as printed),
``qualifier`` ("<" where the paper prints "< 25%"), ``bold`` (1 where the paper bolds the value)
and ``source`` (the citation). Every number is checked against the paper's LaTeX by a test.
"""
from __future__ import annotations


import pandas as pd

from .paths import DATA_DIR

PAPER_RESULTS = DATA_DIR / "paper_results.csv"



def paper_results(table: int | None = None) -> pd.DataFrame:
    """The paper's numbers, all tables or one (1-5)."""
    df = pd.read_csv(PAPER_RESULTS, dtype={"value": str, "qualifier": str, "row": str}, keep_default_na=False)
    if table is None:
        return df
    if table not in set(df["table"]):
        raise ValueError(f"table={table!r} is not valid; allowed values: {sorted(set(df['table']))}")
    return df[df["table"] == table].reset_index(drop=True)
