"""The studies beyond the paper: the headline cells, the seed orderings, the conjecture table."""
import pytest

from made import RECORD_DEFAULTS, row
from recdrop import chapters, experiments
from recdrop.experiments import conjecture, seeds, temporal_order, word_lm, temporal_order_chapter
from recdrop.experiments.lm_tables import COMBINED, FORWARD, conjecture_cells, headline_cells
from recdrop.verdicts import NOT_RUN

WO, W = FORWARD


def labels(cells):
    return {(c["forward"], c["scheme"], c["rate"], c["sampling"]) for c, _ in cells}


def test_headline_cells_are_the_papers_best_per_scheme_and_block():
    cells = labels(headline_cells(2))
    assert len(cells) == 8
    assert {(WO, "none", 0.0, "-"), (WO, "moon", 0.25, "per-step"), (WO, "gal", 0.5, "per-step"),
            (WO, "semeniuta", 0.5, "per-sequence"), (W, "semeniuta", 0.25, "per-step")} <= cells
    # Table 1: ties go to per-step; Moon's medium per-step (25%) beats its "< 25%" per-sequence
    assert ("medium", "moon", "per-step") in temporal_order.headline_cells()
    assert temporal_order.paper_test_acc()[("medium", "moon", "per-sequence", "paper")] < 0.25


def test_conjecture_cells_combine_gal_and_ours_everywhere():
    cells = conjecture_cells()
    assert len(cells) == 8 and {c["scheme"] for c, _ in cells} == {COMBINED}
    assert {kw["scheme"] for _, kw in cells} == {"gal+semeniuta"}


def test_unknown_grid_is_refused():
    with pytest.raises(ValueError, match="grid='nope' is not a grid of word_lm; allowed values: 'table'"):
        experiments.get("word_lm", "nope")
    with pytest.raises(ValueError, match="not a grid of ner"):
        experiments.get("ner", "conjecture")


def fake_rows(values, falling=()):
    """Rows as run_grid returns them: ``values`` maps a cell to its per-seed test perplexities; each run's
    validation flat over 8 epochs, but falling by 10 a epoch in the (cell, seed) pairs of ``falling``."""
    rows = []
    for cell, vals in values.items():
        forward, scheme, rate, sampling = cell
        for seed, v in enumerate(vals):
            slope = 10 if (cell, seed) in falling else 0
            curves = [] if v is None else [{"epoch": e, "valid_ppl": v + slope * (8 - e), "train_ppl": v, "lr": 1.0}
                                           for e in range(1, 9)]
            rows.append(row(forward=forward, scheme=scheme, rate=rate, sampling=sampling, seed=seed,
                            run_id=f"{forward}/{scheme}/{rate}/{sampling}/{seed}",
                            record=None if v is None else {"metrics": {"test_ppl": v}, "curves": curves}))
    return rows


OURS, GAL, MOON, NONE = ((WO, "semeniuta", 0.5, "per-sequence"), (WO, "gal", 0.5, "per-step"),
                         (WO, "moon", 0.25, "per-step"), (WO, "none", 0.0, "-"))


def verdict(table, ahead, behind):
    row = table[(table["the paper: ahead"] == ahead) & (table["behind"] == behind)]
    assert len(row) == 1, table
    return row["ours"].iloc[0]


def test_orderings_survive_only_when_every_seed_agrees():
    # the paper: ours 96.8 < Moon 108.7 < Gal 112.5 < none 125.2
    rows = fake_rows({OURS: [100, 101, 102], GAL: [103, 110, 111], MOON: [104, 105, 130], NONE: [120, None, None]})
    t = seeds.orderings("word_lm", rows)
    assert len(t) == 6  # every pair of the four cells: the paper orders them all
    assert verdict(t, "semeniuta 0.5 per-sequence", "gal 0.5 per-step") == (
        "reproduced (every seed in the paper's order)")
    assert verdict(t, "moon 0.25 per-step", "gal 0.5 per-step") == (
        "within seed noise (reversed on the means only)")  # 113 vs 108
    assert verdict(t, "semeniuta 0.5 per-sequence", "moon 0.25 per-step") == (
        "reproduced (every seed in the paper's order)")
    rows = fake_rows({OURS: [100, 106, 102], MOON: [104, 105, 107]})
    assert verdict(seeds.orderings("word_lm", rows), "semeniuta 0.5 per-sequence", "moon 0.25 per-step") == \
        "within seed noise (holds on the means only)"
    rows = fake_rows({OURS: [110, 111, 112], MOON: [104, 105, 109]})  # every seed of Moon beats every one of ours
    assert verdict(seeds.orderings("word_lm", rows), "semeniuta 0.5 per-sequence", "moon 0.25 per-step") == (
        "not reproduced (every seed in the reverse order)")
    rows = fake_rows({OURS: [100, 101, 102], NONE: [120, 121, None]})
    assert verdict(seeds.orderings("word_lm", rows), "semeniuta 0.5 per-sequence", "none") == (
        "not judged at this scale (fewer than 3 seeds)")


def test_the_landing_line_counts_judged_orderings_and_those_waiting_for_seeds():
    rows = fake_rows({OURS: [100, 101, 102], GAL: [103, 110, 111], MOON: [104, 105, 130], NONE: [120, None, None]})
    t = seeds.orderings("word_lm", rows)  # 3 judged (1 reversed on the means only), 3 against NONE waiting
    assert seeds.orderings_verdict(t) == \
        ("within seed noise (2 of 3 orderings survive in every seed, 0 reversed in every seed, 0 hold on the means "
         "only, 1 reversed on the means only; 3 of the paper's 6 orderings wait for 3 seeds)")
    full = fake_rows({OURS: [100, 101, 102], GAL: [103, 110, 111]})
    assert seeds.orderings_verdict(seeds.orderings("word_lm", full)) == \
        ("reproduced (1 of 1 orderings survive in every seed, 0 reversed in every seed, 0 hold on the means only, "
         "0 reversed on the means only)")
    reversed_ = fake_rows({OURS: [110, 111, 112], GAL: [103, 104, 105]})
    assert seeds.orderings_verdict(seeds.orderings("word_lm", reversed_)) == \
        ("not reproduced (0 of 1 orderings survive in every seed, 1 reversed in every seed, 0 hold on the means "
         "only, 0 reversed on the means only)")
    overlap = fake_rows({OURS: [100, 104, 102], GAL: [103, 110, 111]})  # ours ahead on the means, the seeds overlap
    assert seeds.orderings_verdict(seeds.orderings("word_lm", overlap)) == \
        ("within seed noise (0 of 1 orderings survive in every seed, 0 reversed in every seed, 1 holds on the means "
         "only, 0 reversed on the means only)")
    one = fake_rows({OURS: [100], GAL: [103]})
    assert seeds.orderings_verdict(seeds.orderings("word_lm", one)) == \
        "not judged at this scale (fewer than 3 seeds of its cells: 0 of the paper's 1 orderings judged)"


def test_seed_table_shows_mean_sd_and_each_seed():
    t = seeds.seed_table("word_lm", fake_rows({OURS: [100, 102, None]}))
    assert t["ours (mean ± sd)"].iloc[0] == "101.0 ± 1.4 (n=2)"
    assert t["seeds"].iloc[0] == "100.0, 102.0" and t["paper"].iloc[0] == 96.8
    with pytest.raises(ValueError, match="has no seeds study"):
        seeds.seed_table("ner", [])


