"""What a chapter shows beyond its experiment's own tables (the layer above the runner, below the book):
the claims judged at each scale, what has run at the paper's scale so far, the ablations, the runs of
other scales, and the schemes chapter's pairs of Moon's and our per-sequence runs. The notebooks and the
landing page (``summary``) call these; the experiments know nothing of them.
"""
from __future__ import annotations

import ast
import re
from typing import Dict, List, Optional, Tuple

import pandas as pd
from IPython.display import HTML, Markdown, display

from . import progress
from .config import SCALE_NAMES
from .experiments import EXPERIMENTS, char_lm_chapter, temporal_order_chapter
from .ablations import ablation_effects, ablation_finding, side_by_side
from .report import (commits_of, figure_html, folded, is_twin, plot_against_paper, provenance, ran_cells, stored_seeds,
                     styled, trained_on, verdict_rows, weighed, where_made)
from .store import RunStore
from .sweep import run_grid, stored_rows, stored_scales
from .verdicts import Judgement, claim_verdicts


OURS, PAPERMILLS = re.compile(r"# Parameters:"), re.compile(r"# Parameters\s*\n")  # the cells' first lines


def _assigned(source: str) -> List[str]:
    return [t.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def check_parameters(history: Optional[List[str]] = None) -> None:
    """In a notebook, the cell after its parameters cell: a ValueError naming each parameter papermill
    injected that the notebook does not take (papermill only warns, and the notebook would run its
    defaults); where papermill injected any, the notebook runs headless, so its progress bars become
    text (``progress.use_text``) that ``papermill --log-output`` shows. ``history``: the sources of the
    cells run so far (IPython's ``In``)."""
    if history is None:
        from IPython import get_ipython
        shell = get_ipython()
        history = list(shell.user_ns.get("In", [])) if shell is not None else []
    takes = {n for src in history if OURS.match(src) for n in _assigned(src)}
    given = [n for src in history if PAPERMILLS.match(src) for n in _assigned(src)]
    unknown = [n for n in given if n not in takes]
    if unknown:
        raise ValueError(f"this notebook takes no parameter {', '.join(map(repr, unknown))}; it takes "
                         f"{', '.join(sorted(takes))}" + (" (seeds as a list: papermill -y 'seeds: [0, 1, 2]')"
                                                          if "seeds" in takes else ""))
    if given:
        progress.use_text()


def best_cell(e, t: pd.DataFrame):
    """The index of the paper's best cell (or the experiment's headline) in comparison ``t``."""
    if e.headline:
        return t.index[t["setting"] == e.headline][0]
    return t["paper"].idxmax() if e.metric.higher_is_better else t["paper"].idxmin()


def paper_comparison(e, grid: str = "table", store: Optional[RunStore] = None) -> Optional[pd.DataFrame]:
    """Experiment ``e``'s ``grid`` at ``paper`` scale beside the paper's numbers (``report.verdict_rows``);
    None where nothing of it is stored there."""
    rows = stored_rows(e.name, "paper", grid, store)
    return verdict_rows(e.comparison(rows)) if rows else None


def claims_by_scale(name: str, store: Optional[RunStore] = None,
                    up_to: Optional[str] = None) -> List[Tuple[str, Dict[str, str]]]:
    """Each scale with runs of experiment ``name`` (``up_to`` at most), largest first, with each claim's
    verdict on its runs there (``verdicts.claim_verdicts``)."""
    return [(scale, claim_verdicts(EXPERIMENTS[name].claims(rows)))
            for scale, rows in stored_scales(name, store=store, up_to=up_to)
            if any(r.record for r in rows)]  # else nothing of this table here (a scale since redefined)


def largest_verdicts(by_scale: List[Tuple[str, Dict[str, Judgement]]], against_noise: bool = False) -> Dict[str, tuple]:
    """Each claim -> (scale, its verdict) at the largest scale of ``by_scale`` (``claims_by_scale``) where it
    has run; a claim run nowhere is *not yet run* at the largest scale. With ``against_noise``, only a
    verdict judged against the seed noise counts (``Judgement.against_noise``), and a claim without one
    is left out."""
    judged: Dict[str, tuple] = {}
    for scale, verdicts in by_scale:
        for claim, verdict in verdicts.items():
            if against_noise and not verdict.against_noise:
                continue
            if claim not in judged or (not judged[claim][1].ran and verdict.ran):
                judged[claim] = (scale, verdict)
    return judged


def leading(judged: List[Tuple[str, Judgement]]) -> Tuple[int, Optional[int]]:
    """Of one claim's (or figure's) verdicts by scale, largest first: the index of the one that leads, and of the
    larger one noted beside it (or None). The largest scale where it has run leads, unless its verdict rests
    on too few seeds to judge against the seed noise and a smaller scale than that, above ``quick`` (which
    under-fits), judged it against the noise: then the largest such smaller scale leads, with the larger
    noted. Where it has run nowhere, the largest scale leads (its verdict: not yet run)."""
    ran = [i for i, (_, verdict) in enumerate(judged) if verdict.ran]
    if not ran:
        return 0, None
    top = ran[0]
    if judged[top][1].too_few_seeds:
        for i in ran[1:]:
            scale, verdict = judged[i]
            if verdict.against_noise and scale != "quick":
                return i, top
    return top, None


def leading_verdicts(by_scale: List[Tuple[str, Dict[str, Judgement]]]) -> Dict[str, tuple]:
    """Each claim -> (scale, its verdict) as the landing page gives it (``leading``), the verdict noted with
    what a larger scale found on too few seeds."""
    per_claim: Dict[str, List[Tuple[str, Judgement]]] = {}
    for scale, verdicts in by_scale:
        for claim, verdict in verdicts.items():
            per_claim.setdefault(claim, []).append((scale, verdict))
    judged = {}
    for claim, scales in per_claim.items():
        lead, larger = leading(scales)
        scale, verdict = scales[lead]
        if larger is not None:
            above_scale, above = scales[larger]
            verdict = verdict.noted(f"at {above_scale} scale: {above.detail or above}")
        judged[claim] = (scale, verdict)
    return judged


def judged_claims(name: str, store: Optional[RunStore] = None, up_to: Optional[str] = None) -> Dict[str, tuple]:
    """Each claim of experiment ``name`` -> (scale, its verdict on our runs) as the landing page gives it
    (``leading_verdicts``), over the scales up to ``up_to``. Empty where no scale has runs."""
    return leading_verdicts(claims_by_scale(name, store, up_to))


def claims_judged_below(name: str, shown: str, store: Optional[RunStore] = None) -> str:
    """In a chapter rendered at ``shown``: a line saying at which smaller scales the claims of experiment
    ``name`` that have not run at ``shown`` are judged (``judged_claims``, shown under *Other scales*), and
    how many have a verdict at a larger scale too, where the landing page judges them (a verdict there
    can differ from the chapter's); empty where neither is so."""
    by_scale = claims_by_scale(name, store)  # one pass over the scales serves both questions
    judged = largest_verdicts([(scale, v) for scale, v in by_scale
                               if SCALE_NAMES.index(scale) <= SCALE_NAMES.index(shown)])
    waiting = [(scale, v) for scale, v in judged.values() if scale != shown or not v.ran]
    below = [scale for scale, v in waiting if scale != shown and v.ran]
    above = [scale for scale, v in leading_verdicts(by_scale).values()
             if SCALE_NAMES.index(scale) > SCALE_NAMES.index(shown) and v.ran]

    def at(scales) -> str:  # "3 at `paper` and 1 at `reduced`", largest first
        return " and ".join(f"{scales.count(scale)} at `{scale}`" for scale in reversed(SCALE_NAMES) if scale in scales)
    lines = []
    if below:
        lines.append(f"{len(waiting)} of the {len(judged)} claims have not yet run at `{shown}` scale; *Other scales* "
                     f"below judges {at(below)} scale.")
    if above:
        lines.append(f"{len(above)} of the {len(judged) or len(above)} claims also have a verdict at a larger scale "
                     f"({at(above)}), and the landing page gives those; *Other scales* below shows them.")
    return " ".join(lines)


def show_claims_judged_below(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """Display ``claims_judged_below``'s line under a chapter's claims table; nothing where it is empty
    (an empty ``Markdown`` would render as its Python repr)."""
    line = claims_judged_below(name, shown, store)
    if line:
        display(Markdown(line))


def show_paper_so_far(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """In a table's chapter rendered below ``paper`` scale: the cells run at the paper's settings so far,
    beside the paper's numbers (``paper_comparison``, its test numbers), under a heading that counts them
    and with their stamp folded, before the chapter's own scale; nothing where the chapter shows
    ``paper`` or none has run there. *Other scales* (``show_other_scales``) then gives only its other rows."""
    e = EXPERIMENTS[name]
    rows = stored_rows(name, "paper", store=store) if shown != "paper" else None
    t = verdict_rows(e.comparison(rows)) if rows else None  # ``paper_comparison``, on rows read once
    ran = ran_cells(t) if t is not None else ()
    if not len(ran):
        return
    display(Markdown(f"## {e.short_title} at the paper's scale: {len(ran)} of {len(t)} cells run\n\n"
                     f"Ours at the paper's settings beside the paper's numbers, each cell not yet run there marked so, "
                     f"and where each cell's runs trained (its hardware and precision); the tables after this one are "
                     f"at `{shown}` scale, where every cell has run.\n\n{provenance(e.table_rows(rows))}"))
    display(styled(t.assign(**{"trained on": trained_on(t, e.table_rows(rows))}), e.metric.digits))


def figure_at_largest_scale(name: str, figure, rows, shown: Optional[str], store: Optional[RunStore] = None) -> tuple:
    """(scale, rows, its landing row) of a paper's figure drawn from experiment ``name``'s runs (``figure``,
    one of ``Experiment.figures``), at the scale where it is judged as a claim is (``leading``); where a
    larger scale ran it on too few seeds, the row's ``ours`` and verdict are noted with what that scale found,
    and the larger scale and its rows are under ``larger``. Where its runs have run at no scale, at ``shown``
    (the chapter's scale) on ``rows``. The landing page and the chapter show the figure there."""
    drawn = [(scale, stored, figure(stored, scale)) for scale, stored in stored_scales(name, store=store)]
    if not drawn:
        return shown, rows, figure(rows, shown)
    lead, larger = leading([(scale, row["judged"]) for scale, _, row in drawn])
    scale, stored, row = drawn[lead]
    if not row["judged"].ran:
        return shown, rows, figure(rows, shown)
    if larger is not None:
        above_scale, above_rows, above = drawn[larger]
        row["ours"] += f"; at {above_scale} scale: {above['ours']}"
        row["judged"] = row["judged"].noted(f"at {above_scale} scale: {above['judged'].detail or above['judged']}")
        row["larger"] = {"scale": above_scale, "rows": above_rows, "runs": above["runs"]}  # drawn too (``show_figure``)
    return scale, stored, row


def show_figure(name: str, figure, draw, rows, shown: str, store: Optional[RunStore] = None) -> None:
    """In a chapter rendered at ``shown``: a paper's figure, ``draw`` (rows -> a matplotlib figure), at the
    scale the landing page judges it (``figure_at_largest_scale``), named above it with what it found and
    the stamp of the runs it draws (``report.stamp``: their hardware and precision can differ from the table's);
    where a larger scale has its runs on too few seeds to judge, drawn there too, beneath."""
    scale, rows, row = figure_at_largest_scale(name, figure, rows, shown, store)
    largest = ("the largest where its runs have run on enough seeds to judge against the seed noise" if "larger" in row
               else "the largest where its runs have run")
    where = f"`{scale}` scale" + ("" if scale == shown else f" (larger than this page's: {largest})"
                                  if SCALE_NAMES.index(scale) > SCALE_NAMES.index(shown) else
                                  f" (smaller than this page's: {largest})")
    runs = f"\n\n{provenance(row['runs'], 'How its numbers were made')}" if any(r.record for r in row["runs"]) else ""
    display(Markdown(f"At {where}: {row['ours']}.{runs}"))
    shows = row["the paper's best cell"]  # what the paper's figure shows
    display(figure_html(draw(rows), f"{row['what']}, at <code>{scale}</code> scale: {shows}."))
    if "larger" in row:  # its runs at a larger scale too, on too few seeds to judge: nearer the paper's figure
        larger = row["larger"]
        display(HTML(provenance(larger["runs"], f"How the numbers at {larger['scale']} scale were made")))
        display(figure_html(draw(larger["rows"]), f"{row['what']}, at <code>{larger['scale']}</code> scale, on too "
                                                  f"few seeds to judge against the seed noise: {shows}."))


CONJECTURE_GRIDS = ("table", "conjecture")  # the grids ``conjecture_runs`` trains where runs are missing


def conjecture_runs(experiment: str, scale: str, seeds, store: Optional[RunStore] = None, device: str = "cpu",
                    jobs: int = 1, train: bool = False) -> Tuple[list, list, list]:
    """The runs the conjecture's chapter and its landing rows judge, for Table 2 (``word_lm``) or 3
    (``char_lm``) at ``scale``: the table's own grid (its single schemes: all of its cells, 26 or 28 runs a
    seed) and the combination's (8 a seed), each for ``seeds``, trained where missing with ``train``; and
    the seeds study's headline cells at every seed stored (never trained here), which give the seed noise
    (``conjecture.pooled_seed_sd``). The table's rows are its cells alone (``Experiment.table_rows``:
    Table 3's batch-size check aside)."""
    table, combined = (run_grid(experiment, scale, seeds=seeds, device=device, jobs=jobs, train=train, store=store,
                                grid=grid) for grid in CONJECTURE_GRIDS)
    headline = run_grid(experiment, scale, seeds=stored_seeds(experiment, scale, store) or [0], train=False,
                        store=store, grid="headline")
    return EXPERIMENTS[experiment].table_rows(table), combined, headline


def show_ablations(name: str, scale: str, seeds, store: Optional[RunStore] = None) -> None:
    """In a chapter rendered at ``scale``: each ablation of experiment ``name`` (``Experiment.ablations``)
    beside the table's runs (``_show_ablation``)."""
    e = EXPERIMENTS[name]
    rows = run_grid(name, scale, seeds, train=False, store=store)
    for grid, change in e.ablations:
        _show_ablation(e, change, rows, run_grid(name, scale, seeds, train=False, store=store, grid=grid), "###")


def _show_ablation(e, change: str, rows, ablated, heading: str) -> None:
    """One ablation of experiment ``e``: its runs' (``ablated``) stamp and the table's comparison on them
    beside the table's own runs (``rows``), cell by cell (``ablations.ablation_effects``,
    ``ablations.side_by_side``), what it found (``ablations.ablation_finding``), then its runs' learning curves
    where the experiment draws them."""
    display(Markdown(f"{heading} Ablation: {change}\n\n{provenance(ablated)}"))
    effects = ablation_effects(e.comparison, rows, ablated, e.metric)
    display(styled(side_by_side(effects, e.metric.digits), e.metric.digits))
    display(Markdown(ablation_finding(effects)))
    if e.curves is not None and any(r.record for r in ablated):
        fig = e.curves(ablated)
        title = f"Ablation: {change}"  # not to be taken for the table's runs
        if fig.legends:  # the legend sits at the figure's top, where a suptitle would lie under it
            fig.legends[0].set_title(title, prop={"size": "medium"})
        else:
            fig.suptitle(title, fontsize="medium")
        display(figure_html(fig, f"The ablation's runs ({change}), per epoch, as the table's runs are drawn above."))


def show_other_scales(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """In a chapter rendered at ``shown``: the runs stored at every other scale of experiment ``name``,
    largest first, each with its stamp, the comparison of the cells that ran (at the paper's scale, those not
    already leading the chapter: ``show_paper_so_far``) and its plot against the paper's, the paper's claims
    judged on them, and, where the experiment has them, their learning curves and the checks of the scale;
    then each ablation that ran there, beside the table's runs of that scale (``_show_ablation``). Nothing
    where no other scale has runs."""
    e = EXPERIMENTS[name]
    for scale in reversed(SCALE_NAMES):
        grid = stored_rows(name, scale, store=store)  # None where nothing of the experiment is stored there
        if scale == shown or grid is None:
            continue
        rows = [r for r in grid if r.stored is not None]
        ablations = [(change, stored_rows(name, scale, g, store) or []) for g, change in e.ablations]
        ablations = [(change, ablated) for change, ablated in ablations if any(r.stored is not None for r in ablated)]
        if not rows and not ablations:
            continue
        runs = (provenance(grid) if rows  # its cells counted of the whole grid's
                else "The table's grid has no runs at this scale; its ablations' runs follow.")
        display(Markdown(f"### At `{scale}` scale\n\n{runs}"))
        if rows and e.comparison is not None:
            table = e.comparison(rows)
            ran, led = table["ours"] != "not yet run", weighed(table)
            if scale == "paper" and (ran & led).any():  # they lead the chapter (``show_paper_so_far``)
                display(Markdown(f"Its test cells lead this chapter ({e.short_title} at the paper's scale)"
                                 + ("; its other rows:" if (ran & ~led).any() else ".")))
                ran &= ~led
            if ran.any():
                display(styled(table[ran], e.metric.digits))
            display(figure_html(plot_against_paper(table, e.metric),
                             f"At <code>{scale}</code> scale, ours against the paper's, cell by cell: whether our "
                             "cells keep the paper's order (a smaller scale's numbers are not comparable with the "
                             "paper's)."))
        if rows and e.claims is not None:
            if scale == "quick":  # as the landing page says of a verdict at quick (summary.QUICK)
                display(Markdown("The claims below are judged at `quick`, a smoke test whose models under-fit: "
                                 "not a test of the claims (see Deviations)."))
            display(e.claims(rows))
        if rows and e.curves is not None:
            display(figure_html(e.curves(rows), f"The runs at <code>{scale}</code> scale, per epoch, as those of "
                                                "this page's scale are drawn above."))
        for check in e.checks if rows else ():
            display(check(rows))
        for change, ablated in ablations:
            _show_ablation(e, change, grid, ablated, "####")


# The schemes chapter's tables of Moon's and our per-sequence runs, by experiment: Table 1's and Table 3's
# tasks start every sequence from a zero state with the paper's scaling, where the two train alike.
TWINS = {"temporal_order": temporal_order_chapter.moon_vs_ours_per_sequence,
         "char_lm": char_lm_chapter.moon_vs_ours_per_sequence}


def moon_vs_ours_at_largest_scale(name: str, store=None):
    """Experiment ``name``'s table of Moon's and our per-sequence runs (``TWINS``) at the largest scale
    where both cells have runs (a new scale's first records need not include them): (the rows the table
    compares, for its stamp; the table); no rows and an empty table where no scale has them."""
    twins = TWINS[name]
    for scale, rows in stored_scales(name, store=store):
        table = twins(rows)
        if len(table):
            return [r for r in rows if is_twin(r)], table
    return [], twins([])


def show_where_made(store: Optional[RunStore] = None) -> None:
    """The provenance page's runs: every stored record by experiment, scale, hardware, torch and precision
    (``report.where_made``), then, folded, each commit of the code that ran them (``report.commits_of``)."""
    store = store or RunStore()
    records = [r for name in EXPERIMENTS for r in store.records(name)]
    titles = {name: e.short_title for name, e in EXPERIMENTS.items()}
    display(where_made(records).assign(experiment=lambda t: t["experiment"].map(titles)).style.hide())
    commits = commits_of(records).assign(experiment=lambda t: t["experiment"].map(titles))
    display(HTML(folded(f"Each commit of the code that ran them ({commits['commit'].nunique()})",
                        commits.style.hide().to_html())))

