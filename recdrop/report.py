"""Shared pieces of every chapter: the stamp, seed summaries, and the one comparison builder every paper
table goes through (setting | paper | ours | delta | verdict), judged as ``verdicts`` says (an ablation's
beside its table's runs: ``ablations``); the pages' tables and figures. Which scale a chapter shows is
decided in ``book``."""
from __future__ import annotations

import html
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from .config import SCALE_NAMES
from .records import Record, Row
from .store import RunStore
from .verdicts import NOT_RUN, Judgement, Verdict, verdict_html


def stored_seeds(experiment: str, scale: str, store: Optional[RunStore] = None) -> List[int]:
    """The seeds of the records stored for ``experiment`` at ``scale``, in order ([0] where none): what
    the book shows, so that every seed that ran counts."""
    store = store or RunStore()
    return sorted({int(r.seed) for r in store.records(experiment, scale)}) or [0]


# ``Record.precisions``' names, as a stamp says them, in the order it lists them
PRECISION_NAMES = {"float32": "float32", "cudnn-tf32": "cuDNN's default TF32", "tf32": "TF32 products",
                   "bf16": "bf16 autocast"}


def stamp(rows: Iterable[Row]) -> str:
    """Scale, hardware, commit and dates of the records shown (each field lists its distinct values), how
    many settings of the grid shown have run, each a config run once per seed (not the paper's cells: a
    run of Table 4 gives two, and a chapter's grid can hold checks beyond the paper's), which seeds, how
    many runs diverged, and the precision: float32 throughout, or how many runs used each (TF32 products
    or bf16 autocast: ``train.set_precision``, an option; cuDNN's default TF32 before it: ``Record.precisions``);
    the hardware, torch and commit of a resumed run's every stretch
    (its ``segments``) count too."""
    rows = list({r.run_id: r for r in rows}.values())  # a run shown by two grids counts once
    recs = [r.record for r in rows if r.record]
    diverged = sum(bool(r.diverged) for r in rows)
    if not recs:
        return (f"No finished runs: {diverged} diverged, the other cells are not yet run at this scale." if diverged
                else "No stored runs: every cell of this table is not yet run at this scale.")

    def values(key):
        return ", ".join(sorted({str(part[key]) for r in recs for part in r.stretches if key in part}))
    scales = ", ".join(sorted({r.scale for r in recs}))
    dates = sorted(r.finished[:10] for r in recs)
    seeds_per_cell: Dict[Any, int] = {}
    for r in rows:  # a cell is a config; its rows are its seeds
        seeds_per_cell[r.config] = seeds_per_cell.get(r.config, 0) + bool(r.record)
    ran = [n for n in seeds_per_cell.values() if n]
    seeds = f"{min(ran)}" if min(ran) == max(ran) else f"{min(ran)}–{max(ran)}"
    used = Counter(p for r in recs for p in set(r.precisions))  # a resumed run counts under each it used
    precision = (" | float32 throughout" if set(used) == {"float32"} else  # a float32 record names none (its run id)
                 "".join(f" | {what} in {used[p]} of the runs" for p, what in PRECISION_NAMES.items() if used[p])
                 + (" (a resumed run counts under each it used)" if sum(used.values()) > len(recs) else ""))
    return (f"Scale: {scales} | runs: {len(recs)} shown{f', {diverged} diverged' if diverged else ''} | settings: "
            f"{len(ran)} of {len(seeds_per_cell)} run, {seeds} seed{'' if seeds == '1' else 's'} each | seeds: "
            f"{', '.join(map(str, sorted({r.seed for r in rows if r.record})))} | hardware: {values('hardware')} | "
            f"torch {values('torch')} | commit: {values('commit')} | runs finished "
            f"{dates[0] if dates[0] == dates[-1] else f'{dates[0]} to {dates[-1]}'}"
            + precision)


def folded(summary: str, body: str, css_class: str = "", bold: bool = False) -> str:
    """``body`` (HTML) folded under the line ``summary`` (plain text, escaped here; in bold with ``bold``): what
    a page keeps for the reader who asks (stamps, commits, earlier measurements), out of the way of the one
    who reads the results."""
    opened = f'<details class="{css_class}">' if css_class else "<details>"
    line = f"<b>{html.escape(summary)}</b>" if bold else html.escape(summary)
    return f"{opened}<summary>{line}</summary>{body}</details>"


