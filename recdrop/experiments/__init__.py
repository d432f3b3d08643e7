"""The one registry of experiments and chapters. Each experiment module holds its config and scales,
its grids (the table's cells, and the studies beyond the paper that reuse them), its task, its
comparison with the paper and its claims; this file says which is which. The sweep CLI, the
campaign, the book build and the landing page read it, and a test checks ``_toc.yml`` against it.

Adding an experiment: its data loader (``recdrop/data/``), its module here, its notebook
(``notebooks/<name>.ipynb``, which becomes its chapter) and one ``Experiment`` entry below; then
its line in ``_toc.yml``, which a test checks against ``CHAPTERS``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

from ..config import SCALE_NAMES
from ..report import Metric, claim_verdicts, plot_against_paper, side_by_side, stamp, styled
from ..store import RunStore
from . import char_lm, memory_loss, ner, sentiment, temporal_order, word_lm
from .cell_grid import ABLATIONS, plot_cell_runs


@dataclasses.dataclass(frozen=True)
class Experiment:
    """What the machinery needs to know of one experiment."""

    name: str
    title: str  # the chapter's subject, and the landing page's row
    config: type  # its ExperimentConfig subclass (the ``paper`` defaults and the other scales)
    task: type  # its train.Task
    grids: Dict[str, Callable]  # "table" (the paper's, or the study's), "headline", "conjecture", "pilot"
    comparison: Optional[Callable] = None  # rows -> report.compare's table against the paper's
    metric: Optional[Metric] = None  # how ``comparison`` judges, declared beside the experiment
    claims: Optional[Callable] = None  # rows -> the paper's observations, on its numbers and on ours
    headline: Optional[str] = None  # the landing page's cell, where the paper's best value is shared
    curves: Optional[Callable] = None  # rows -> a figure of the learning curves of whatever ran
    checks: tuple = ()  # rows -> a table that tests the scale itself (over-fit, converged, pilot, batch size)
    figures: tuple = ()  # (rows, scale) -> the landing page's row of a paper's figure drawn from these runs
    paper_scale_lacks: str = ""  # what its `paper` scale still lacks of the paper's setup (deviations page)
    ablations: tuple = ()  # (grid, what it changes): runs kept beside the table, in its chapter and on the landing page


# In the book's order.
EXPERIMENTS: Dict[str, Experiment] = {e.name: e for e in [
    Experiment("temporal_order", "Table 1: Temporal Order, test accuracy", temporal_order.TemporalOrderConfig,
               temporal_order.TemporalOrderTask, temporal_order.GRIDS, temporal_order.table1, temporal_order.METRIC,
               temporal_order.claims, headline="medium semeniuta per-step"),
    Experiment("memory_loss", "Memory loss, measured (Eqs. 17-19)", memory_loss.MemoryLossConfig,
               memory_loss.MemoryLossTask, memory_loss.GRIDS, claims=memory_loss.claims),
    Experiment("word_lm", "Table 2: word-level PTB, test perplexity", word_lm.WordLMConfig, word_lm.WordLMTask,
               word_lm.GRIDS, word_lm.table2, word_lm.METRIC, word_lm.claims, curves=word_lm.plot_runs,
               checks=(word_lm.fit, word_lm.pilot), figures=(word_lm.figure2_row,)),
    Experiment("char_lm", "Table 3: character-level PTB, test bpc", char_lm.CharLMConfig, char_lm.CharLMTask,
               char_lm.GRIDS, char_lm.table3, char_lm.METRIC, char_lm.claims, curves=char_lm.plot_runs,
               checks=(char_lm.fit, char_lm.pilot, char_lm.batch_check)),
    Experiment("ner", "Table 4: NER on CoNLL-2003, test F1", ner.NERConfig, ner.NERTask, ner.GRIDS, ner.table4,
               ner.METRIC, ner.claims, curves=plot_cell_runs,
               paper_scale_lacks="the word2vec vectors (GloVe 50d here)", ablations=ABLATIONS),
    Experiment("sentiment", "Table 5: Twitter sentiment, test F1", sentiment.SentimentConfig, sentiment.SentimentTask,
               sentiment.GRIDS, sentiment.table5, sentiment.METRIC, sentiment.claims, curves=plot_cell_runs,
               paper_scale_lacks="the pre-training on 1M weakly labelled tweets, the word2vec vectors (GloVe 50d "
                                 "here) and the 2013 test tweets in training", ablations=ABLATIONS),
]}


@dataclasses.dataclass(frozen=True)
class Chapter:
    """A page of the book built from ``notebooks/<name>.ipynb``. It is rendered at the largest scale
    with stored runs of ``grids`` ((experiment, grid) pairs) that have ``min_seeds`` seeds in some
    cell; with ``complete`` (a paper table's chapter), at the largest scale where every cell of its
    first grid has run, where there is one, the cells of larger scales that ran shown below it. A
    chapter without grids is rendered at ``quick`` (the landing page picks each table's scale itself)."""

    name: str
    grids: tuple = ()
    min_seeds: int = 1
    complete: bool = False

    @property
    def notebook(self) -> str:
        return f"notebooks/{self.name}.ipynb"


def _table(name: str) -> Chapter:
    """A table's chapter: its grid, and the ablations shown beside it."""
    return Chapter(name, ((name, "table"), *((name, grid) for grid, _ in EXPERIMENTS[name].ablations)), complete=True)


# The book's order: the landing page, Figure 1, a chapter per experiment, then the studies that draw
# on several experiments' runs.
CHAPTERS: Dict[str, Chapter] = {c.name: c for c in [
    Chapter("summary"), Chapter("schemes"), *(_table(name) for name in EXPERIMENTS),
    Chapter("conjecture", (("word_lm", "conjecture"), ("char_lm", "conjecture"))),
    # the seeds study shows the spread over seeds: a cell with one seed does not count
    Chapter("seeds", (("temporal_order", "headline"), ("word_lm", "headline"), ("char_lm", "headline")), 2),
    Chapter("performance"),
]}


def get(name: str, grid: str = "table"):
    """(task class, grid function) of experiment ``name``: ``grid`` is "table" (the paper's table),
    or another of its grids ("headline": the cells of the seeds study; "conjecture": gal+semeniuta;
    "pilot": the pilot of a new scale)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment={name!r} is not known; allowed values: {', '.join(map(repr, EXPERIMENTS))}")
    e = EXPERIMENTS[name]
    if grid not in e.grids:
        raise ValueError(f"grid={grid!r} is not a grid of {name}; allowed values: {', '.join(map(repr, e.grids))}")
    return e.task, e.grids[grid]


def judged_claims(name: str, store: Optional[RunStore] = None, up_to: Optional[str] = None) -> Dict[str, tuple]:
    """Each claim of experiment ``name`` -> (scale, its verdict on our runs) at the largest scale (``up_to``
    at most) where it has a verdict; a claim with none anywhere is "not yet run" at the largest scale with
    runs. Empty where no scale has runs. The landing page and the chapters judge claims through this."""
    from ..sweep import stored_scales

    judged: Dict[str, tuple] = {}
    for scale, rows in stored_scales(name, store=store, up_to=up_to):
        if not any(r["record"] for r in rows):  # nothing of this table here (a scale since redefined)
            continue
        for claim, verdict in claim_verdicts(EXPERIMENTS[name].claims(rows)).items():
            if claim not in judged or (judged[claim][1] == "not yet run" and verdict != "not yet run"):
                judged[claim] = (scale, verdict)
    return judged


def claims_judged_below(name: str, shown: str, store: Optional[RunStore] = None) -> str:
    """In a chapter rendered at ``shown``: a line saying at which smaller scales the claims of experiment
    ``name`` that have not run at ``shown`` are judged (``judged_claims``, shown under *Other scales*);
    empty where none waits or none is judged at any scale."""
    judged = judged_claims(name, store, up_to=shown)
    waiting = [(scale, v) for scale, v in judged.values() if scale != shown or v == "not yet run"]
    below = [scale for scale, v in waiting if scale != shown and v != "not yet run"]
    if not below:
        return ""
    at = " and ".join(f"{below.count(scale)} at `{scale}`" for scale in reversed(SCALE_NAMES) if scale in below)
    return (f"{len(waiting)} of the {len(judged)} claims have not yet run at `{shown}` scale; *Other scales* "
            f"below judges {at} scale.")


def show_claims_judged_below(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """Display ``claims_judged_below``'s line under a chapter's claims table; nothing where it is empty
    (an empty ``Markdown`` would render as its Python repr)."""
    from IPython.display import Markdown, display

    line = claims_judged_below(name, shown, store)
    if line:
        display(Markdown(line))


def show_paper_so_far(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """In a table's chapter rendered below ``paper`` scale: a line saying which of its cells have run at
    the paper's settings so far (``summary.paper_so_far``), shown under *Other scales*; nothing where
    the chapter shows ``paper`` or none has run there."""
    from IPython.display import Markdown, display

    from ..summary import paper_so_far

    so_far = paper_so_far(EXPERIMENTS[name], store=store) if shown != "paper" else "none run"
    if so_far != "none run":
        display(Markdown(f"At `paper` scale so far: {so_far}; *Other scales* below shows them."))


def show_ablations(name: str, scale: str, seeds, store: Optional[RunStore] = None) -> None:
    """In a chapter rendered at ``scale``: for each ablation of experiment ``name`` (``Experiment.ablations``),
    its runs' stamp and the table's comparison on its runs beside the table's own (``report.side_by_side``),
    then its runs' learning curves where the experiment draws them."""
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    from ..sweep import run_grid

    e = EXPERIMENTS[name]
    rows = run_grid(name, scale, seeds, train=False, store=store)
    for grid, change in e.ablations:
        ablated = run_grid(name, scale, seeds, train=False, store=store, grid=grid)
        display(Markdown(f"### Ablation: {change}\n\n{stamp(ablated)}"))
        display(styled(side_by_side(e.comparison, {"the table's runs": rows, change: ablated}), e.metric.digits))
        if e.curves is not None and any(r["record"] for r in ablated):
            fig = e.curves(ablated)
            display(fig)
            plt.close(fig)  # shown once, not again at the end of the cell


def show_other_scales(name: str, shown: str, store: Optional[RunStore] = None) -> None:
    """In a chapter rendered at ``shown``: the runs stored at every other scale of experiment ``name``,
    largest first, each with its stamp, the comparison of the cells that ran and its plot against the
    paper's, the paper's claims judged on them, and, where the experiment has them, their learning
    curves and the checks of the scale. Nothing where no other scale has runs."""
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    from ..sweep import stored_scales

    e = EXPERIMENTS[name]
    for scale, grid in stored_scales(name, store=store):
        rows = [r for r in grid if r["record"] or r["diverged"]]
        if scale == shown or not rows:
            continue
        display(Markdown(f"### At `{scale}` scale\n\n{stamp(grid)}"))  # its cells counted of the whole grid's
        if e.comparison is not None:
            table = e.comparison(rows)
            display(styled(table[table["ours"] != "not yet run"], e.metric.digits))
            fig = plot_against_paper(table, e.metric)
            display(fig)
            plt.close(fig)  # shown once, not again at the end of the cell
        if e.claims is not None:
            display(e.claims(rows))
        if e.curves is not None:
            fig = e.curves(rows)
            display(fig)
            plt.close(fig)  # shown once, not again at the end of the cell
        for check in e.checks:
            display(check(rows))
