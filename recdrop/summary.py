"""The book's landing page: a sentence per table and figure of the paper saying whether it reproduced,
from the strongest evidence stored (its cells at the paper's scale where any has run there); our number
at the paper's best cell beside the paper's, the cells by verdict, and the paper's claims, each linking
to its chapter. Built from the stored records and ``data/paper_results.csv`` by the same table
functions the chapters use.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import pandas as pd

from .book import chapter_scale, chapter_seeds
from .chapters import (best_cell, claims_by_scale, conjecture_runs, figure_at_largest_scale, judged_claims,
                       largest_verdicts, leading_verdicts, paper_comparison)
from .experiments import EXPERIMENTS, conjecture, memory_loss_chapter
from .experiments import seeds as seeds_study
from .ablations import ablation_effects, ablation_finding, held_cells
from .report import ran_cells, stamp, verdict_rows
from .records import Row
from .store import RunStore
from .sweep import run_grid, stored_scales
from .verdicts import Judgement, NOT_RUN, Verdict, claim_verdicts, verdict_html, verdict_of, verdict_tally

QUICK = "at quick, a smoke test whose models under-fit"  # no test of a claim (see Deviations)

PAPER_COLUMN = "on the paper's numbers"  # a claims table's verdict on the paper's own table
NOT_ON_PAPER = "the paper's own numbers do not bear it out"


def as_landed(scale: Optional[str], verdict: Judgement) -> Judgement:
    """A claim's verdict as the landing page gives it: one at ``quick`` is not judged (``QUICK``)."""
    return verdict.not_judged(QUICK) if scale == "quick" and verdict.ran else verdict


