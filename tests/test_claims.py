"""Claims judged against seed noise (verdicts.claim_verdict), Table 1's claims, and the landing page's
list of claims, each at the largest scale where it ran."""

import pandas as pd
import pytest

from made import record, row, stored
from recdrop.experiments import temporal_order_chapter
from recdrop.report import seed_values, stored_seeds
from recdrop.store import RunStore
from recdrop.summary import BEYOND, QUICK, landing_claims, study_claims
from recdrop.sweep import grid_rows
from recdrop.verdicts import Claim, NOT_RUN, Verdict, claim_verdict, verdict_of


a_beats_b = Claim("a beats b", ("a", "b"), lambda v: v["a"] < v["b"])


@pytest.mark.parametrize("by_seed, verdict", [
    ({0: {"a": 1, "b": 2}, 1: {"a": 1, "b": 3}, 2: {"a": 2, "b": 3}}, "reproduced (3 of 3 seeds)"),
    ({0: {"a": 3, "b": 2}, 1: {"a": 4, "b": 3}, 2: {"a": 5, "b": 3}}, "not reproduced (3 of 3 seeds)"),
    # holds on the means (2 < 3) but not in seed 2: the seeds disagree
    ({0: {"a": 1, "b": 3}, 1: {"a": 1, "b": 3}, 2: {"a": 4, "b": 3}},
     "within seed noise (holds in 2 of 3 seeds, holds on the means)"),
    # fails on the means (3 > 2.67) though it holds in seed 0
    ({0: {"a": 1, "b": 2}, 1: {"a": 4, "b": 3}, 2: {"a": 4, "b": 3}},
     "within seed noise (holds in 1 of 3 seeds, fails on the means)"),
    ({0: {"a": 1, "b": 2}, 1: {"a": 1, "b": 2}},
     "not judged at this scale (holds on the means of 2 seeds, too few to judge against seed noise)"),
    ({0: {"a": 3, "b": 2}}, "not judged at this scale (fails on 1 seed, too few to judge against seed noise)"),
    ({0: {"a": 1}, 1: {"a": 1}}, NOT_RUN),
    ({}, NOT_RUN),
])
def test_a_claim_is_reproduced_or_not_against_the_noise_only_when_every_one_of_3_seeds_agrees(by_seed, verdict):
    assert claim_verdict(a_beats_b, by_seed) == verdict


def test_a_seed_without_every_cell_of_a_claim_does_not_count():
    by_seed = {0: {"a": 1, "b": 2}, 1: {"a": 1, "b": 2}, 2: {"a": 1, "b": 2}, 3: {"a": 9}}
    # seed 3 lacks b, and its a is left out: the verdict says so
    assert claim_verdict(a_beats_b, by_seed) == "reproduced (3 of 3 seeds; 1 more seed lacks a cell it needs)"
    assert claim_verdict(a_beats_b, {0: {"a": 1, "b": 2}, 1: {"b": 2}, 2: {"a": 1}}) == (
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise; 2 more seeds lack a cell "
        "it needs)")
    assert claim_verdict(a_beats_b, {0: {"a": 1, "b": 2}, 1: {"c": 2}}) == (  # seed 1 ran none of its cells
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise)")
    assert claim_verdict(a_beats_b, {0: {"a": 1}, 1: {"b": 2}}) == NOT_RUN  # no seed has both cells


a_beats_b_and_c = Claim("a beats b and c", ("a", "b", "c"), lambda v: v["a"] < v["b"] and v["a"] < v["c"])


