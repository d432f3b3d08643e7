"""The book's landing page: every table and figure of the paper, our number at the best stored
scale beside the paper's, the delta and a verdict, each linking to its chapter. Built from the
stored records and ``data/paper_results.csv`` by the same table functions the chapters use.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import pandas as pd

from .book import chapter_scale, chapter_seeds
from .chapters import (best_cell, claims_by_scale, conjecture_runs, figure_at_largest_scale, judged_claims,
                       largest_verdicts, paper_comparison, paper_so_far)
from .config import SCALE_NAMES
from .experiments import EXPERIMENTS, conjecture
from .experiments import seeds as seeds_study
from .report import (AGAINST_NOISE, TOO_FEW_SEEDS, VERDICTS, ablation_effects, ablation_finding, claim_verdicts,
                     held_cells, stamp, verdict_kind, verdict_rows, verdict_tally)
from .records import Row
from .store import RunStore
from .sweep import run_grid, stored_scales

QUICK_CAVEAT = "; at quick, a smoke test whose models under-fit: not a test of the claim (see Deviations)"
PAPER_COLUMN = "on the paper's numbers"  # a claims table's verdict on the paper's own table
NOT_ON_PAPER = "the paper's own numbers do not bear it out"


def _verdict(scale: Optional[str], verdicts: pd.Series) -> str:
    """A table's verdict from its cells' (``report``'s): said only at ``paper`` scale, and only when every
    cell has run there; until then it says how many have. Below ``paper`` scale a table whose cells ran
    is *not judged* (its numbers are beside it, its claims judged on the claims table below)."""
    ran = verdicts[verdicts != "not yet run"]
    if scale != "paper" and not ran.empty:
        return f"not judged at {scale} scale (paper scale not yet run in full)"
    if scale != "paper" or ran.empty:
        return "not yet run at paper scale"
    if len(ran) < len(verdicts):
        return f"not yet run in full at paper scale ({len(ran)} of {len(verdicts)} cells)"
    reproduced, noisy = _tally(ran)
    if reproduced == len(verdicts):
        return "reproduced"
    if reproduced + noisy == len(verdicts):  # no cell clearly out, but some only within the seed noise
        return "reproduced within seed noise"
    # A cell within seed noise is not within tolerance: a noisy cell must not make a table "partly" reproduced
    # (the cells' column counts them).
    return "partly" if reproduced else "not reproduced"


def _tally(verdicts: pd.Series) -> tuple:
    """(cells reproduced, cells only within seed noise) among a table's cell verdicts."""
    return int((verdicts == "reproduced").sum()), int((verdicts == "within seed noise").sum())


def _cells_within(verdicts: pd.Series) -> str:
    """How many of a table's cells are within its tolerance, and how many more only within the seed noise
    (outside the tolerance by less than two standard errors: not counted as within), of all its cells."""
    reproduced, noisy = _tally(verdicts)
    missing = int((verdicts == "not yet run").sum())
    below = verdicts[verdicts.str.startswith("not judged at")]
    if len(below):  # below the paper's scale no cell is judged: how many ran
        return (f"not judged at {below.iloc[0].split()[3]} scale ({len(verdicts) - missing} of the paper's "
                f"{len(verdicts)} cells run)")
    return (f"{reproduced} of {len(verdicts)}" + (f", {noisy} more within seed noise" if noisy else "")
            + (f" ({missing} not run)" if missing else ""))


def landing_claims(store: Optional[RunStore] = None) -> pd.DataFrame:
    """Every claim the paper makes on its tables, judged on our runs (``report.claim_verdict``: against
    the seed noise where 3 seeds ran) at the largest scale where it has a verdict, that scale named on
    its row. A claim without one anywhere (a cell it needs has not run) is *not yet run* at the largest
    scale with runs of its table, or at none. A verdict on too few seeds to judge against the seed noise
    also gives the verdict at the largest scale where it is judged against it, if any. A verdict at
    ``quick`` says that scale cannot test it; a claim that does not hold on the paper's own numbers (its
    chapter's claims table) says so."""
    store = store or RunStore()
    out = []
    for e in EXPERIMENTS.values():
        if e.comparison is None or e.claims is None:
            continue
        table = e.claims(run_grid(e.name, "quick", train=False, store=store))  # its claims, and the paper's verdicts
        on_paper = dict(zip(table.iloc[:, 0], table.get(PAPER_COLUMN, pd.Series("holds", index=table.index))))
        by_scale = claims_by_scale(e.name, store)
        judged = largest_verdicts(by_scale) or {
            claim: ("none stored", verdict) for claim, verdict in claim_verdicts(table).items()}
        against_noise = largest_verdicts(by_scale, AGAINST_NOISE)
        for claim, (scale, verdict) in judged.items():
            if verdict_kind(verdict) in TOO_FEW_SEEDS and claim in against_noise:
                below, judged_below = against_noise[claim]
                assert SCALE_NAMES.index(below) < SCALE_NAMES.index(scale), (claim, below, scale)
                verdict += (f"; at {below} scale, judged against seed noise: {judged_below}"
                            + (QUICK_CAVEAT if below == "quick" else ""))
            if scale == "quick" and verdict != "not yet run":
                verdict += QUICK_CAVEAT
            shown = claim if on_paper.get(claim, "holds") == "holds" else f"{claim} ({NOT_ON_PAPER})"
            out.append({"table": e.title.split(":")[0], "claim": shown, "scale": scale, "on ours": verdict,
                        "chapter": e.name})
    return pd.DataFrame(out + study_claims(store), columns=["table", "claim", "scale", "on ours", "chapter"])


BEYOND = "Beyond the paper"
STUDIED = (("word_lm", "Table 2"), ("char_lm", "Table 3"))  # the conjecture's tables


def study_claims(store: Optional[RunStore] = None) -> list:
    """The landing claims table's rows for the studies beyond the paper, judged as their chapters judge
    them at the scale each chapter shows (``book.chapter_scale``), labelled as beyond the paper:
    Sec. 3's predictions on memory loss (``memory_loss.claims``), the conjecture that Gal's scheme with
    ours beats both (``conjecture.conjecture_summary``, per table and forward block), and whether the
    paper's orderings of its best cells survive the seed noise (``seeds.orderings``, per table)."""
    store = store or RunStore()
    out = []

    def row(chapter: str, claim: str, scale: Optional[str], verdict: str) -> dict:
        verdict = verdict if scale else "not yet run"
        if scale == "quick" and verdict != "not yet run":
            verdict += QUICK_CAVEAT
        return {"table": f"{BEYOND}: {chapter.replace('_', ' ')}", "claim": claim, "scale": scale or "none stored",
                "on ours": verdict, "chapter": chapter}

    judged = judged_claims("memory_loss", store) or {  # none stored: each prediction, not yet run
        claim: (None, "") for claim in claim_verdicts(EXPERIMENTS["memory_loss"].claims(
            run_grid("memory_loss", "quick", train=False, store=store)))}
    for claim, (scale, verdict) in judged.items():
        out.append(row("memory_loss", claim, scale, verdict))
    scale = chapter_scale("conjecture", store)
    for experiment, table in STUDIED:
        if scale:
            runs = conjecture_runs(experiment, scale, chapter_seeds("conjecture", scale, store), store)
            verdicts = conjecture.conjecture_summary(experiment, *runs).set_index("forward")["verdict"]
        for forward in ("without forward dropout", "with forward dropout"):
            out.append(row("conjecture", f"{table}, {forward}: Gal's scheme with ours beats the best single scheme",
                           scale, str(verdicts[forward]) if scale else ""))
    scale = chapter_scale("seeds", store)
    for experiment, table in (("temporal_order", "Table 1"), *STUDIED):
        verdict = ""
        if scale:
            rows = run_grid(experiment, scale, [0, 1, 2], train=False, store=store, grid="headline")
            verdict = seeds_study.orderings_verdict(seeds_study.orderings(experiment, rows))
        out.append(row("seeds", f"{table}: the paper's orderings of its best cells survive the seed noise", scale,
                       verdict))
    return out


@dataclasses.dataclass(frozen=True)
class Shown:
    """One grid of a table (its own, or an ablation's) as the landing page shows it, compared with the
    paper's numbers once (``report.verdict_rows``): at the scale its chapter shows (``chapter_scale``;
    None where nothing is stored) and, where that is smaller, at `paper` scale so far (None where none ran);
    for a table's own grid, the landing row of each paper's figure drawn from its runs
    (``chapters.figure_at_largest_scale``), made once for the landing table and its stamps."""

    experiment: Any  # an ``experiments.Experiment``
    what: str  # the landing table's label
    grid: str
    scale: Optional[str]
    rows: List[Row]
    comparison: pd.DataFrame
    at_paper: Optional[pd.DataFrame]
    figures: List[dict] = dataclasses.field(default_factory=list)

    @property
    def paper_so_far(self) -> str:
        if self.scale == "paper":
            return "shown"
        return "none run" if self.at_paper is None else paper_so_far(self.experiment, self.grid, t=self.at_paper)


def shown_tables(store: Optional[RunStore] = None) -> List[Shown]:
    """Every table's grid and each of its ablations' (``Experiment.ablations``), as the landing page shows
    them: each compared with the paper's once, for its table, picture and stamps alike."""
    store = store or RunStore()
    out = []
    for e in EXPERIMENTS.values():
        if e.comparison is None:
            continue
        scale = chapter_scale(e.name, store)
        seeds = chapter_seeds(e.name, scale, store) if scale else [0]
        for grid, what in (("table", e.title), *((g, f"{e.title}; ablation: {change}") for g, change in e.ablations)):
            rows = run_grid(e.name, scale or "quick", seeds, train=False, store=store, grid=grid)
            at_paper = None if scale == "paper" else paper_comparison(e, grid, store)
            figures = [figure_at_largest_scale(e.name, figure, rows, scale, store)[2]
                       for figure in (e.figures if grid == "table" else ())]
            out.append(Shown(e, what, grid, scale, rows, held_cells(verdict_rows(e.comparison(rows)), rows),
                             None if at_paper is None else held_cells(at_paper, rows), figures))
    return out


def _table_row(shown: Shown) -> dict:
    """A landing-table row: the comparison ``shown`` at its scale, at the paper's best cell, and what has
    run at ``paper`` scale where that is not the scale shown."""
    e, t, scale = shown.experiment, shown.comparison, shown.scale
    m = e.metric
    best = best_cell(e, t)
    delta = t.loc[best, "delta"]
    # an ablation's runs differ from the paper's by its change (named in "what") too, not only by what the table lacks
    ablated = "beside its own change, " if shown.grid != "table" else ""
    return {"what": shown.what, "chapter": e.name, "scale": scale or "none stored",
            "the paper's best cell": t.loc[best, "setting"], "paper": f"{t.loc[best, 'paper']:.{m.digits}f} {m.unit}",
            "ours": t.loc[best, "ours"] + (" (n=1)" if t.loc[best, "n"] == 1 else ""),  # beside rows of n=3
            "delta": "—" if delta is None or pd.isna(delta) else  # to the metric's digits, as the chapter's table
            f"{delta:+g} {m.delta_unit}" if m.relative else f"{delta:+.{m.digits}f} {m.delta_unit}",
            "cells within tolerance": _cells_within(t["verdict"]),
            "verdict": _verdict(scale, t["verdict"]) + (
                f" ({ablated}without {e.paper_scale_lacks}: see Deviations)" if scale == "paper" and e.paper_scale_lacks
                else ""),
            "at paper scale so far": shown.paper_so_far}


def landing_table(store: Optional[RunStore] = None, shown: Optional[List[Shown]] = None) -> pd.DataFrame:
    """One row per table and figure of the paper: the scale its chapter shows (``book.chapter_scale``),
    the paper's best cell and ours at that cell, the delta, how many cells are within the chapter's
    tolerance, and the verdict (``_verdict``: reproduced, reproduced within seed noise, partly or not
    reproduced once every cell ran at `paper` scale; else how many have run there), and what has run at
    `paper` scale where the chapter shows a smaller one (``chapters.paper_so_far``); beside a table, a row
    for each of its ablations (``Experiment.ablations``) and for each paper's figure drawn from its runs
    (``Shown.figures``). ``shown``: ``shown_tables``, where made already."""
    shown = shown_tables(store) if shown is None else shown
    out = [{"what": "Figure 1: the three schemes", "chapter": "schemes", "scale": "—", "the paper's best cell": "—",
            "paper": "—", "ours": "drawn by code from the scheme definitions", "delta": "—",
            "cells within tolerance": "—", "verdict": "drawn (no numbers)", "at paper scale so far": "—"}]
    for name in dict.fromkeys(s.experiment.name for s in shown):
        table, *ablations = [s for s in shown if s.experiment.name == name]
        out.append(_table_row(table))
        for s in ablations:  # what the ablation found against the table's runs, beside its own verdict, once it has run
            row = _table_row(s)
            if len(s.comparison) < len(table.comparison):  # its best cell is the best of those it runs
                row["the paper's best cell"] += " (the best of the cells it runs)"
            if any(r.record or r.diverged for r in s.rows):
                e = s.experiment
                found = ablation_finding(ablation_effects(e.comparison, table.rows, s.rows, e.metric), short=True)
                row["verdict"] += f"; {found}"
            out.append(row)
        for row in table.figures:  # the paper's figures drawn from this experiment's runs
            verdict = row["verdict"] if row["scale"] == "paper" else _verdict(row["scale"], pd.Series([row["verdict"]]))
            out.append({"chapter": name, "paper": "—", "delta": "—", "cells within tolerance": "—", **row,
                        "verdict": verdict, "at paper scale so far": "—"})
    cols = ["what", "scale", "the paper's best cell", "paper", "ours", "delta", "cells within tolerance", "verdict",
            "at paper scale so far", "chapter"]
    return pd.DataFrame(out)[cols]


def landing_stamps(store: Optional[RunStore] = None, shown: Optional[List[Shown]] = None) -> pd.DataFrame:
    """Where the landing page's numbers came from: for each table, at each scale its row or its claims
    show (``landing_table``, ``landing_claims``, a smaller scale's verdict included), the chapter's stamp
    of those runs (``report.stamp``: scale, runs and seeds, hardware, torch, commit and dates); then each
    paper's figure drawn from its runs (the runs it draws), and each of its ablations' rows that has run.
    ``shown``: ``shown_tables``, where made."""
    store = store or RunStore()
    shown = shown_tables(store) if shown is None else shown
    out = []
    for e in EXPERIMENTS.values():
        if e.comparison is None:
            continue
        mine = [s for s in shown if s.experiment.name == e.name]
        by_scale = claims_by_scale(e.name, store)
        scales = ({s.scale for s in mine[:1]} | {scale for scale, _ in largest_verdicts(by_scale).values()}
                  | {scale for scale, _ in largest_verdicts(by_scale, AGAINST_NOISE).values()})
        if any(s.paper_so_far not in ("none run", "shown") for s in mine):
            scales.add("paper")  # the cells run there so far are beside the table
        for scale, rows in stored_scales(e.name, store=store):
            if scale in scales:
                out.append({"table": e.title.split(":")[0], "scale": scale,  # the table's cells, as its chapter counts them
                            "where the numbers came from": stamp(e.table_rows(rows)), "chapter": e.name})
        for row in mine[0].figures:  # a paper's figure drawn from its runs: those runs' own stamp, as its chapter's
            if any(r.record for r in row["runs"]):
                out.append({"table": row["what"].split(":")[0], "scale": row["scale"],
                            "where the numbers came from": stamp(row["runs"]), "chapter": e.name})
        for s in mine[1:]:  # its ablations' rows, once they have run, stamped as the chapter stamps them
            if any(r.record for r in s.rows):
                out.append({"table": f"{e.title.split(':')[0]}; ablation: {s.what.split('; ablation: ')[1]}",
                            "scale": s.scale, "where the numbers came from": stamp(s.rows), "chapter": e.name})
    return pd.DataFrame(out, columns=["table", "scale", "where the numbers came from", "chapter"])


def landing_html(table: pd.DataFrame, classes: str = "landing") -> str:
    """The landing table (or the claims table) as HTML, each row's first cell linking to its chapter's page;
    a claims table's verdicts ("on ours") with their symbol and colour (``report.VERDICTS``)."""
    t = table.copy()
    first = t.columns[0]
    t[first] = [f'<a href="{page}.html">{what}</a>' for what, page in zip(t[first], t["chapter"])]
    if "on ours" in t:
        symbols = {kind: symbol for kind, symbol, _ in VERDICTS}
        t["on ours"] = [f'<span class="verdict v-{verdict_kind(v).replace(" ", "-")}">'
                        f'{symbols[verdict_kind(v)]} {v}</span>' for v in t["on ours"]]
    return t.drop(columns="chapter").to_html(index=False, escape=False, classes=classes, border=0)


def verdict_key(claims: pd.DataFrame) -> str:
    """The claims table's tally by verdict and the key to its symbols, as Markdown."""
    kinds = {verdict_kind(v) for v in claims["on ours"]}
    key = "; ".join(f"{symbol} *{kind}*: {meaning}" for kind, symbol, meaning in VERDICTS if kind in kinds)
    return f"**{len(claims)} claims: {verdict_tally(claims['on ours'])}.** Key: {key}."


def _table_number(what: str) -> str:
    return what.split(":")[0].replace("Table ", "")


def _tables(names: list) -> str:
    """"Table 4", "Tables 4 and 5", "Tables 1, 2 and 3"."""
    if len(names) == 1:
        return f"Table {names[0]}"
    return f"Tables {', '.join(names[:-1])} and {names[-1]}"


def bottom_line(table: pd.DataFrame, claims: pd.DataFrame) -> str:
    """Where the replication stands, in a paragraph made from the landing table and the claims table
    (``landing_table``, ``landing_claims``): the scale each table is shown at, what has run at the paper's
    scale so far, ours against the paper's at the best cell of each table shown at that scale, and the
    claims counted by verdict. Never typed: every number is a record's."""
    tables = table[table["what"].str.startswith("Table") & ~table["what"].str.contains("ablation")]
    by_scale: dict = {}
    for _, r in tables.iterrows():
        by_scale.setdefault(r["scale"], []).append(_table_number(r["what"]))
    shown = "; ".join(f"{_tables(names)} at `{scale}` scale" for scale, names in by_scale.items())
    figures = [f"{r['what'].split(':')[0]} at `{r['scale']}` scale" for _, r in table.iterrows()
               if r["what"].startswith("Figure") and r["scale"] not in ("—", "none stored")]  # Figure 1 has no runs
    parts = [f"**Where the replication stands.** Shown: {shown} (each at the scale its chapter shows: the "
             "largest where every cell of the table has run, where there is one)"
             + (f"; {', '.join(figures)} (the largest where the runs it draws have run)." if figures else ".")]
    so_far = [f"Table {_table_number(r['what'])}, {r['at paper scale so far'].split(' (')[0].replace(' run', '')}"
              for _, r in tables.iterrows() if r["scale"] != "paper" and r["at paper scale so far"] != "none run"]
    if so_far:
        parts.append(f"At the paper's scale so far: {'; '.join(so_far)}.")
    at_paper = [f"Table {_table_number(r['what'])}, {r['ours']} against the paper's {r['paper']} ({r['delta']})"
                for _, r in tables.iterrows() if r["scale"] == "paper"]
    if at_paper:
        parts.append(f"At the paper's best cell of each table shown at `paper`, ours: {'; '.join(at_paper)}.")
    on_paper = claims[~claims["table"].str.startswith(BEYOND)]
    parts.append(f"Of the paper's {len(on_paper)} claims on its tables, on our runs: "
                 f"{verdict_tally(on_paper['on ours'])} (below, with the scale each is judged at).")
    return " ".join(parts)


def landing_figure(store: Optional[RunStore] = None, shown: Optional[List[Shown]] = None):
    """The landing page's picture: for each table, ours against the paper's cell by cell (test numbers,
    mean over seeds) at the scale its chapter shows, and as stars the cells run at `paper` scale so far,
    with the diagonal where ours equals the paper's. ``shown``: ``shown_tables``, where made already."""
    import matplotlib.pyplot as plt

    tables = [s for s in (shown_tables(store) if shown is None else shown) if s.grid == "table"]
    fig, axes = plt.subplots(1, len(tables), figsize=(2.9 * len(tables), 3.1), squeeze=False)
    axes = axes[0]
    for ax, s in zip(axes, tables):
        e, t = s.experiment, s.comparison
        points = [(t[t["n"] > 0], "o", f"at {s.scale or 'quick'}")]
        if s.at_paper is not None:
            points.append((s.at_paper[s.at_paper["n"] > 0], "*", "at paper"))
        values = []
        for t, marker, label in points:
            if len(t):
                ax.plot(t["paper"], t["mean"], marker, markersize=9 if marker == "*" else 4, alpha=0.8,
                        label=f"{label} ({len(t)})", linestyle="none")
                values += [*t["paper"], *t["mean"]]
        if values:
            lo, hi = min(values), max(values)
            ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", linewidth=1)
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "not yet run", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_title(e.title.split(":")[0], fontsize=9)
        ax.set_xlabel(f"the paper's ({e.metric.unit})", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("ours (mean over seeds)", fontsize=8)
    fig.tight_layout()
    return fig