def provenance(rows: Iterable[Row], what: str = "How these numbers were made") -> str:
    """``stamp`` of ``rows`` as a page shows it, ``folded`` under ``what``."""
    return folded(what, f"<p>{html.escape(stamp(rows), quote=False)}</p>", "provenance")


def _stretches(records: Iterable[Record]) -> pd.DataFrame:
    """One row per stretch of training of ``records`` (a resumed run has several: ``Record.stretches``):
    where and how it ran, and the run, seed and day it finished."""
    return pd.DataFrame([
        {"experiment": r.experiment, "scale": r.scale, "hardware": part.get("hardware", ""),
         "torch": part.get("torch", ""), "precision": PRECISION_NAMES[precision], "commit": part.get("commit", ""),
         "run": r.run_id, "seed": r.seed, "day": r.finished[:10]}
        for r in records for part, precision in zip(r.stretches, r.precisions)],
        columns=["experiment", "scale", "hardware", "torch", "precision", "commit", "run", "seed", "day"])


def _made(parts: pd.DataFrame, keys: List[str], **more) -> pd.DataFrame:
    """``parts`` (``_stretches``) per ``keys``: how many runs, ``more`` (named aggregations), and the days
    they finished ("a to b")."""
    out = parts.groupby(keys, sort=False).agg(runs=("run", "nunique"), **more, first=("day", "min"),
                                               last=("day", "max")).reset_index()
    out["finished"] = [a if a == b else f"{a} to {b}" for a, b in zip(out["first"], out["last"])]
    return out


def where_made(records: Iterable[Record]) -> pd.DataFrame:
    """The runs of ``records`` by experiment, scale, hardware, torch and precision (a resumed run counts
    under each that ran a stretch of it): how many, their seeds, how many commits of the code ran them,
    and the days they finished."""
    keys = ["experiment", "scale", "hardware", "torch", "precision"]
    out = _made(_stretches(records), keys, commits=("commit", "nunique"),
                seeds=("seed", lambda s: ", ".join(map(str, sorted(set(s))))))
    return out[[*keys, "runs", "seeds", "commits", "finished"]]


def commits_of(records: Iterable[Record]) -> pd.DataFrame:
    """Each commit of the code that ran a stretch of ``records``, per experiment and scale: how many runs
    it ran and the days they finished, the newest first."""
    out = _made(_stretches(records), ["experiment", "scale", "commit"])
    out = out.sort_values(["experiment", "scale", "last", "first"], ascending=[True, True, False, False], kind="stable")
    return out[["experiment", "scale", "commit", "runs", "finished"]].reset_index(drop=True)


def summarize(rows: List[Row], keys: List[str], metrics: List[str]) -> pd.DataFrame:
    """Mean, standard deviation and count over seeds of each metric, per cell (``keys``).

    n counts the seeds with a value of every metric (a record without one counts in no mean, nor here).
    Cells without a record keep a row with n = 0 and NaN values (shown as "not yet run")."""
    flat = []
    for r in rows:
        flat.append({**{k: r[k] for k in keys}, **{name: r.metrics.get(name, np.nan) for name in metrics}})
    df = pd.DataFrame(flat)
    g = df.groupby(keys, sort=False)
    out = g[metrics].agg(["mean", "std"])
    out.columns = [f"{m}_{s}" for m, s in out.columns]
    out["n"] = g[metrics].count().min(axis=1)  # pandas counts the values that are not NaN
    return out.reset_index()


def fmt_mean_sd(mean: float, sd: float, n: int, digits: int = 1) -> str:
    """"m ± s (n=3)" for n > 1 ("m (n=3, identical)" where s is 0, "m ± <0.05 (n=3)" where it rounds to 0),
    "m" for n = 1, "not yet run" for n = 0."""
    if not n or pd.isna(mean):
        return "not yet run"
    if n == 1 or pd.isna(sd):
        return f"{mean:.{digits}f}"
    if sd == 0:  # not "± 0.000"
        return f"{mean:.{digits}f} (n={n}, identical)"
    if round(sd, digits) == 0:  # a spread below the digits shown
        return f"{mean:.{digits}f} ± <{0.5 * 10 ** -digits:g} (n={n})"
    return f"{mean:.{digits}f} ± {sd:.{digits}f} (n={n})"