def test_a_seed_counts_only_with_every_cell_its_claim_names_whatever_its_outcome():
    # seeds 1 and 2 fail at "a beats b" before c would be read, but they lack c: they do not count, so
    # that no seed is chosen by its outcome (one that fails early), which would lean the verdict
    by_seed = {0: {"a": 1, "b": 2, "c": 3}, 1: {"a": 5, "b": 2}, 2: {"a": 5, "b": 2}}
    assert claim_verdict(a_beats_b_and_c, by_seed) == (
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise; 2 more seeds lack a cell "
        "it needs)")
    by_seed[1]["c"] = by_seed[2]["c"] = 3.0  # every cell run: all three count, and they disagree
    assert claim_verdict(a_beats_b_and_c, by_seed) == "within seed noise (holds in 1 of 3 seeds, fails on the means)"


def test_seed_values_leave_out_missing_and_nan_values():
    rows = [row(seed=0, cell="x", record={"metrics": {"m": 1.0}}),
            row(seed=1, cell="x", record={"metrics": {"m": float("nan")}}),
            row(seed=0, cell="y"),
            row(seed=2, cell="y", record={"metrics": {}})]
    assert seed_values(rows, lambda r, m: {r["cell"]: m.get("m")}) == {0: {"x": 1.0}}


def moon_per_step_later(r) -> int:
    return 5 if (r["scheme"], r["sampling"]) == ("moon", "per-step") else 2


def table1_rows(accuracy, seeds=(0, 1, 2), reached_at=moon_per_step_later):
    """Table 1's reduced grid with every cell run: ``accuracy(row) -> (train, test)``; the test accuracy
    is at chance before epoch ``reached_at(row)`` and at its final value from then on."""
    rows = grid_rows("temporal_order", "reduced", list(seeds), store=RunStore("/nonexistent"))
    for r in rows:
        train, test = accuracy(r)
        r.stored = record(metrics={"train_acc": train, "test_acc": test, "train_cell_norm": 2.0, "test_cell_norm": 1.0},
                          curves=[{"epoch": e, "test_acc": test if e >= reached_at(r) else 0.25} for e in range(1, 8)])
    return rows


def claims_of(rows):
    return dict(temporal_order_chapter.claims(rows).itertuples(index=False))


def test_table1_claims_against_seed_noise():
    def paper_like(r):  # Moon per-sequence at chance at test (medium: worse); Moon per-step fails medium
        if r["scheme"] == "moon" and r["sampling"] == "per-sequence":
            return 1.0, 0.2 if r["length"] == "medium" else 0.25
        if r["scheme"] == "moon" and r["length"] == "medium":
            return 0.25, 0.25
        return 1.0, 1.0

    verdicts = claims_of(table1_rows(paper_like))
    assert set(verdicts.values()) == {"reproduced (3 of 3 seeds)"}

    def seed2_differs(r):  # Moon per-sequence, short: above chance at test in seed 2 only
        train, test = paper_like(r)
        if (r["scheme"], r["sampling"], r["length"], r.seed) == ("moon", "per-sequence", "short", 2):
            test = 0.9
        return train, test

    claim = "short: Moon per-sequence learns the task in training but fails at test (at chance or below: at most 35%)"
    assert claims_of(table1_rows(seed2_differs))[claim] == (
        "within seed noise (holds in 2 of 3 seeds, fails on the means)")
    assert claims_of(table1_rows(paper_like, seeds=(0,)))[claim] == (
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise)")


def test_moon_per_step_must_solve_the_short_length_later_than_the_lstm_without_dropout():
    claim = ("short: Moon per-step solves it, later than the LSTM without dropout (only *later* is judged, not the "
             "paper's 10-20 times more iterations; the chapter's table of first solved epochs gives ours)")
    assert claims_of(table1_rows(lambda r: (1.0, 1.0)))[claim] == "reproduced (3 of 3 seeds)"
    assert claims_of(table1_rows(lambda r: (1.0, 1.0), reached_at=lambda r: 3))[claim] == (
        "not reproduced (3 of 3 seeds)")

    def later_in_seed_0_only(r):
        return 5 if (r["scheme"], r["sampling"], r.seed) == ("moon", "per-step", 0) else 3
    assert claims_of(table1_rows(lambda r: (1.0, 1.0), reached_at=later_in_seed_0_only))[claim] == (
        "within seed noise (holds in 1 of 3 seeds, holds on the means)")