def landing_claims(store: Optional[RunStore] = None) -> pd.DataFrame:
    """Every claim the paper makes on its tables, judged on our runs (``verdicts.claim_verdict``: against
    the seed noise where 3 seeds ran) at the largest scale where it has a verdict, that scale named on
    its row (``chapters.leading_verdicts``: where that verdict rests on too few seeds and a smaller scale's
    is judged against the seed noise, the smaller scale's). A claim without one anywhere (a cell it needs
    has not run) is *not yet run* at the largest scale with runs of its table, or at none. A verdict at
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
        judged = leading_verdicts(by_scale) or {
            claim: ("none stored", verdict) for claim, verdict in claim_verdicts(table).items()}
        for claim, (scale, verdict) in judged.items():
            verdict = as_landed(scale, verdict)
            shown = claim if on_paper.get(claim, "holds") == "holds" else f"{claim} ({NOT_ON_PAPER})"
            out.append({"table": e.short_title, "claim": shown, "scale": scale, "on ours": verdict,
                        "chapter": e.name})
    return pd.DataFrame(out + study_claims(store), columns=["table", "claim", "scale", "on ours", "chapter"])


BEYOND = "Beyond the paper"
STUDIED = (("word_lm", "Table 2"), ("char_lm", "Table 3"))  # the conjecture's tables


def study_claims(store: Optional[RunStore] = None) -> list:
    """The landing claims table's rows for the studies beyond the paper, judged as their chapters judge
    them at the scale each chapter shows (``book.chapter_scale``), labelled as beyond the paper:
    Sec. 3's predictions on memory loss (``memory_loss_chapter.claims``), the conjecture that Gal's scheme with
    ours beats both (``conjecture.conjecture_summary``, per table and forward block), and whether the
    paper's orderings of its best cells survive the seed noise (``seeds.orderings``, per table)."""
    store = store or RunStore()
    out = []

    def row(chapter: str, claim: str, scale: Optional[str], verdict: Judgement) -> dict:
        verdict = as_landed(scale, verdict if scale else NOT_RUN)
        return {"table": f"{BEYOND}: {chapter.replace('_', ' ')}", "claim": claim, "scale": scale or "none stored",
                "on ours": verdict, "chapter": chapter}

    judged = judged_claims("memory_loss", store) or {  # none stored: each prediction, not yet run
        claim: (None, NOT_RUN) for claim in claim_verdicts(EXPERIMENTS["memory_loss"].claims(
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
                           scale, verdicts[forward] if scale else NOT_RUN))
    scale = chapter_scale("seeds", store)
    for experiment, table in (("temporal_order", "Table 1"), *STUDIED):
        verdict = NOT_RUN
        if scale:
            rows = run_grid(experiment, scale, chapter_seeds("seeds", scale, store), train=False, store=store,
                            grid="headline")  # the runs the chapter shows
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
    change: str  # what an ablation changes ("" for the table's own grid)
    grid: str
    scale: Optional[str]
    rows: List[Row]
    comparison: pd.DataFrame
    at_paper: Optional[pd.DataFrame]
    figures: List[dict] = dataclasses.field(default_factory=list)


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
        for grid, change in (("table", ""), *e.ablations):
            what = f"{e.title}; ablation: {change}" if change else e.title
            rows = run_grid(e.name, scale or "quick", seeds, train=False, store=store, grid=grid)
            at_paper = None if scale == "paper" else paper_comparison(e, grid, store)
            figures = [figure_at_largest_scale(e.name, figure, rows, scale, store)[2]
                       for figure in (e.figures if grid == "table" else ())]
            out.append(Shown(e, what, change, grid, scale, rows, held_cells(verdict_rows(e.comparison(rows)), rows),
                             None if at_paper is None else held_cells(at_paper, rows), figures))
    return out


def _strongest(shown: Shown) -> tuple:
    """(scale, comparison) of the strongest evidence stored for ``shown``: its cells at ``paper`` scale,
    partial or not, where any has run there; else the scale its chapter shows."""
    if shown.at_paper is not None and len(ran_cells(shown.at_paper)):
        return "paper", shown.at_paper
    return shown.scale, shown.comparison


def _table_row(shown: Shown) -> dict:
    """A landing-table row: the comparison ``shown`` at its strongest scale (``_strongest``), at the
    paper's best cell, and its cells by verdict (how many of the paper's have run, where not all)."""
    e = shown.experiment
    scale, t = _strongest(shown)
    m = e.metric
    best = best_cell(e, t)
    delta = t.loc[best, "delta"]
    ran_rows = ran_cells(t)
    ran = len(ran_rows)
    lacks = f"; without {e.paper_scale_lacks} (see Deviations)" if scale == "paper" and e.paper_scale_lacks else ""
    # at the paper's scale a cell not judged is one outside the tolerance on 1 seed (below it, every cell is)
    one_seed = sum(verdict_of(j) is Verdict.NOT_JUDGED and j.seeds == 1
                   for j, below in zip(ran_rows["verdict"], ran_rows["below"]) if not below)
    if one_seed:  # the tally says "not judged at this scale": say why
        lacks = (f" ({one_seed} outside {m.tolerance_words} of the paper's on 1 seed, too few to judge against seed "
                 f"noise)") + lacks
    return {"what": shown.what, "chapter": e.name,
            "scale": (scale or "none stored") + (f" ({ran} of {len(t)} cells)" if ran < len(t) and ran else ""),
            "the paper's best cell": t.loc[best, "setting"], "paper": f"{t.loc[best, 'paper']:.{m.digits}f} {m.unit}",
            "ours": t.loc[best, "ours"] + (" (n=1)" if t.loc[best, "n"] == 1 else ""),  # beside rows of n=3
            "delta": "—" if delta is None or pd.isna(delta) else  # to the metric's digits, as the chapter's table
            f"{delta:+g} {m.delta_unit}" if m.relative else f"{delta:+.{m.digits}f} {m.delta_unit}",
            "cells": verdict_tally(ran_rows["verdict"]) + lacks if ran else "not yet run"}


def landing_table(store: Optional[RunStore] = None, shown: Optional[List[Shown]] = None) -> pd.DataFrame:
    """One row per table and figure of the paper, at its strongest evidence (``_strongest``: its cells at
    `paper` scale where any has run, else the scale its chapter shows): the paper's best cell and ours at
    that cell, the delta, and the cells by verdict; beside a table, a row for each of its ablations
    (``Experiment.ablations``, with what it found against the table's runs) and for each paper's figure
    drawn from its runs (``Shown.figures``). ``shown``: ``shown_tables``, where made already."""
    shown = shown_tables(store) if shown is None else shown
    out = [{"what": "Figure 1: the three schemes", "chapter": "schemes", "scale": "—", "the paper's best cell": "—",
            "paper": "—", "ours": "drawn by code from the scheme definitions", "delta": "—", "cells": "—"}]
    for name in dict.fromkeys(s.experiment.name for s in shown):
        table, *ablations = [s for s in shown if s.experiment.name == name]
        out.append(_table_row(table))
        for s in ablations:  # what the ablation found against the table's runs, once it has run
            row = _table_row(s)
            if len(s.comparison) < len(table.comparison):  # its best cell is the best of those it runs
                row["the paper's best cell"] += " (the best of the cells it runs)"
            if any(r.record or r.diverged for r in s.rows):
                e = s.experiment
                found = ablation_finding(ablation_effects(e.comparison, table.rows, s.rows, e.metric), short=True)
                row["cells"] += f"; {found}"
            out.append(row)
        for row in table.figures:  # the paper's figures drawn from this experiment's runs
            out.append({"chapter": name, "paper": "—", "delta": "—", **row, "cells": verdict_html(row["judged"])})
    cols = ["what", "scale", "the paper's best cell", "paper", "ours", "delta", "cells", "chapter"]
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
                  | {scale for scale, _ in largest_verdicts(by_scale, against_noise=True).values()})
        if any(s.scale != "paper" and _strongest(s)[0] == "paper" for s in mine):
            scales.add("paper")  # the cells run there so far are beside the table
        for scale, rows in stored_scales(e.name, store=store):
            if scale in scales:
                # the table's cells, as its chapter counts them
                out.append({"table": e.short_title, "scale": scale,
                            "where the numbers came from": stamp(e.table_rows(rows)), "chapter": e.name})
        for row in mine[0].figures:  # a paper's figure drawn from its runs: those runs' own stamp, as its chapter's
            drawn = [(row["scale"], row["runs"])]
            if "larger" in row:  # what it found at a larger scale, on fewer seeds, is on its row too
                drawn.append((row["larger"]["scale"], row["larger"]["runs"]))
            for scale, runs in drawn:
                if any(r.record for r in runs):
                    out.append({"table": row["figure"], "scale": scale,
                                "where the numbers came from": stamp(runs), "chapter": e.name})
        for s in mine[1:]:  # its ablations' rows, once they have run, stamped as the chapter stamps them
            if any(r.record for r in s.rows):
                out.append({"table": f"{e.short_title}; ablation: {s.change}",
                            "scale": s.scale, "where the numbers came from": stamp(s.rows), "chapter": e.name})
    return pd.DataFrame(out, columns=["table", "scale", "where the numbers came from", "chapter"])