def curves_frame(rows: List[Row], keys: List[str]) -> pd.DataFrame:
    """The per-epoch curves of every stored run, long format, with the cell labels."""
    frames = []
    for r in rows:
        if r.record:
            c = pd.DataFrame(r.record.curves)
            for k in keys:
                c[k] = r[k]
            c["seed"] = r.seed
            frames.append(c)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=keys + ["seed", "epoch"])


class SeedValues(dict):
    """Our numbers seed by seed, ``{seed: {key: value}}``, and in ``diverged`` the keys of each seed's
    runs that diverged (``{seed: set of keys}``): a claim that needs one of them cannot be judged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.diverged: Dict[int, set] = {}


def seed_values(rows: Iterable[Row],
                values_of: Callable[[Row, Dict[str, Any]], Dict[Any, float]]) -> SeedValues:
    """Our numbers seed by seed (``SeedValues``): ``values_of(row, metrics)`` gives one stored run's
    ``{key: value}`` (a claim's cells); missing and NaN values are left out. A diverged run's keys
    (``values_of(row, {})``) go to ``diverged``."""
    out = SeedValues()
    for r in rows:
        if r.record:
            for key, v in values_of(r, r.record.metrics).items():
                if v is not None and not pd.isna(v):
                    out.setdefault(r.seed, {})[key] = float(v)
        elif r.diverged:
            out.diverged.setdefault(r.seed, set()).update(values_of(r, {}))
    return out


# -- the comparison with the paper ------------------------------------------------------------------
@dataclass(frozen=True)
class Metric:
    """How an experiment's numbers are shown and judged against the paper's, declared beside it."""

    unit: str  # as shown: "%", "ppl", "bpc", "F1"
    digits: int  # decimals shown
    tolerance: float  # how far from the paper's number a cell may be and count as reproduced ...
    relative: bool = False  # ... as a fraction of the paper's number (the delta then in %), else absolute
    higher_is_better: bool = True
    points: bool = False  # the unit is itself a percentage: a delta is in points, not in %

    @property
    def delta_unit(self) -> str:
        return "points" if self.points else "%" if self.relative else self.unit

    @property
    def tolerance_words(self) -> str:
        """How far from the paper's number a cell may be: "5%" (of the paper's number), "1 F1", "10 points"."""
        return f"{self.tolerance:.0%}" if self.relative else f"{self.tolerance:g} {self.delta_unit}"

    def delta(self, ours: float, paper: float) -> float:
        """ours - paper, in % of the paper's number where the tolerance is relative."""
        return (ours - paper) / paper * 100 if self.relative else ours - paper

    def verdict(self, values: Sequence[float], paper: float) -> Optional[Judgement]:
        """*reproduced*: the mean over seeds is within the tolerance. A mean outside it counts as *not
        reproduced* only when it is further out than the seed noise (two standard errors of the mean);
        nearer, it is *within seed noise*. One seed has no noise to weigh: outside the tolerance, it is
        *not judged*, saying so (the delta beside it says how far). None where the paper has no number."""
        if paper is None or math.isnan(paper):
            return None
        if not len(values):
            return NOT_RUN
        mean, n = float(np.mean(values)), len(values)
        tol = self.tolerance * 100 if self.relative else self.tolerance
        off = abs(self.delta(mean, paper))
        one_seed = "1 seed" if n == 1 else ""
        if off <= tol:
            return Judgement(Verdict.REPRODUCED, one_seed, seeds=n)
        if n == 1:
            return Judgement(Verdict.NOT_JUDGED, f"outside {self.tolerance_words} on 1 seed, too few to judge "
                                                 "against seed noise", seeds=n)
        sem = float(np.std(values, ddof=1)) / math.sqrt(n)
        noise = 2 * sem / abs(paper) * 100 if self.relative else 2 * sem
        if off - noise <= tol:
            return Judgement(Verdict.WITHIN_NOISE, seeds=n)
        return Judgement(Verdict.NOT_REPRODUCED, seeds=n)

    def describe(self) -> str:
        """The tolerance in words, for a table's caption."""
        within = self.tolerance_words + (" of the paper's number" if self.relative else "")
        return (f"*reproduced* within {within}; with several seeds (ours is then their mean ± standard deviation, "
                f"n seeds), a cell further out only by less than two standard errors of our mean "
                f"is *within seed noise*, and one further out *not reproduced*; one seed outside it is *not judged*")