def test_how_much_later_moon_per_step_solves_it_is_shown_seed_by_seed():
    rows = table1_rows(lambda r: (1.0, 0.25) if (r["scheme"], r["length"]) == ("moon", "medium") else (1.0, 1.0))
    t = temporal_order_chapter.solved_epochs(rows).set_index(["length", "cell"])
    assert t.loc[("short", "no dropout"), "first epoch solved at test"] == "2, 2, 2"
    assert t.loc[("short", "Moon per-step"), "first epoch solved at test"] == "5, 5, 5"
    assert t.loc[("short", "Moon per-step"), "× the LSTM's without dropout"] == "2.5, 2.5, 2.5"  # the paper: 10-20
    assert t.loc[("medium", "Moon per-step"), "first epoch solved at test"] == "never, never, never"
    assert t.loc[("medium", "Moon per-step"), "× the LSTM's without dropout"] == "—"
    assert t.loc[("short", "no dropout"), "× the LSTM's without dropout"] == "—"


def test_the_inverted_scaling_claim_reads_moons_per_sequence_cells_only():
    """As the memory-loss chapter checks it: per-step masks make a unit forget whenever it is dropped."""
    rows = table1_rows(lambda r: (1.0, 1.0))
    for r in rows:  # the per-step inverted cells: no larger in training than at test
        if (r["scheme"], r["sampling"], r["scaling"]) == ("moon", "per-step", "inverted"):
            r.stored = record(metrics={**r.record.metrics, "train_cell_norm": 1.0, "test_cell_norm": 1.0},
                              curves=r.record.curves)
    claim = ("Moon per-sequence, inverted scaling (Sec. 3, after Eq. 18): the cell state is larger in training "
             "than at test")
    assert claims_of(rows)[claim] == "reproduced (3 of 3 seeds)"
    for r in rows:
        if (r["scheme"], r["sampling"], r["scaling"], r["length"]) == ("moon", "per-sequence", "inverted", "medium"):
            r.stored = record(metrics={**r.record.metrics, "train_cell_norm": 1.0}, curves=r.record.curves)
    assert claims_of(rows)[claim] == "not reproduced (3 of 3 seeds)"


def test_table1_claims_are_not_judged_where_the_lstm_without_dropout_fails_a_seed():
    def baseline_fails_medium_in_seed_1(r):
        if (r["scheme"], r["length"], r.seed) == ("none", "medium", 1):
            return 0.3, 0.3
        return 1.0, 1.0

    verdicts = claims_of(table1_rows(baseline_fails_medium_in_seed_1))
    medium = [v for c, v in verdicts.items() if c.startswith("medium")]
    assert len(medium) == 5 and all(verdict_of(v) is Verdict.NOT_JUDGED and "does not solve" in str(v) for v in medium)
    assert verdicts["short: Gal solves it, both samplings"] == "reproduced (3 of 3 seeds)"


def test_table1_claims_wait_for_the_lstm_without_dropout_at_their_length():
    rows = [r for r in table1_rows(lambda r: (1.0, 1.0)) if (r["scheme"], r["length"]) != ("none", "medium")]
    verdicts = claims_of(rows)
    medium = [v for c, v in verdicts.items() if c.startswith("medium")]
    assert len(medium) == 5 and set(medium) == {NOT_RUN}
    assert verdicts["short: Gal solves it, both samplings"] == "reproduced (3 of 3 seeds)"


def store_record(store, grid_row, metrics):
    stored(store, "sentiment", grid_row, metrics=metrics)