def sentences_html(sentences: List[str]) -> str:
    """Sentences as an HTML list."""
    return "<ul>" + "".join(f"<li>{x}</li>" for x in sentences) + "</ul>"


def landing_html(table: pd.DataFrame, classes: str = "landing") -> str:
    """The landing table (or the claims table) as HTML, each row's first cell linking to its chapter's page;
    a claims table's verdicts ("on ours") with their symbol and colour (``verdicts.verdict_html``)."""
    t = table.copy()
    first = t.columns[0]
    t[first] = [f'<a href="{page}.html">{what}</a>' for what, page in zip(t[first], t["chapter"])]
    if "on ours" in t:
        t["on ours"] = [verdict_html(v) for v in t["on ours"]]
    return t.drop(columns="chapter").to_html(index=False, escape=False, classes=classes, border=0)


def _seeds(judged) -> str:
    """"1 seed", "3 seeds", "1–3 seeds": the seed counts ``judged`` (a comparison's ``n``, or its
    ``Judgement``s' ``seeds``) rest on."""
    n = [int(x) for x in judged if x]
    if not n:
        return "no seed"
    lo, hi = min(n), max(n)
    return f"{lo} seed{'s' * (lo > 1)}" if lo == hi else f"{lo}–{hi} seeds"


def _claims_sentence(judged: pd.DataFrame) -> str:
    """The claims of one table on our runs, by verdict, at the scale each is judged: "its 4 claims, at
    `reduced` on 3 seeds: 3 ✔ reproduced, 1 ≈ within seed noise"."""
    if judged.empty:
        return ""
    parts = []
    for scale, g in judged.groupby("scale", sort=False):
        ran = [j for j in g["on ours"] if j.ran]
        if ran:
            parts.append(f"at <code>{scale}</code> on {_seeds(j.seeds for j in ran)}: "
                         f"{verdict_tally(g['on ours'], coloured=True)}")
    n = len(judged)
    if not parts:
        return f"its {n} claim{'s are' if n > 1 else ' is'} not yet run"
    return f"its {n} claim{'s' * (n > 1)}, " + "; ".join(parts)


def table_sentences(shown: List[Shown], claims: pd.DataFrame) -> List[str]:
    """One sentence (HTML) per table and figure of the paper, from the strongest evidence stored: its cells at
    `paper` scale where any has run (how many, within the tolerance, on how many seeds), else the
    scale its chapter shows; then its claims by verdict at the scale each is judged (``landing_claims``).
    Every number is a record's."""
    out = ["<b>Figure 1</b> (the three schemes): drawn by code from the scheme definitions."]
    for s in shown:
        if s.grid != "table":
            continue
        e = s.experiment
        scale, t = _strongest(s)
        ran = ran_cells(t)
        if scale == "paper":
            within = sum(verdict_of(j) is Verdict.REPRODUCED for j in ran["verdict"])
            cells = (f"at the paper's scale, {within} of the {len(ran)} cells run are within "
                     f"{e.metric.tolerance_words} of the paper's ({_seeds(ran['n'])})"
                     + (f"; {len(t) - len(ran)} of its {len(t)} cells not yet run there" if len(ran) < len(t) else ""))
        elif len(ran):
            cells = (f"not yet run at the paper's scale; at <code>{scale}</code>, {len(ran)} of {len(t)} cells on "
                     f"{_seeds(ran['n'])}: smaller models than the paper's, whose numbers are not comparable with "
                     f"its (only the claims on their order are judged)")
        else:
            cells = "not yet run"
        mine = claims[(claims["chapter"] == e.name) & ~claims["table"].str.startswith(BEYOND)]
        said = _claims_sentence(mine)
        out.append(f"<b>{e.short_title}</b> ({e.subject}): {cells}" + (f"; {said}" if said else "") + ".")
        for row in s.figures:
            out.append(f"<b>{row['figure']}</b> ({row['subject']}): at "
                       f"<code>{row['scale']}</code>, {verdict_html(row['judged'])}.")
    return out