# ``compare``'s columns of what its ``ours`` says, for code to read; "below": the scale below the paper's its runs
# ran at ("" at the paper's)
BEHIND_OURS = ("mean", "sd", "n", "diverged", "below")


def compare(rows: List[Row], cells: Iterable[Tuple[Dict[str, Any], Optional[float], str]],
            cell_keys: Sequence[str], metric: Metric, factor: float = 1.0,
            extras: Sequence[Tuple[str, Callable[[Dict[str, Any]], Optional[str]]]] = ()) -> pd.DataFrame:
    """The comparison table of one paper table: one row per entry of ``cells``.

    ``cells``: (labels, the paper's number or None, the record metric that is ours). ``labels``
    name the setting (columns of the output, in order); those in ``cell_keys`` pick the runs of
    ``rows`` it is about (every seed of that cell). ``factor`` scales the metric (1 -> %: 100).
    ``extras``: (column, labels -> a record metric or None) shown beside, as mean ± sd ("" where
    None; "not recorded" where the cell's runs lack it). Columns: the labels, paper,
    ours (mean ± sd, n), delta (ours - paper, in ``metric.delta_unit``), verdict (``Metric.verdict`` at
    the paper's scale; *not judged at this scale* below it; None where the paper has no number), the extras,
    and the numbers behind ``ours`` (``BEHIND_OURS``): mean, sd, n, how many of its runs diverged and the
    scale below the paper's they ran at."""
    out = []
    for labels, paper, key in cells:
        mine = [r for r in rows if all(r[k] == labels[k] for k in cell_keys)]
        runs = [r.record.metrics for r in mine if r.record]
        diverged = sum(bool(r.diverged) for r in mine)
        values = _values(runs, key, factor)
        n, (mean, sd) = len(values), _mean_sd(values)
        paper = float("nan") if paper is None else float(paper)
        delta = metric.delta(mean, paper) if n and not math.isnan(paper) else None
        ours = fmt_mean_sd(mean, sd, n, metric.digits)
        if diverged:  # a run whose training loss became NaN or infinite: a result, not a gap
            ours = f"{ours}; {diverged} diverged" if n else f"diverged ({diverged} run{'s' * (diverged > 1)})"
        below = min(({r.stored.scale for r in mine if r.stored is not None} - {"paper"}), key=SCALE_NAMES.index,
                    default="")
        row = {**labels, "paper": paper, "ours": ours,
               "delta": None if delta is None else round(delta, 1 if metric.relative else metric.digits),
               "verdict": _cell_verdict(metric, values, paper, diverged, below)}
        for column, extra_of in extras:
            extra = extra_of(labels)
            row[column] = "" if extra is None else _extra(runs, extra, factor, metric.digits)
        out.append({**row, "mean": mean, "sd": sd, "n": n, "diverged": diverged, "below": below})
    return pd.DataFrame(out)


def _values(runs: List[Dict[str, Any]], key: str, factor: float) -> List[float]:
    """Metric ``key`` of each of ``runs`` (their records' metrics) that has it, times ``factor``."""
    return [m[key] * factor for m in runs if m.get(key) is not None and not pd.isna(m.get(key))]


def _mean_sd(values: List[float]) -> Tuple[float, float]:
    """Their mean (NaN for none) and standard deviation over seeds (NaN for fewer than two)."""
    return (float(np.mean(values)) if values else float("nan"),
            float(np.std(values, ddof=1)) if len(values) > 1 else float("nan"))


def _cell_verdict(metric: Metric, values: List[float], paper: float, diverged: int,
                  below: str) -> Optional[Judgement]:
    """A cell's verdict (``Metric.verdict``): *not reproduced* where its every run diverged, and *not judged
    at this scale* where its runs (finished or diverged) ran below the paper's, at scale ``below``."""
    verdict = metric.verdict(values, paper)
    if diverged and not values and not math.isnan(paper):
        verdict = Judgement(Verdict.NOT_REPRODUCED, "diverged")
    if below and verdict is not None and verdict.ran:  # a smaller model or corpus: its level is not the paper's
        verdict = Judgement(Verdict.NOT_JUDGED, f"{below} scale", len(values))
    return verdict


def _extra(runs: List[Dict[str, Any]], extra: str, factor: float, digits: int) -> str:
    """An extra column's cell: metric ``extra`` over ``runs`` as mean ± sd; "not recorded" where runs ran
    but their records predate the metric."""
    values = _values(runs, extra, factor)
    if runs and not values:
        return "not recorded"
    return fmt_mean_sd(*_mean_sd(values), len(values), digits)


def label_columns(t: pd.DataFrame, rows: List[Row]) -> List[str]:
    """The label columns of comparison ``t`` (those before "paper") that ``rows`` have as labels."""
    return [k for k in t.columns[:list(t.columns).index("paper")] if k in rows[0].labels]


def trained_on(t: pd.DataFrame, rows: List[Row]) -> List[str]:
    """Where the runs of each cell of comparison ``t`` trained: each hardware and precision of their
    stretches ("NVIDIA H200, TF32 products"), "not yet run" where none has. A cell's runs are the rows
    with its labels (``t``'s label columns that the rows have)."""
    keys = label_columns(t, rows) if rows else []
    out = []
    for _, cell in t.iterrows():
        parts = _stretches(r.record for r in rows if r.record and all(r[k] == cell[k] for k in keys))
        out.append("; ".join(dict.fromkeys(f"{h}, {p}" for h, p in zip(parts["hardware"], parts["precision"])))
                   or "not yet run")
    return out


PARTED = 1e-6  # training curves further apart than this have parted (float32 rounding is far below it)


def _trained_as(record: Record) -> set:
    return {(part.get("hardware"), part.get("torch"), part.get("path")) for part in record.stretches}


def is_twin(row: Row) -> bool:
    """Whether ``row`` ran Moon's or our per-sequence cell with the paper's scaling: one of the twins
    ``moon_vs_ours_twins`` compares."""
    return (row.record is not None and row["sampling"] == "per-sequence" and row["scheme"] in ("moon", "semeniuta")
            and row.record.config.get("scaling") == "paper")


def moon_vs_ours_twins(rows: List[Row], by: Sequence[str], train: str, test: str, test_label: str,
                       test_shown: Callable[[float], float]) -> pd.DataFrame:
    """Moon's and our per-sequence cells (paper scaling), seed by seed in each cell of the labels ``by``.
    From a zero initial state the two train identically in exact arithmetic (the schemes chapter), so their
    training curves (each epoch's ``train``) agree to rounding: the schemes' own, and where the two runs were
    not trained alike (the same hardware, torch and layer path in every stretch), the machines' and paths'.
    A training that amplifies rounding parts them, and the first epoch they differ by more than ``PARTED``
    says when. Only the test metric (``test``, shown as ``test_shown`` of it), where Moon's (1 - p) compounds,
    differs by the schemes."""
    pick = {(*(r[k] for k in by), r["scheme"], r.seed): r.record for r in rows if is_twin(r)}
    apart = f"max |{train.replace('_', ' ')}, Moon - ours|"
    parted = f"first epoch apart by > {PARTED:g}"
    columns = [*by, "seed", "epochs", "trained alike", apart, parted, f"Moon {test_label}", f"ours {test_label}"]
    out = []
    for (*cell, scheme, seed), moon in sorted(pick.items()):
        ours = pick.get((*cell, "semeniuta", seed))
        if scheme != "moon" or ours is None:
            continue
        gaps = [(a["epoch"], abs(a[train] - b[train])) for a, b in zip(moon.curves, ours.curves)]
        out.append(dict(zip(columns, [*cell, seed, len(moon.curves),
                                      "yes" if _trained_as(moon) == _trained_as(ours) else "no",
                                      max(g for _, g in gaps), next((e for e, g in gaps if g > PARTED), "never"),
                                      test_shown(moon.metrics[test]), test_shown(ours.metrics[test])])))
    return pd.DataFrame(out, columns=columns)


