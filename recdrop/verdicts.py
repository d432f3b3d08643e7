"""The book's verdicts: the four it gives a table's cells and the paper's claims alike (``Verdict``), a
verdict with what is said beside it (``Judgement``), and a claim of the paper judged on our runs seed by
seed against the seed noise (``Claim``, ``claim_verdict``)."""
from __future__ import annotations

import html
import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd


MIN_SEEDS_TO_JUDGE = 3  # a verdict is judged against the seed noise only where this many seeds ran


class Verdict(str, Enum):
    """The book's four verdicts, for a table's cells and the paper's claims alike. The number of seeds
    and everything else are said beside it (``Judgement``)."""

    REPRODUCED = "reproduced"
    WITHIN_NOISE = "within seed noise"
    NOT_REPRODUCED = "not reproduced"
    NOT_JUDGED = "not judged at this scale"

    def __str__(self) -> str:
        return self.value

    @property
    def symbol(self) -> str:
        return _LOOK[self][0]

    @property
    def colour(self) -> str:
        return _LOOK[self][1]

    @property
    def meaning(self) -> str:
        return _LOOK[self][2]


_LOOK = {  # symbol, colour, what it means
    Verdict.REPRODUCED: ("✔", "#1a7f37", "a cell within the table's tolerance of the paper's number; a claim "
                         f"that holds on the mean and in every one of {MIN_SEEDS_TO_JUDGE} seeds or more"),
    Verdict.WITHIN_NOISE: ("≈", "#b35900", "a cell outside the tolerance by less than two standard errors of our "
                           "mean; a claim the seeds disagree on, or a difference within the seed noise"),
    Verdict.NOT_REPRODUCED: ("✘", "#c62828", "a cell further out than that; a claim that fails on the mean and "
                             f"in every one of {MIN_SEEDS_TO_JUDGE} seeds or more"),
    Verdict.NOT_JUDGED: ("·", "#6e7781", "not yet run, a run it needs diverged, a cell outside the tolerance on "
                                         f"one seed (it says so), a claim run on fewer than {MIN_SEEDS_TO_JUDGE} seeds "
                                         "(it says whether it holds on them), or a smaller model or corpus "
                                         "than the paper's, whose numbers are not comparable with its"),
}


class Judgement:
    """A verdict and what is said beside it, e.g. "reproduced (3 of 3 seeds)": its ``verdict``, the
    ``seeds`` it was judged on, and whether any of what it needs has run (``ran``). It prints, and
    compares equal to, its text; a table keeps it whole (an object, not a string, to pandas)."""

    __slots__ = ("verdict", "detail", "seeds", "ran")

    def __init__(self, verdict: Verdict, detail: str = "", seeds: int = 0, ran: bool = True):
        self.verdict, self.detail, self.seeds, self.ran = Verdict(verdict), detail, seeds, ran

    def __str__(self) -> str:
        return f"{self.verdict.value} ({self.detail})" if self.detail else self.verdict.value

    def __repr__(self) -> str:
        return repr(str(self))

    def __eq__(self, other) -> bool:
        return str(self) == str(other) if isinstance(other, (str, Judgement)) else NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def too_few_seeds(self) -> bool:
        """Run, on fewer seeds than a claim is judged on against the seed noise."""
        return 0 < self.seeds < MIN_SEEDS_TO_JUDGE

    @property
    def against_noise(self) -> bool:
        """Judged against the seed noise: on enough seeds, not merely not judged."""
        return self.verdict is not Verdict.NOT_JUDGED and self.seeds >= MIN_SEEDS_TO_JUDGE

    def noted(self, note: str) -> "Judgement":
        """The same verdict with ``note`` added to what is said beside it."""
        return Judgement(self.verdict, f"{self.detail}; {note}" if self.detail else note, self.seeds, self.ran)

    def not_judged(self, why: str) -> "Judgement":
        """Not judged, for ``why``, saying what it would have been."""
        return Judgement(Verdict.NOT_JUDGED, f"{why}: {self}", self.seeds, self.ran)


NOT_RUN = Judgement(Verdict.NOT_JUDGED, "not yet run", ran=False)


def verdict_of(judged: Any) -> Verdict:
    """The verdict of a ``Judgement`` (or a ``Verdict``); anything else is a bug, not a verdict to guess."""
    if isinstance(judged, Judgement):
        return judged.verdict
    if isinstance(judged, Verdict):
        return judged
    raise TypeError(f"not a verdict: {judged!r} (a Judgement or a Verdict is; a verdict is never read from words)")


@dataclass(frozen=True)
class Claim:
    """A claim of the paper on a table: its words, the cells it reads (keys of a seed's values,
    ``seed_values``) and ``holds``, whether it holds on values of those cells."""

    text: str
    cells: Tuple[Any, ...]
    holds: Callable[[Dict[Any, float]], bool]

    def on(self, values: Dict[Any, float]) -> bool:
        """Whether it holds on ``values``, which must have every cell it names; it is given those only,
        so a cell it reads but does not name is its own error, said as such."""
        return bool(self.holds(_OwnCells(self, {c: values[c] for c in self.cells})))

    def complete_seeds(self, by_seed: Dict[int, Dict[Any, float]]) -> Dict[int, Dict[Any, float]]:
        """The seeds that have every cell it names: those it is judged on (``claim_verdict``)."""
        return {seed: v for seed, v in by_seed.items() if set(self.cells) <= v.keys()}