def beyond_sentences(claims: pd.DataFrame) -> List[str]:
    """One sentence (HTML) per question beyond the paper (``study_claims``' rows), with its verdict."""
    rows = claims[claims["table"].str.startswith(BEYOND)]
    return [f"{r['claim']} (<code>{r['scale']}</code>): {verdict_html(r['on ours'])}." for _, r in rows.iterrows()]


LONGER = ("semeniuta per-step, paper scaling", "moon per-step, paper scaling", "gal per-step, paper scaling")


def longer_sequences_sentence(store: Optional[RunStore] = None) -> Optional[str]:
    """The memory-loss chapter's finding beyond the paper, in a sentence (HTML): on Temporal Order
    sequences four times as long as those trained on, the accuracy of ours, Moon's and Gal's per-step
    schemes (the paper's scaling), mean over the seeds, at the scale its chapter shows. None where
    those have not run."""
    scale = chapter_scale("memory_loss", store)
    if not scale:
        return None
    rows = run_grid("memory_loss", scale, chapter_seeds("memory_loss", scale, store), train=False, store=store)
    table = memory_loss_chapter.accuracy_by_length(rows)
    trained = rows[0].config.length
    longer = [n for n in table.columns if isinstance(n, int) and n >= 4 * trained]
    if not longer or not set(LONGER) <= set(table.index):
        return None
    n = longer[0]

    def named(setting: str) -> str:  # "moon per-step, paper scaling" -> "Moon's per-step"
        scheme, sampling = setting.split(",")[0].split()
        return f"{ {'semeniuta': 'ours', 'moon': 'Moon', 'gal': 'Gal'}[scheme]} {sampling}"
    said = ", ".join(f"{named(name)} {table.loc[name, n]:.1f}%" for name in LONGER)
    best = max(LONGER, key=lambda name: table.loc[name, n])
    tail = "" if best == LONGER[0] else f"; on the means, {named(best)} is more accurate than ours"
    seeds = int(table.loc[list(LONGER), "seeds"].min())
    return (f"On Temporal Order sequences of {n} steps, {n // trained} times as long as those trained on, the "
            f"accuracy of each per-step scheme: {said} (at <code>{scale}</code>, "
            f"{'1 seed' if seeds == 1 else f'mean of {seeds} seeds'}){tail}.")


def verdict_key() -> str:
    """The key to the four verdicts (HTML), each in its symbol and colour."""
    return "<b>Key:</b> " + "; ".join(f'<span style="color: {v.colour}">{v.symbol} <i>{v.value}</i></span>: {v.meaning}'
                                      for v in Verdict) + ". The number of seeds is said beside each verdict."


def landing_figure(store: Optional[RunStore] = None, shown: Optional[List[Shown]] = None):
    """The landing page's picture: for each table, ours against the paper's cell by cell (test numbers,
    mean over seeds) at its strongest evidence (``_strongest``: the cells run at `paper` scale where any
    has, else the scale its chapter shows), with the diagonal where ours equals the paper's.
    ``shown``: ``shown_tables``, where made already."""
    import matplotlib.pyplot as plt

    tables = [s for s in (shown_tables(store) if shown is None else shown) if s.grid == "table"]
    fig, axes = plt.subplots(1, len(tables), figsize=(2.9 * len(tables), 3.3), squeeze=False)
    for ax, s in zip(axes[0], tables):
        e = s.experiment
        scale, t = _strongest(s)
        t = t[t["n"] > 0]
        if len(t):
            ax.plot(t["paper"], t["mean"], "*" if scale == "paper" else "o", markersize=8 if scale == "paper" else 4,
                    alpha=0.8, color="tab:orange" if scale == "paper" else "tab:blue", linestyle="none")
            lo, hi = min(t["paper"].min(), t["mean"].min()), max(t["paper"].max(), t["mean"].max())
            ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{e.short_title}: {len(t)} cells at {scale or 'quick'}", fontsize=9)
        ax.set_xlabel(f"the paper's test {e.metric.unit}", fontsize=8)
        ax.set_ylabel("ours (mean over seeds)", fontsize=8)
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig
