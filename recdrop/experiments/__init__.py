"""The one registry of experiments and chapters. Each experiment is two modules: ``<name>`` holds its
config and scales, its grids (the table's cells, and the studies beyond the paper that reuse them) and
its task; ``<name>_chapter`` its comparison with the paper, its claims and figures, from the stored
runs. This file says which is which. The sweep CLI, the
campaign, the book build and the landing page read it, and a test checks ``_toc.yml`` against it.

Adding an experiment: its data loader (``recdrop/data/``), its two modules here, its notebook
(``notebooks/<name>.ipynb``, which becomes its chapter) and one ``Experiment`` entry below; then
its line in ``_toc.yml``, which a test checks against ``CHAPTERS``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional

from ..report import Metric
from . import (char_lm, char_lm_chapter, memory_loss, memory_loss_chapter, ner, ner_chapter, sentiment,
               sentiment_chapter, temporal_order, temporal_order_chapter, word_lm, word_lm_chapter)
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
    figures: tuple = ()  # (rows, scale) -> the landing page's row of a paper's figure drawn from these runs: its name
    # under "figure" ("Figure 2") and what it shows under "subject", the rows of the cells it draws under "runs"
    # and its claim's verdict (verdicts.claim_verdict) under "judged"
    paper_scale_lacks: str = ""  # what its `paper` scale still lacks of the paper's setup (deviations page)
    ablations: tuple = ()  # (grid, what it changes): runs kept beside the table, in its chapter and on the landing page
    # rows -> the rows of the paper's table itself, without a check's its grid also holds (Table 3's batch size)
    table_rows: Callable = list

    @property
    def short_title(self) -> str:
        """What of the paper it replicates, as a table's row names it: "Table 2" (the title before its colon)."""
        return self.title.split(":")[0]

    @property
    def subject(self) -> str:
        """What the paper's table measures, as its title says after the colon ("word-level PTB, test perplexity")."""
        return self.title.split(":", 1)[-1].strip()  # a study's title has no colon: all of it


# In the book's order.
EXPERIMENTS: Dict[str, Experiment] = {e.name: e for e in [
    Experiment("temporal_order", "Table 1: Temporal Order, test accuracy", temporal_order.TemporalOrderConfig,
               temporal_order.TemporalOrderTask, temporal_order.GRIDS, temporal_order_chapter.table1,
               temporal_order_chapter.METRIC, temporal_order_chapter.claims, headline="medium semeniuta per-step"),
    Experiment("memory_loss", "Memory loss, measured (Eqs. 17-19)", memory_loss.MemoryLossConfig,
               memory_loss.MemoryLossTask, memory_loss.GRIDS, claims=memory_loss_chapter.claims),
    Experiment("word_lm", "Table 2: word-level PTB, test perplexity", word_lm.WordLMConfig, word_lm.WordLMTask,
               word_lm.GRIDS, word_lm_chapter.table2, word_lm_chapter.METRIC, word_lm_chapter.claims,
               curves=word_lm_chapter.plot_runs, checks=(word_lm_chapter.fit, word_lm_chapter.pilot),
               figures=(word_lm_chapter.figure2_row,)),
    Experiment("char_lm", "Table 3: character-level PTB, test bpc", char_lm.CharLMConfig, char_lm.CharLMTask,
               char_lm.GRIDS, char_lm_chapter.table3, char_lm_chapter.METRIC, char_lm_chapter.claims,
               curves=char_lm_chapter.plot_runs,
               checks=(char_lm_chapter.fit, char_lm_chapter.pilot, char_lm_chapter.batch_check),
               table_rows=char_lm.table_rows),
    Experiment("ner", "Table 4: NER on CoNLL-2003, test F1", ner.NERConfig, ner.NERTask, ner.GRIDS,
               ner_chapter.table4, ner_chapter.METRIC, ner_chapter.claims, curves=plot_cell_runs,
               paper_scale_lacks="the word2vec vectors (GloVe 50d here)", ablations=ner.ABLATIONS),
    Experiment("sentiment", "Table 5: Twitter sentiment, test F1", sentiment.SentimentConfig, sentiment.SentimentTask,
               sentiment.GRIDS, sentiment_chapter.table5, sentiment_chapter.METRIC, sentiment_chapter.claims,
               curves=plot_cell_runs,
               paper_scale_lacks="the pre-training on 1M weakly labelled tweets, the word2vec vectors (GloVe 50d "
                                 "here) and, most likely, the 2013 test tweets in training", ablations=ABLATIONS),
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
    Chapter("provenance"),
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