def test_conjecture_table_compares_the_combination_with_its_parts():
    at = (WO, 0.25, "per-step")
    table_rows = fake_rows({(WO, "gal", 0.25, "per-step"): [110], (WO, "semeniuta", 0.25, "per-step"): [105],
                            (WO, "moon", 0.25, "per-step"): [120], (WO, "gal", 0.5, "per-step"): [100]})
    combo = fake_rows({(WO, COMBINED, 0.25, "per-step"): [104]})
    t = conjecture.conjecture_table("word_lm", table_rows, combo).set_index(["forward", "rate", "sampling"])
    assert t.loc[at, "beats gal and ours"] == ("not judged at this scale (the combination better; one seed a cell: "
                                               "no seed noise to judge against)")
    assert t.loc[at, [COMBINED, "moon", "gal", "semeniuta"]].tolist() == ["104.0", "120.0", "110.0", "105.0"]
    noise = fake_rows({(WO, "moon", 0.5, "per-sequence"): [100, 102, None]})  # sd 1.4: 104 vs 105 is within
    t = conjecture.conjecture_table("word_lm", table_rows, combo, noise).set_index(["forward", "rate", "sampling"])
    assert t.loc[at, "beats gal and ours"] == "within seed noise"
    quiet = fake_rows({(WO, "moon", 0.5, "per-sequence"): [100, 100.2, None]})  # sd 0.14: 104 beats 105
    t = conjecture.conjecture_table("word_lm", table_rows, combo, quiet).set_index(["forward", "rate", "sampling"])
    assert t.loc[at, "beats gal and ours"] == ("not judged at this scale (the combination better; 1 seed of the "
                                               "cells compared, too few to judge against seed noise)")
    three = fake_rows({(WO, "gal", 0.25, "per-step"): [110] * 3, (WO, "semeniuta", 0.25, "per-step"): [105] * 3})
    t = conjecture.conjecture_table("word_lm", three, fake_rows({(WO, COMBINED, 0.25, "per-step"): [104] * 3}),
                                    quiet).set_index(["forward", "rate", "sampling"])
    assert t.loc[at, "beats gal and ours"] == "reproduced"  # beyond the noise, on 3 seeds of each cell compared
    t = conjecture.conjecture_table("word_lm", three, fake_rows({(WO, COMBINED, 0.25, "per-step"): [106] * 3}),
                                    quiet).set_index(["forward", "rate", "sampling"])
    assert t.loc[at, "beats gal and ours"] == "not reproduced"  # worse than ours beyond the noise
    assert t.loc[(WO, 0.25, "per-sequence"), "beats gal and ours"] == NOT_RUN
    no_combo = conjecture.conjecture_table("word_lm", table_rows, fake_rows({(WO, COMBINED, 0.25, "per-step"): [None]}))
    assert (no_combo[COMBINED] == "—").all()  # not "None" or "nan"
    s = conjecture.conjecture_summary("word_lm", table_rows, combo).set_index("forward")
    assert s.loc[WO, "verdict"] == ("not judged at this scale (not yet run in full (1 of 4 combination cells, "
                                    "4 of 12 single-scheme cells))")
    assert s.loc[WO, "best single cell"] == "gal 0.5 per-step"  # the best of those that ran, shown beside
    assert s.loc[W, "verdict"] == NOT_RUN
    # a whole block: the single schemes at 110 but gal 0.5 per-step at 100; the combination at 104 but one cell
    from recdrop.experiments.lm_tables import RATES, SAMPLINGS, SCHEMES
    singles = {(WO, sc, r, sa): [100 if (sc, r, sa) == ("gal", 0.5, "per-step") else 110]
               for sc in SCHEMES for r in RATES for sa in SAMPLINGS}
    combos = {(WO, COMBINED, r, sa): [120] for r in RATES for sa in SAMPLINGS}
    table_rows, combo = fake_rows(singles), fake_rows({**combos, (WO, COMBINED, 0.25, "per-step"): [104]})
    s = conjecture.conjecture_summary("word_lm", table_rows, combo).set_index("forward")
    assert s.loc[WO, "best single cell"] == "gal 0.5 per-step"  # 100 beats the combination's 104
    # each number to the metric's digits (ppl: 1), never a whole number beside a decimal one
    assert s.loc[WO, ["single's test ppl", "combination's test ppl", "combination − single", "seed sd (pooled)"]
                 ].tolist() == ["100.0 (n=1)", "104.0 (n=1)", "+4.0", "—"]  # each with its seeds
    assert s.loc[WO, "verdict"] == ("not judged at this scale (the best single scheme better by 4.0 ppl; one seed a "
                                    "cell: no seed noise to judge against)")
    noisy = fake_rows({(WO, "moon", 0.25, "per-step"): [100, 103, 97], (WO, "none", 0.0, "-"): [120, 140, 100],
                       (W, "none", 0.0, "-"): [120, 130, 110]})
    s = conjecture.conjecture_summary("word_lm", table_rows, combo, noisy).set_index("forward")
    assert s.loc[WO, "seed sd (pooled)"] == "3.0"  # moon's sd; the over-fitting cell without dropout (20) left out
    # 4 < 2 x 3, and the side it leans to
    assert s.loc[WO, "verdict"] == "within seed noise (the best single scheme better by 4.0 ppl)"
    # the combination's own seeds count, pooled by degrees of freedom: sd 1 (n=3) and sd 4 (n=2)
    combo = fake_rows({**combos, (WO, COMBINED, 0.25, "per-step"): [103, 104, 105],
                       (WO, COMBINED, 0.5, "per-step"): [90, None, None]})
    moon2 = fake_rows({(WO, "moon", 0.25, "per-step"): [100, 100 + 4 * 2 ** 0.5, None]})
    sd = conjecture.pooled_seed_sd(moon2 + combo, "test_ppl")
    assert sd[WO] == pytest.approx(((2 * 1 + 1 * 16) / 3) ** 0.5, rel=1e-6) and W not in sd
    s = conjecture.conjecture_summary("word_lm", table_rows, combo).set_index("forward")
    assert s.loc[WO, "best combination cell"] == "0.5 per-step" and s.loc[WO, "seed sd (pooled)"] == "1.0"
    assert s.loc[WO, "verdict"] == ("not judged at this scale (the combination better by 10.0 ppl; 1 seed of the "
                                    "cells compared, too few to judge against seed noise)")  # 90 against 100: 1 seed
    # the two cells compared on 3 seeds each: judged, 90 against 100 more than 2 x the pooled sd apart
    table3 = fake_rows({**singles, (WO, "gal", 0.5, "per-step"): [100, 100, 100]})
    combo3 = fake_rows({**combos, (WO, COMBINED, 0.25, "per-step"): [103, 104, 105],
                        (WO, COMBINED, 0.5, "per-step"): [90, 90, 90]})
    s = conjecture.conjecture_summary("word_lm", table3, combo3).set_index("forward")
    assert s.loc[WO, "verdict"] == "reproduced (the combination is better)"
    # a run of a cell compared whose validation still falls over its last epochs: the verdict is provisional
    moving = fake_rows({**combos, (WO, COMBINED, 0.25, "per-step"): [103, 104, 105],
                        (WO, COMBINED, 0.5, "per-step"): [90, 90, 90]},
                       falling={((WO, COMBINED, 0.5, "per-step"), 0)})
    s = conjecture.conjecture_summary("word_lm", table3, moving).set_index("forward")
    assert s.loc[WO, "verdict"] == ("reproduced (the combination is better; provisional: 1 of the 6 runs compared "
                                    "still moving at their last epoch)")
    assert conjecture.pooled_seed_sd([], "test_ppl") == {}