def ran_cells(table: pd.DataFrame) -> pd.DataFrame:
    """The cells of a comparison (``compare``'s output) that have run (a diverged run counts: it is a result)."""
    return table[[bool(j is not None and j.ran) for j in table["verdict"]]]


def weighed(table: pd.DataFrame) -> pd.Series:
    """Which rows of a comparison (``compare``'s output) a table's verdict weighs: the paper's test
    numbers (not its validation or training rows, nor cells the paper does not have)."""
    rows = table["verdict"].notna()
    return rows & (table["split"].str.lower() == "test") if "split" in table else rows


def verdict_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a comparison that a table's verdict weighs (``weighed``), renumbered."""
    return table[weighed(table)].reset_index(drop=True)


def plot_against_paper(table: pd.DataFrame, metric: Optional["Metric"] = None):
    """Ours against the paper's, cell by cell: the test rows (``verdict_rows``) of a comparison that ran,
    our mean over seeds (± its sd where several) against the paper's number, coloured by the table's
    first label (its blocks), with Spearman's rank correlation: whether the cells keep the paper's
    order, whatever a smaller scale does to their level. The diagonal (ours = the paper's) is drawn
    where the two ranges meet. ``metric`` names the unit on the axes."""
    import matplotlib.pyplot as plt

    t = verdict_rows(table)
    t = t[t["n"] > 0]
    fig, ax = plt.subplots(figsize=(7.2, 4.2))  # the legend to the right of the axes
    unit = f", {metric.unit}" if metric else ""
    ax.set_xlabel(f"the paper's (test{unit})")
    ax.set_ylabel(f"ours (test{unit}, mean over seeds)")
    if len(t) < 2:
        ax.text(0.5, 0.5, "not yet run" if t.empty else "one cell run", ha="center", va="center",
                transform=ax.transAxes)
        return fig
    block = t.columns[0]
    for name, g in t.groupby(block, sort=False):
        ax.errorbar(g["paper"], g["mean"], yerr=g["sd"].fillna(0.0), fmt="o", capsize=2, label=str(name))
    lo, hi = max(t["paper"].min(), t["mean"].min()), min(t["paper"].max(), t["mean"].max())
    if lo < hi:
        ax.plot([lo, hi], [lo, hi], color="grey", linestyle=":", linewidth=1, label="ours = the paper's")
    rho = t["paper"].rank().corr(t["mean"].rank()) if len(t) > 2 else float("nan")  # 2 cells: always ±1
    ax.set_title(f"{len(t)} cells" + ("" if pd.isna(rho) else f": Spearman's rank correlation {rho:.2f}"), fontsize=10)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside the data
    fig.tight_layout()
    return fig


_FIGURES = [0]  # figures captioned so far on this page (a page is one kernel)


def figure_html(fig, caption: str):
    """A matplotlib figure (or a seaborn grid's) as a page's numbered figure, an IPython ``HTML`` object
    to display: "Fig. N." and ``caption``, which says what to see, beneath it. The figure is closed
    (shown once) and kept on the object as ``figure``. None where ``fig`` is."""
    import base64
    import io

    import matplotlib.pyplot as plt
    from IPython.display import HTML

    if fig is None:  # nothing to draw (no runs): no figure, no caption
        return None
    fig = getattr(fig, "figure", fig)  # a seaborn grid or an axes: its figure
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    _FIGURES[0] += 1
    png = base64.b64encode(buffer.getvalue()).decode()
    alt = html.escape(re.sub(r"<[^>]+>", "", caption))  # the caption's words, without its markup
    shown = HTML(f'<figure class="captioned"><img src="data:image/png;base64,{png}" alt="{alt}" '
                 f'style="max-width: 100%"/><figcaption><b>Fig. {_FIGURES[0]}.</b> {caption}</figcaption></figure>')
    shown.figure = fig
    return shown


def captioned_figure(fig, caption: str) -> None:
    """Display ``figure_html(fig, caption)``; nothing where ``fig`` is None (nothing to draw)."""
    from IPython.display import display

    if fig is not None:
        display(figure_html(fig, caption))


def plain_label(value: Any) -> Any:
    """A label as a table shows it: a float with no trailing zeros (a rate: 0.25, not 0.250000), a
    sequence as its items (15, 30, 60, not a Python tuple)."""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(plain_label(v)) for v in value)
    return f"{value:g}" if isinstance(value, float) else value