def test_landing_claims_show_each_claim_at_the_largest_scale_where_it_ran(tmp_path):
    from recdrop.experiments.sentiment import TEST_SETS

    store = RunStore(tmp_path)
    claims = landing_claims(store)
    assert set(claims["on ours"]) == {NOT_RUN} and set(claims["scale"]) == {"none stored"}
    paper = ~claims["table"].str.startswith(BEYOND)
    assert set(claims[paper]["table"]) == {f"Table {i}" for i in range(1, 6)}
    orphan = grid_rows("sentiment", "paper", [0], store=store)[0]
    orphan.run_id = "0123456789ab"
    store_record(store, orphan, {})  # a record of no cell (a scale since redefined)
    assert set(landing_claims(store).set_index("table").loc["Table 5", "scale"]) == {"none stored"}

    # the RNN cells at quick, seeds 0-2: dropout costs 1 F1 point on every test set
    for r in grid_rows("sentiment", "quick", [0, 1, 2], store=store):
        if r["cell"] == "RNN":
            store_record(store, r, {f"test_f1:{t}": 60.0 - (1.0 if r["rate"] else 0.0) for t in TEST_SETS})
    # and one cell at paper scale: the largest scale with runs, where no claim has all its cells yet
    store_record(store, grid_rows("sentiment", "paper", [0], store=store)[0], {f"test_f1:{t}": 50.0 for t in TEST_SETS})
    assert stored_seeds("sentiment", "quick", store) == [0, 1, 2]

    sentiment = landing_claims(store).set_index("table").loc["Table 5"]
    by_claim = {claim: (scale, verdict) for claim, scale, verdict in
                zip(sentiment["claim"], sentiment["scale"], sentiment["on ours"])}
    assert by_claim["recurrent dropout lowers the vanilla RNN's F1 (mean over the test sets)"] == (
        "quick", f"not judged at this scale ({QUICK}: reproduced (3 of 3 seeds))")  # and why quick cannot test it
    assert by_claim["recurrent dropout raises the LSTM's and the GRU's F1 (mean over the test sets)"] == (
        "paper", NOT_RUN)  # run nowhere: at the largest scale with runs

    # the RNN at paper scale, seed 0: the claim holds there on one seed, and the landing page says so; quick's
    # verdict on 3 seeds is no test of it, and is not added
    for r in grid_rows("sentiment", "paper", [0], store=store):
        if r["cell"] == "RNN" and r["rate"]:
            store_record(store, r, {f"test_f1:{t}": 49.0 for t in TEST_SETS})
    sentiment = landing_claims(store).set_index("claim")
    assert tuple(sentiment.loc["recurrent dropout lowers the vanilla RNN's F1 (mean over the test sets)",
                               ["scale", "on ours"]]) == (
        "paper", "not judged at this scale (holds on 1 seed, too few to judge against seed noise)")


def test_figure2_row_judges_the_curves_against_seed_noise():
    from recdrop.experiments import word_lm_chapter

    rows = grid_rows("word_lm", "quick", [0, 1, 2], store=RunStore("/nonexistent"))
    picked = [r for r in rows if r["forward"] == "without forward dropout" and
              (r["scheme"], r["rate"], r["sampling"]) in (("none", 0.0, "-"), ("semeniuta", 0.25, "per-step"))]
    assert word_lm_chapter.figure2_row(picked, "quick")["ours"] == "not yet run"
    for r in picked:  # with dropout: higher training, lower validation perplexity, except in seed 2's training
        ours = r["scheme"] == "semeniuta"
        train = 120.0 if ours and r.seed != 2 else 100.0 if not ours else 90.0
        r.stored = record(metrics={"train_ppl": train, "valid_ppl": 140.0 if ours else 150.0})
    row = word_lm_chapter.figure2_row(picked, "quick")
    assert row["ours"] == ("train 110.0 vs 100.0, valid 140.0 vs 150.0 (mean of 3 seeds): within seed noise "
                           "(holds in 2 of 3 seeds, holds on the means)")
    assert row["judged"] == "within seed noise (holds in 2 of 3 seeds, holds on the means)"  # not in every seed
    one = [r for r in picked if r.seed == 1]
    assert word_lm_chapter.figure2_row(one, "quick")["ours"] == (
        "train 120.0 vs 100.0, valid 140.0 vs 150.0 (seed 1): not judged at this scale (holds on 1 seed, too few to "
        "judge against seed noise)")
    assert word_lm_chapter.figure2_row(one, "quick")["judged"].against_noise is False
    for r in picked:
        r.stored = record(metrics={"train_ppl": 120.0 if r["scheme"] == "semeniuta" else 100.0,
                                   "valid_ppl": 140.0 if r["scheme"] == "semeniuta" else 150.0})
    assert word_lm_chapter.figure2_row(picked, "quick")["judged"] == "reproduced (3 of 3 seeds)"