def test_headline_grid_runs_are_table_runs():
    """A headline cell with seed 0 is the same run (same id) as the table's cell: no rerun."""
    from recdrop.config import run_id

    table = {tuple(sorted(label.items())): run_id(cfg, 0) for label, cfg in word_lm.grid("ci")}
    for label, cfg in word_lm.headline_grid("ci"):
        assert table[tuple(sorted(label.items()))] == run_id(cfg, 0)


def test_moon_vs_ours_is_shown_at_the_largest_scale_where_both_per_sequence_cells_ran(tmp_path):
    import json

    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    store = RunStore(tmp_path)

    def record(scale, scheme, sampling, seed=0):
        row = next(r for r in grid_rows("temporal_order", scale, [seed], store=store)
                   if (r["length"], r["scheme"], r["sampling"], r["scaling"]) == ("short", scheme, sampling, "paper"))
        path = store.path("temporal_order", scale, row.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": seed, "curves": [{"epoch": 1, "train_loss": 0.5}],
                                    "config": {"scale": scale, "scaling": "paper"}, "metrics": {"test_acc": 1.0}}))

    assert chapters.moon_vs_ours_at_largest_scale("temporal_order", store)[0] == []
    record("quick", "moon", "per-sequence")
    record("quick", "semeniuta", "per-sequence")
    record("reduced", "moon", "per-step")  # a larger scale's first runs, without the pair
    shown, table = chapters.moon_vs_ours_at_largest_scale("temporal_order", store)
    assert len(table) == 1 and {r.config.scale for r in shown} == {"quick"}
    record("reduced", "moon", "per-sequence")
    record("reduced", "semeniuta", "per-sequence")
    record("reduced", "gal", "per-sequence")  # not compared: not in the stamp of the runs compared
    shown, table = chapters.moon_vs_ours_at_largest_scale("temporal_order", store)
    assert len(table) == 1 and {r.config.scale for r in shown} == {"reduced"}
    assert sorted(r["scheme"] for r in shown) == ["moon", "semeniuta"]