def config_table(config):
    """A run's config as a chapter shows it: the settings where it differs from the ``paper`` scale
    (``type(config).at_scale("paper")``: the paper's settings, or where the paper gives none, the authors'
    code's or ours), setting | at this scale | at paper, a value that stands for something else shown as
    what it stands for (``SHOWN_AS``: 0 training sentences is "all"); where none differs, a line that
    says so."""
    from IPython.display import Markdown

    ours, paper = config.to_dict(), type(config).at_scale("paper").to_dict()
    shown_as = getattr(type(config), "SHOWN_AS", {})

    def shown(k, v):
        return shown_as.get(k, {}).get(v, plain_label(v)) if isinstance(v, (int, float, str)) else plain_label(v)
    rows = [{"setting": k, f"at {ours['scale']}": shown(k, v), "at paper": shown(k, paper[k])}
            for k, v in ours.items() if k != "scale" and v != paper[k]]
    if not rows:
        return Markdown("Every setting is as at `paper` scale (the Known deviations below say which of them the "
                        "paper gives, and what its setup has beyond them).")
    return pd.DataFrame(rows).style.hide().set_caption(
        f"The settings where <code>{ours['scale']}</code> scale differs from <code>paper</code> scale. At "
        "<code>paper</code> scale each setting is the paper's, or where the paper gives none, the authors' code's "
        "or ours: the Known deviations below say which.")


def styled(table: pd.DataFrame, digits: int = 2):
    """A comparison (``compare``'s output) as the book shows it: without the row index and without
    the numbers behind ``ours`` (``BEHIND_OURS``), the paper's number and the delta to ``digits`` decimals,
    each verdict with its symbol; a verdict column that says the same of every row is said once, above."""
    shown = table.drop(columns=[c for c in BEHIND_OURS if c in table])
    judged = _judged_columns(shown)
    same = [c for c in judged if len(shown) > 1 and shown[c].map(str).nunique() == 1]
    shown = shown.drop(columns=same)
    numbers = [c for c in ("paper", "delta") if c in shown]
    labels = [c for c in shown.select_dtypes("number").columns if c not in numbers]  # a rate: 0.25, not 0.250000
    out = (shown.style.hide().format(precision=digits, na_rep="—", subset=numbers)
           .format(plain_label, na_rep="—", subset=labels)
           .format(lambda j: verdict_html(j) or "—", subset=[c for c in judged if c not in same]))
    if same:
        out = out.set_caption("; ".join(f"{c}, every row: {verdict_html(table[c].iloc[0])}" for c in same))
    return out


def _judged_columns(df: pd.DataFrame) -> List[str]:
    """The columns of ``df`` that hold verdicts (``Judgement``s or ``Verdict``s)."""
    return [c for c in df.columns if df[c].map(lambda x: isinstance(x, (Judgement, Verdict))).any()]


def book_tables() -> None:
    """How the book's notebooks show a DataFrame: every column in full, without row numbers (a default
    RangeIndex says nothing; a labelled index is kept), a missing value as "—", not NaN, and each number
    as it was rounded, not padded to its column's longest (2.43 beside -0.057, not 2.4300)."""
    pd.set_option("display.max_colwidth", None)
    try:
        from IPython import get_ipython
    except ImportError:  # not in a notebook
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, _book_html)


def _book_html(df: pd.DataFrame) -> str:
    """``book_tables``' HTML of a DataFrame: a column of verdicts with their symbols and colours."""
    judged = {c: lambda j: verdict_html(j) or "—" for c in _judged_columns(df)}
    plain = {c: lambda x: "—" if x is None else html.escape(str(x)) for c in df.columns
             if c not in judged and df[c].dtype == object}
    return df.to_html(index=not isinstance(df.index, pd.RangeIndex), na_rep="—", float_format=_as_rounded,
                      formatters={**plain, **judged}, escape=False)


def _as_rounded(x: float) -> str:
    """A table's number as it was rounded: a whole number in full, else to 6 significant digits (the
    tables round theirs to fewer), without the trailing zeros a column's common format would add."""
    return f"{x:.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.6g}"