def test_a_claim_that_stops_early_in_one_seed_still_needs_every_cell_it_names():
    both_grow = Claim("both grow", [(cell, phase) for cell in ("a", "b") for phase in ("train", "test")],
                      lambda v: all(v[(cell, "train")] > v[(cell, "test")] for cell in ("a", "b")))  # short-circuits
    by_seed = {0: {("a", "train"): 2, ("a", "test"): 1},  # b not yet run
               1: {("a", "train"): 1, ("a", "test"): 2},  # b not yet run; a does not grow, so b is never read
               2: {("a", "train"): 2, ("a", "test"): 1}}
    assert claim_verdict(both_grow, by_seed) == NOT_RUN
    for seed in by_seed:
        by_seed[seed].update({("b", "train"): 2, ("b", "test"): 1})
    assert claim_verdict(both_grow, by_seed) == "within seed noise (holds in 2 of 3 seeds, holds on the means)"


def test_a_claim_that_reads_a_cell_it_does_not_name_is_its_own_error():
    sloppy = Claim("a below c", ("a",), lambda v: v["a"] < v["c"])
    with pytest.raises(KeyError, match="'a below c' reads 'c', which is not among the cells it names"):
        claim_verdict(sloppy, {0: {"a": 1.0, "c": 2.0}})


def test_seed_values_keep_the_keys_of_diverged_runs_apart():
    where = {"epoch": 3, "batch": 1, "loss": "nan"}
    rows = [row(seed=0, cell="a", record={"metrics": {"m": 1.0}}),
            row(seed=0, cell="b", diverged=where),
            row(seed=1, cell="b")]  # not yet run: not diverged
    by_seed = seed_values(rows, lambda r, m: {r["cell"]: m.get("m")})
    assert by_seed == {0: {"a": 1.0}} and by_seed.diverged == {0: {"b"}}


def test_a_claim_that_needs_a_diverged_run_cannot_be_judged():
    where = {"epoch": 3, "batch": 1, "loss": "nan"}

    def one(cell, seed, value=None, diverged=False):
        return row(seed=seed, cell=cell, record=None if value is None else {"metrics": {"m": value}},
                   diverged=where if diverged else None)

    def verdict(rows):
        return claim_verdict(a_beats_b, seed_values(rows, lambda r, m: {r["cell"]: m.get("m")}))

    assert verdict([one("a", 0, 1.0), one("b", 0, diverged=True)]) == (
        "not judged at this scale (a run it needs diverged)")
    assert verdict([one("a", 0, 1.0), one("b", 0)]) == NOT_RUN  # b not run: nothing diverged
    # a seed that has both cells is judged; the diverged seed is left out, as a seed not yet run is
    assert verdict([one("a", 0, 1.0), one("b", 0, 2.0), one("a", 1, 1.0), one("b", 1, diverged=True)]) == (
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise; 1 more seed lacks a cell "
        "it needs)")
    # a diverged run of a cell this claim does not read changes nothing
    by_seed = seed_values([one("a", 0, 1.0), one("b", 0, diverged=True)], lambda r, m: {r["cell"]: m.get("m")})
    assert claim_verdict(Claim("a below 2", ("a",), lambda v: v["a"] < 2), by_seed) == (
        "not judged at this scale (holds on 1 seed, too few to judge against seed noise)")