def test_moon_vs_ours_says_when_the_training_losses_part():
    from recdrop.report import PARTED

    def one(scheme, losses, test_acc, hardware="cpu", scaling="paper"):
        return row(length="medium", scheme=scheme, seed=0, sampling="per-sequence", scaling=scaling,
                   record={"curves": [{"epoch": e + 1, "train_loss": v} for e, v in enumerate(losses)],
                           "config": {"scale": "paper", "scaling": scaling}, "hardware": hardware,
                           "metrics": {"test_acc": test_acc}})

    table = temporal_order_chapter.moon_vs_ours_per_sequence(
        [one("moon", [1.0, 0.5, 0.4, 0.3], 0.2345), one("semeniuta", [1.0, 0.5 + 1e-9, 0.4 + 2 * PARTED, 0.1], 1.0)])
    t = table.iloc[0]
    assert t["first epoch apart by > 1e-06"] == 3 and abs(t["max |train loss, Moon - ours|"] - 0.2) < 1e-12
    assert (t["Moon test acc (%)"], t["ours test acc (%)"], t["trained alike"]) == (23.4, 100.0, "yes")
    same = temporal_order_chapter.moon_vs_ours_per_sequence([one("moon", [1.0, 0.5], 0.3),
                                                             one("semeniuta", [1.0, 0.5], 1.0)])
    assert same.iloc[0]["first epoch apart by > 1e-06"] == "never"
    elsewhere = temporal_order_chapter.moon_vs_ours_per_sequence([one("moon", [1.0, 0.5], 0.3),
                                                                  one("semeniuta", [1.0, 0.5], 1.0, hardware="gpu")])
    assert elsewhere.iloc[0]["trained alike"] == "no"
    inverted = temporal_order_chapter.moon_vs_ours_per_sequence([one("moon", [1.0], 0.3, scaling="inverted"),
                                                                 one("semeniuta", [1.0], 1.0)])
    assert inverted.empty  # Moon's inverted scaling trains otherwise: not a twin


def test_table3_moon_vs_ours_pairs_each_forward_and_rate_seed_by_seed():
    from recdrop.experiments import char_lm_chapter

    def one(scheme, forward, rate, seed, bpcs, test_bpc, batch="default"):
        return row(forward=forward, scheme=scheme, rate=rate, sampling="per-sequence", batch=batch, seed=seed,
                   record={"curves": [{"epoch": e + 1, "train_bpc": v} for e, v in enumerate(bpcs)],
                           "config": {"scale": "reduced", "scaling": "paper"}, "metrics": {"test_bpc": test_bpc}})

    rows = [one("moon", "with", 0.25, 0, [3.0, 2.0], 1.93149), one("semeniuta", "with", 0.25, 0, [3.0, 2.0], 1.9031),
            one("moon", "with", 0.5, 0, [3.0, 2.1], 2.2), one("semeniuta", "with", 0.25, 1, [3.0, 2.0], 1.9),
            one("moon", "with", 0.25, 0, [9.0], 9.0, batch="half"),  # the batch-size check: not Table 3's
            one("semeniuta", "with", 0.25, 0, [9.5], 9.0, batch="half")]
    table = char_lm_chapter.moon_vs_ours_per_sequence(rows)
    assert table[["forward", "rate", "seed"]].values.tolist() == [["with", 0.25, 0]]  # only whole pairs
    t = table.iloc[0]
    assert (t["max |train bpc, Moon - ours|"], t["first epoch apart by > 1e-06"]) == (0.0, "never")
    assert (t["Moon test bpc"], t["ours test bpc"]) == (1.931, 1.903)
