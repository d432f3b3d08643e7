"""Table 2, the claims of Section 4.2 and Figure 2, from the stored runs of the word-level language
models (``word_lm``: their config and task)."""
from __future__ import annotations

import pandas as pd

from ..report import Metric, seed_values
from ..verdicts import Claim, NOT_RUN, check_claims, claim_verdict, means_over
from .lm_tables import (CELL_KEYS, FORWARD, RATES, SCHEMES, best, block, fit_table, lm_table, lm_table_wide,
                        paper_values, pilot_table, plot_learning_curves, plot_run_curves, seed_cell_values)


# -- Table 2, the claims of Sec. 4.2, Figure 2 ------------------------------------------------------
# a cell within 5% of the paper's perplexity is reproduced
METRIC = Metric("ppl", digits=1, tolerance=0.05, relative=True, higher_is_better=False)
EXTRAS = (("ours, authors' ppl", "{split}_ppl_authors", ("Valid", "Test")),
          ("ours, best-valid model", "best_test_ppl", ("Test",)))


def table2(rows) -> "pd.DataFrame":
    """Long form: one row per cell and split, paper | ours (mean ± sd, n) | delta % | verdict.

    ``ours`` is the standard perplexity (exp of the mean token NLL) of the final model, as the
    authors test; the authors' own perplexity and the best-validation model's are beside it."""
    return lm_table(rows, 2, METRIC, EXTRAS)


def table2_wide(rows):
    """The paper's layout, ours beside the paper's, the best of each column and block in bold."""
    return lm_table_wide(table2(rows), METRIC)


def claims(rows) -> "pd.DataFrame":
    """The observations (i)-(v) of Sec. 4.2, each evaluated on the paper's Table 2 and on ours
    (test perplexity of the final model)."""
    wo, w = FORWARD
    none = (w, "none", 0.0, "-")

    def settings(ppl, test):
        """How many of the 4 (rate, forward) settings satisfy ``test(ppl, forward, rate)``."""
        return sum(bool(test(ppl, f, r)) for f in FORWARD for r in RATES)

    # (i) in each block apart: a block complete at a larger scale is judged there (the landing page judges
    # each claim at the largest scale where its cells have run)
    checks = [Claim(f"(i) ours (Semeniuta) beats Moon and Gal: best cell of each scheme, {f}",
                    block(f, "semeniuta", "moon", "gal"),
                    lambda p, f=f: best(p, f, "semeniuta") < min(best(p, f, "moon"), best(p, f, "gal")))
              for f in FORWARD] + [
        # The paper's own numbers support (ii) without forward dropout only; with it they show the reverse.
        Claim("(ii) Moon: per-step beats per-sequence, without forward dropout (both rates)", block(wo, "moon"),
              lambda p: all(p[(wo, "moon", r, "per-step")] < p[(wo, "moon", r, "per-sequence")] for r in RATES)),
        Claim("(iii) ours: per-step and per-sequence similar (within 5% in at least 3 of 4 settings)",
              block(wo, "semeniuta") + block(w, "semeniuta"),
              lambda p: settings(p, lambda p, f, r: abs(p[(f, "semeniuta", r, "per-step")] /
                                                        p[(f, "semeniuta", r, "per-sequence")] - 1) <= 0.05) >= 3),
        Claim("(iv) forward dropout alone beats every recurrent dropout alone", [none] + block(wo, *SCHEMES),
              lambda p: p[none] < min(p[c] for c in block(wo, *SCHEMES))),
        Claim("(v) with forward dropout, ours and Gal both improve on forward dropout alone, ours more",
              block(w, "semeniuta", "gal") + [none],
              lambda p: best(p, w, "semeniuta") < best(p, w, "gal") < p[none]),
    ]
    return check_claims(checks, paper_values(2), seed_cell_values(rows, "test_ppl"), "4.2")


def plot_figure2(rows):
    """Figure 2: training (solid) and validation (dashed) perplexity per epoch, without and with
    0.25 per-step Semeniuta dropout (no forward dropout)."""
    return plot_learning_curves(rows, "ppl", [
        (("none", 0.0, "-"), "tab:blue", "no dropout"),
        (("semeniuta", 0.25, "per-step"), "tab:red", "0.25 per-step recurrent dropout (ours)")],
        "perplexity", log=True)


def fit(rows) -> "pd.DataFrame":
    """Per run: does it over-fit, has it converged (``lm_tables.fit_table``)."""
    return fit_table(rows, "ppl")


def pilot(rows) -> "pd.DataFrame":
    """The pilot's test of a scale: is the gap between no dropout and the paper's best cell larger
    than the seed noise (``lm_tables.pilot_table``)?"""
    return pilot_table(rows, "ppl", 2, METRIC.digits)


def plot_runs(rows):
    """Learning curves of every cell run without forward dropout (for a scale whose grid is partial)."""
    return plot_run_curves(rows, "ppl", "perplexity", log=True)


def figure2_row(rows, scale):
    """Figure 2's row of the landing page, from the runs at ``scale``: with 0.25 per-step dropout (ours),
    the final training perplexity is higher and the validation perplexity lower than without (judged
    against the seed noise, ``verdicts.claim_verdict``, in ``judged``);
    ``runs``, the rows of the two cells the figure draws (for their stamp: hardware and precision)."""
    wo = next(iter(FORWARD))
    none, ours = (wo, "none", 0.0, "-"), (wo, "semeniuta", 0.25, "per-step")
    by_seed = seed_values(rows, lambda r, m: {(r.cell(CELL_KEYS), split): m.get(f"{split}_ppl")
                                              for split in ("train", "valid")})

    keys = [(cell, split) for cell in (ours, none) for split in ("train", "valid")]
    claim = Claim("Figure 2", keys, lambda v: v[(ours, "train")] > v[(none, "train")] and
                  v[(ours, "valid")] < v[(none, "valid")])
    complete = claim.complete_seeds(by_seed)
    if not complete:
        found, judged = "not yet run", NOT_RUN
    else:
        mean = means_over(list(complete.values()))
        over = f"seed {next(iter(complete))}" if len(complete) == 1 else f"mean of {len(complete)} seeds"
        judged = claim_verdict(claim, by_seed)
        found = (f"train {mean[(ours, 'train')]:.1f} vs {mean[(none, 'train')]:.1f}, valid {mean[(ours, 'valid')]:.1f} "
                 f"vs {mean[(none, 'valid')]:.1f} ({over}): {judged}")
    figure, subject = "Figure 2", "learning curves, word-level PTB"
    return {"figure": figure, "subject": subject, "what": f"{figure}: {subject}", "scale": scale or "—",
            "the paper's best cell": "with dropout: higher training, lower validation perplexity (its slower "
                                     "convergence not judged)", "ours": found,
            "judged": judged, "runs": [r for r in rows if r.cell(CELL_KEYS) in (ours, none)]}