def test_table1_claims_whose_lstm_without_dropout_diverged_cannot_be_judged():
    rows = table1_rows(lambda r: (1.0, 1.0))
    for r in rows:
        if (r["scheme"], r["length"]) == ("none", "medium"):
            r.stored = record(diverged={"epoch": 2, "batch": 5, "loss": "inf"})
    verdicts = claims_of(rows)
    medium = {v for c, v in verdicts.items() if c.startswith("medium")}
    assert medium == {"not judged at this scale (a run it needs diverged)"}
    assert verdicts["short: Gal solves it, both samplings"] == "reproduced (3 of 3 seeds)"


def test_the_landing_page_stamps_each_table_at_each_scale_it_shows(tmp_path):
    from recdrop.experiments.sentiment import TEST_SETS
    from recdrop.summary import landing_stamps

    store = RunStore(tmp_path)
    assert landing_stamps(store).empty  # nothing stored: nothing to stamp

    def store_run(grid_row, commit):
        stored(store, "sentiment", grid_row, metrics={f"test_f1:{t}": 60.0 for t in TEST_SETS}, hardware="AMD EPYC",
               torch="2.13.0+cpu", commit=commit, finished="2026-11-24T00:00:00")

    store_run(grid_rows("sentiment", "paper", [0], store=store)[0], "def5678")  # the chapter's scale: one cell
    assert list(landing_stamps(store)["scale"]) == ["paper"]  # no claim has its cells anywhere: paper only
    for r in grid_rows("sentiment", "quick", [0], store=store):
        if r["cell"] == "RNN":  # every cell of the RNN claim, at quick: that claim is judged there
            store_run(r, "abc1234")
    stamps = landing_stamps(store)
    assert list(stamps["table"]) == ["Table 5", "Table 5"] and list(stamps["scale"]) == ["paper", "quick"]
    paper, quick = stamps["where the numbers came from"]
    assert "Scale: paper" in paper and "hardware: AMD EPYC" in paper and "commit: def5678" in paper
    assert "Scale: quick" in quick and "commit: abc1234" in quick and "settings: 2 of 6 run" in quick


def test_the_landing_stamp_counts_a_tables_cells_as_its_chapter_does_without_its_checks(tmp_path):
    """Table 3's grid also holds the batch-size check's 2 cells: its chapter's stamp counts 26 cells, and
    so does the landing page's (it said 28)."""
    from recdrop.summary import landing_stamps

    store = RunStore(tmp_path)
    stored(store, "char_lm", grid_rows("char_lm", "reduced", [0], store=store)[0], metrics={"test_bpc": 1.9},
           hardware="AMD EPYC", torch="2.13.0+cpu", commit="abc1234", finished="2026-11-27T00:00:00")
    assert "settings: 1 of 26 run" in landing_stamps(store)["where the numbers came from"].iloc[0]


def test_the_studies_beyond_the_paper_reach_the_claims_table_labelled_as_such(tmp_path):
    from recdrop.experiments import CHAPTERS

    empty = pd.DataFrame(study_claims(RunStore(tmp_path)))
    assert set(empty["on ours"]) == {NOT_RUN} and set(empty["scale"]) == {"none stored"}
    assert set(empty["chapter"]) == {"memory_loss", "conjecture", "seeds"} <= set(CHAPTERS)
    assert empty["table"].str.startswith(f"{BEYOND}: ").all()
    assert len(empty[empty["chapter"] == "conjecture"]) == 4 and len(empty[empty["chapter"] == "seeds"]) == 3
    stored = pd.DataFrame(study_claims())  # the committed records
    judged = stored[stored["on ours"] != NOT_RUN]
    assert len(judged) and (judged["on ours"].map(str).str.len() > 0).all()
    assert (judged[judged["scale"] == "quick"]["on ours"].map(verdict_of) == Verdict.NOT_JUDGED).all()