class _OwnCells(dict):
    """A claim's own cells: a lookup of any other names the claim."""

    def __init__(self, claim: Claim, values: Dict[Any, float]):
        super().__init__(values)
        self.claim = claim

    def __missing__(self, key):
        raise KeyError(f"the claim {self.claim.text!r} reads {key!r}, which is not among the cells it names")


def means_over(seeds: List[Dict[Any, float]]) -> Dict[Any, float]:
    """The mean of each key over the seeds' values that have it."""
    return {k: float(np.mean([v[k] for v in seeds if k in v])) for k in set().union(*seeds)}


def claim_outcomes(claim: Claim, by_seed: Dict[int, Dict[Any, float]]) -> Tuple[Optional[bool], List[bool]]:
    """(``claim`` on our means over the seeds that have every cell it names, or None where no seed
    has; ``claim`` in each of those seeds)."""
    complete = list(claim.complete_seeds(by_seed).values())
    if not complete:
        return None, []
    return claim.on(means_over(complete)), [claim.on(v) for v in complete]


def claim_verdict(claim: Claim, by_seed: Dict[int, Dict[Any, float]]) -> Judgement:
    """``claim`` judged on our runs. Each seed that has every cell it names is a replication of it:

    - *reproduced*: with ``MIN_SEEDS_TO_JUDGE`` seeds or more, it holds on the means over those seeds
      and in each of them;
    - *not reproduced*: with that many seeds, it fails on the means and in each of them;
    - *within seed noise*: with that many seeds, the seeds disagree (it says how many hold, and whether it
      holds on the means);
    - *not judged at this scale*: fewer seeds than that, which cannot be judged against the seed noise
      (it says whether the claim holds on their means); or no seed has every cell it names, or a run of
      one of them diverged (``SeedValues.diverged``).

    The number of seeds is said beside the verdict. The means are over the seeds that count, so that they and the
    seed count agree; it says how many more seeds ran some of its cells but not all and were left out
    (a table's means over every seed of each cell can then read otherwise)."""
    cells = set(claim.cells)
    on_means, outcomes = claim_outcomes(claim, by_seed)
    if on_means is None:
        diverged = any(keys & cells for keys in getattr(by_seed, "diverged", {}).values())
        return Judgement(Verdict.NOT_JUDGED, "a run it needs diverged") if diverged else NOT_RUN
    n = len(outcomes)
    partial = sum(1 for v in by_seed.values() if v.keys() & cells and not cells <= v.keys())
    note = f"; {partial} more seed{'s lack' if partial > 1 else ' lacks'} a cell it needs" if partial else ""
    if n < MIN_SEEDS_TO_JUDGE:
        on = "1 seed" if n == 1 else f"the means of {n} seeds"
        return Judgement(Verdict.NOT_JUDGED, f"{'holds' if on_means else 'fails'} on {on}, too few to judge against "
                                             f"seed noise{note}", n)
    verdict = Verdict.REPRODUCED if on_means else Verdict.NOT_REPRODUCED
    if all(outcomes) if on_means else not any(outcomes):
        return Judgement(verdict, f"{n} of {n} seeds{note}", n)
    return Judgement(Verdict.WITHIN_NOISE, f"holds in {sum(outcomes)} of {n} seeds, "
                                           f"{'holds' if on_means else 'fails'} on the means{note}", n)


def verdict_html(judged: Any) -> str:
    """A verdict as a page shows it: its symbol and words in its colour ("" where there is none)."""
    if judged is None or (isinstance(judged, float) and math.isnan(judged)):
        return ""
    v = verdict_of(judged)
    return f'<span class="verdict" style="color: {v.colour}">{v.symbol} {html.escape(str(judged))}</span>'


def verdict_tally(judged: Iterable[Any], coloured: bool = False) -> str:
    """How many of ``judged`` (``Judgement``s) have each verdict, in ``Verdict``'s order:
    "3 ✔ reproduced, 1 ≈ within seed noise"; with ``coloured``, HTML with each in its colour."""
    count = Counter(verdict_of(j) for j in judged)
    if coloured:
        return ", ".join(f'<span class="verdict" style="color: {v.colour}">{count[v]} {v.symbol} {v.value}</span>'
                         for v in Verdict if count[v])
    return ", ".join(f"{count[v]} {v.symbol} {v.value}" for v in Verdict if count[v])


def check_claims(claims: Sequence[Claim], paper_vals: Dict[Any, float], ours_by_seed: Dict[int, Dict[Any, float]],
                 section: str) -> pd.DataFrame:
    """Each claim evaluated on the paper's numbers and on ours (``claim_verdict``)."""
    out = [(c.text, "holds" if c.on(paper_vals) else "does not hold", claim_verdict(c, ours_by_seed))
           for c in claims]
    return pd.DataFrame(out, columns=[f"claim (paper Sec. {section})", "on the paper's numbers", "on ours"])


def claim_verdicts(table: pd.DataFrame) -> Dict[str, Judgement]:
    """Claim -> its verdict on ours, from an experiment's claims table: every one names the claim in its
    first column ("claim (paper Sec. ...)", "prediction (paper Sec. 3)") and the verdict in "on ours"."""
    return dict(zip(table.iloc[:, 0], table["on ours"]))
