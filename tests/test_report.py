"""The one comparison builder every paper table goes through, and its verdicts."""
import pandas as pd
import pytest

from made import record, row
from recdrop.report import Metric, commits_of, compare, moon_vs_ours_twins, stamp, styled, summarize, where_made
from recdrop.verdicts import NOT_RUN, Verdict, verdict_of


def _runs(values, key="test_acc", **labels):
    return [row(**labels, record={"metrics": {key: v}}) for v in values]


def test_the_verdict_weighs_the_tolerance_against_seed_noise():
    m = Metric("%", digits=1, tolerance=1.0)
    assert m.verdict([], 50.0) == NOT_RUN and not m.verdict([], 50.0).ran
    assert m.verdict([50.0], float("nan")) is None  # not in the paper
    assert m.verdict([50.9], 50.0) == "reproduced (1 seed)" and m.verdict([50.9], 50.0).seeds == 1
    # one seed: no noise to weigh, so outside the tolerance neither refuted nor within the noise
    one_out = "not judged at this scale (outside {} on 1 seed, too few to judge against seed noise)"
    assert m.verdict([51.5], 50.0) == one_out.format("1 %")
    assert verdict_of(m.verdict([51.5], 50.0)) is Verdict.NOT_JUDGED and m.verdict([51.5], 50.0).ran
    assert m.verdict([50.8, 50.9], 50.0) == "reproduced"  # several seeds: their count is in ours' (n=2)
    # mean 51.5, sd 1.0 over 4 seeds: standard error 0.5, two of them 1.0: 0.5 out, within the noise
    assert m.verdict([50.5, 52.5, 51.0, 52.0], 50.0) == "within seed noise"
    # mean 53, the same spread: 2 out, beyond the noise
    assert m.verdict([52.0, 54.0, 52.5, 53.5], 50.0) == "not reproduced"
    rel = Metric("ppl", digits=1, tolerance=0.05, relative=True, higher_is_better=False)
    assert rel.delta(105.0, 100.0) == 5.0 and rel.verdict([105.0], 100.0) == "reproduced (1 seed)"
    assert rel.verdict([106.0, 106.2], 100.0) == "not reproduced" and rel.delta_unit == "%"
    assert rel.verdict([106.0], 100.0) == one_out.format("5%")
    assert Metric("%", 1, 10.0, points=True).delta_unit == "points"


def test_compare_builds_one_row_per_cell_with_the_same_columns():
    m = Metric("%", digits=1, tolerance=10.0)
    rows = (_runs([0.9, 1.0], cell="a") + _runs([0.3], cell="b") + [row(cell="c")])
    cells = [({"cell": "a"}, 100.0, "test_acc"), ({"cell": "b"}, 100.0, "test_acc"), ({"cell": "c"}, 50.0, "test_acc"),
             ({"cell": "a"}, None, "test_acc")]
    t = compare(rows, cells, ["cell"], m, factor=100)
    assert list(t.columns) == ["cell", "paper", "ours", "delta", "verdict", "mean", "sd", "n", "diverged", "below"]
    assert t["ours"].tolist() == ["95.0 ± 7.1 (n=2)", "30.0", "not yet run", "95.0 ± 7.1 (n=2)"]
    assert t["delta"].tolist()[:2] == [-5.0, -70.0] and pd.isna(t["delta"][2])
    assert t["verdict"].tolist() == ["reproduced", "not judged at this scale (outside 10 % on 1 seed, too few to judge "
                                     "against seed noise)", NOT_RUN, None]  # None: not in the paper
    assert t["n"].tolist() == [2, 1, 0, 2]


def test_compare_says_where_runs_diverged():
    m = Metric("%", digits=1, tolerance=10.0)
    where = {"epoch": 2, "batch": 5, "loss": "nan"}
    rows = (_runs([0.9], cell="a") + [row(cell="a", diverged=where)]
            + [row(cell="b", diverged=where) for _ in range(2)] + [row(cell="c")])
    cells = [({"cell": c}, 100.0, "test_acc") for c in "abc"] + [({"cell": "b"}, None, "test_acc")]
    t = compare(rows, cells, ["cell"], m, factor=100)
    assert t["ours"].tolist() == ["90.0; 1 diverged", "diverged (2 runs)", "not yet run", "diverged (2 runs)"]
    assert t["verdict"].tolist() == ["reproduced (1 seed)", "not reproduced (diverged)", NOT_RUN, None]
    assert t["n"].tolist() == [1, 0, 0, 0] and t["diverged"].tolist() == [1, 2, 0, 2]
    quick = [row(cell="b", record={"config": {"scale": "quick"}, "diverged": where})]  # below the paper's scale
    assert compare(quick, cells[1:2], ["cell"], m, factor=100)["verdict"].tolist() == [
        "not judged at this scale (quick scale)"]  # as its finished runs would be: a smaller model's result


def test_summarize_counts_the_seeds_with_a_value_as_compare_does():
    """A record without the metric counts in no mean, and so not in n: the seed noise's degrees of freedom."""
    m = Metric("%", digits=1, tolerance=10.0)
    rows = [row(cell="a", seed=s, record={"metrics": {"test_acc": 0.8 + s / 100} if s else {}}) for s in range(3)]
    assert summarize(rows, ["cell"], ["test_acc"])["n"].tolist() == [2]
    assert compare(rows, [({"cell": "a"}, 80.0, "test_acc")], ["cell"], m, factor=100)["n"].tolist() == [2]


def test_compare_shows_extras_where_a_cell_has_them():
    m = Metric("F1", digits=2, tolerance=1.0)
    rows = [row(cell="a", record={"metrics": {"test": 90.0, "valid": 91.0}})]
    t = compare(rows, [({"cell": "a", "split": "Test"}, 90.5, "test"),
                       ({"cell": "a", "split": "Valid"}, 91.0, "valid")],
                ["cell"], m, extras=[("valid F1", lambda labels: "valid" if labels["split"] == "Test" else None)])
    assert t["valid F1"].tolist() == ["91.00", ""]


def test_book_tables_drop_row_numbers_but_keep_labelled_indexes():
    from IPython.core.interactiveshell import InteractiveShell

    from recdrop.report import book_tables

    shell = InteractiveShell.instance()
    book_tables()
    html = shell.display_formatter.formatters["text/html"]
    plain = html(pd.DataFrame({"setting": ["a", "b"], "paper": [1.0, 2.0]}))
    assert "<th>0</th>" not in plain and "<th>setting</th>" in plain
    labelled = html(pd.DataFrame({"paper": [1.0]}, index=pd.Index(["ours"], name="scheme")))
    assert "<th>ours</th>" in labelled
    missing = html(pd.DataFrame({"paper": [float("nan"), 2.0]}))
    assert "NaN" not in missing and "<td>—</td>" in missing
    numbers = html(pd.DataFrame({"change": [2.43, -0.057, 373.13, 1.5e-05, 1234567.0]}))  # each as rounded
    assert all(f"<td>{v}</td>" in numbers for v in ("2.43", "-0.057", "373.13", "1.5e-05", "1234567"))
    assert "2.4300" not in numbers  # not padded to the column's longest


def test_styled_keeps_the_labels_digits():
    from recdrop.report import styled

    t = compare([], [({"rate": 0.25}, 96.84, "x")], ["rate"], Metric("ppl", 1, 0.05, relative=True))
    html = styled(t, 1).to_html()
    assert "0.25" in html and "96.8" in html and "96.84" not in html and ">0<" not in html
    t = compare([], [({"rate": 0.0}, 96.84, "x"), ({"rate": 0.25}, 90.0, "y")], ["rate"], Metric("ppl", 1, 0.05))
    html = styled(t, 1).to_html()
    assert ">0<" in html and ">0.25<" in html and "0.000000" not in html and "0.250000" not in html


def test_fit_table_says_which_runs_over_fit_and_which_converged():
    from recdrop.experiments.lm_tables import FIT_WINDOW, describe_fit, fit_table

    def run(valid, train, lr, seed):
        curves = [{"epoch": e + 1, "valid_ppl": v, "train_ppl": t, "lr": rate}
                  for e, (v, t, rate) in enumerate(zip(valid, train, lr))]
        return row(forward="without forward dropout", scheme="none", rate=0.0, sampling="-", seed=seed,
                   record={"curves": curves})

    falling = [400, 300, 200, 150, 100, 80, 60, 50]
    assert FIT_WINDOW == 5  # the curves below are drawn for a window of 5 epochs
    rows = [run([500, 400, 300, 320, 350, 380, 400, 420], falling, [1.0] * 8, 0),  # best 5 epochs back
            run([500, 400, 300, 299, 299, 298, 298, 298], [400, 300, 290, 289, 288, 288, 288, 288],
                [1.0, 0.5, 0.25, 0.12, 0.06, 0.03, 0.015, 0.008], 1),
            run([500, 400, 300, 250, 200, 150, 120, 110], falling, [1.0] * 8, 2),
            run([500, 400, 300, 250, 240, 260], falling, [1.0] * 6, 3),  # up 8% from a best 1 epoch back
            run([500, 400, 301, 300.5, 300.2, 300.1, 300.3, 300.0], falling, [1.0] * 8, 4),
            run([500, 400, 296, 295, 300, 302, 300, 297.5], falling, [1.0] * 8, 6),  # within 1% of its best, up since
            row(forward="without forward dropout", scheme="none", rate=0.0, sampling="-", seed=5)]
    t = fit_table(rows, "ppl").set_index("seed")
    assert list(t.index) == [0, 1, 2, 3, 4, 6]  # a cell not run has no row
    assert t.loc[0, "fit"] == "over-fits" and t.loc[0, "best validation epoch"] == 3
    assert t.loc[0, "validation, last vs best (%)"] == 40.0 and t.loc[0, "converged"] == "yes: no new best for 5 epochs"
    assert t.loc[1, "fit"] == "flat" and t.loc[1, "converged"] == "yes: learning rate decayed"
    assert t.loc[1, "last lr / first"] == 0.008
    assert t.loc[2, "fit"] == "still improving" and t.loc[2, "converged"] == "no"
    assert t.loc[3, "fit"] == "validation rising" and t.loc[3, "converged"] == "no"
    assert t.loc[4, "fit"] == "flat" and t.loc[4, "converged"] == "yes: validation flat for 5 epochs"
    assert t.loc[6, "fit"] == "still moving" and t.loc[6, "converged"] == "no"
    assert "5 epochs" in describe_fit() and "1%" in describe_fit()


def test_fit_table_says_whether_the_last_epochs_moved_a_run_by_less_than_the_seed_noise():
    from recdrop.experiments.lm_tables import fit_table

    def run(scheme, seed, valid):
        curves = [{"epoch": e + 1, "valid_ppl": v, "train_ppl": 100.0, "lr": 1.0} for e, v in enumerate(valid)]
        return row(forward="without forward dropout", scheme=scheme, rate=0.25, sampling="per-step",
                   seed=seed, record={"curves": curves})

    rows = [run("gal", 0, [320, 310, 305, 301, 301, 300.5, 300.5, 300, 300]),  # its cell: sd(300, 302) = 1.41
            run("gal", 1, [320, 312, 308, 305, 304, 304, 303, 303, 302]),  # moved -3 over the last 5 epochs
            run("moon", 0, [320, 310, 304, 303, 303, 304, 305, 306]),  # one seed: the smallest sd measured
            run("semeniuta", 0, [320, 310, 305])]  # too short to say
    t = fit_table(rows, "ppl").set_index(["scheme", "seed"])
    col = "validation change, last 5 epochs (ppl)"
    assert t.loc[("gal", 0), col] == -1.0 and t.loc[("gal", 0), "settled"] == "yes"
    assert t.loc[("gal", 1), col] == -3.0 and t.loc[("gal", 1), "settled"] == "no: still falling"
    assert t.loc[("moon", 0), col] == 2.0 and t.loc[("moon", 0), "settled"] == "no: still rising"
    assert t.loc[("semeniuta", 0), "settled"] == "—"
    single = fit_table(rows[2:], "ppl")  # no cell with two seeds: no seed noise to compare with
    assert list(single["settled"]) == ["no seed noise yet", "—"]


def test_stamp_counts_cells_and_their_seeds():
    from recdrop.report import stamp

    def one(config, seed, ran, **fields):
        rec = {"config": {"scale": "reduced"}, "hardware": "cpu", "torch": "2.13", "commit": "abc",
               "finished": f"2026-11-2{seed}T00:00:00", **fields} if ran else None
        return row(run_id=f"{config}{seed}", config=config, seed=seed, record=rec)

    rows = [one("a", 0, True), one("a", 1, True), one("a", 2, True), one("b", 0, True), one("b", 1, False),
            one("b", 2, False), one("c", 0, False), one("c", 1, False), one("c", 2, False)]
    s = stamp(rows)
    assert "Scale: reduced | runs: 4 shown | settings: 2 of 3 run, 1–3 seeds each | seeds: 0, 1, 2 |" in s
    assert s.endswith("runs finished 2026-11-20 to 2026-11-22 | float32 throughout")  # said, not left to absence
    assert "settings: 1 of 2 run, 1 seed each | seeds: 0 |" in stamp(rows[3:])
    assert "runs finished 2026-11-20 | float32" in stamp(rows[3:])  # one day: said once, not "a to a"
    assert stamp(rows[4:6]).startswith("No stored runs")
    rows[0] = one("a", 0, True, segments=[{"hardware": "gpu", "torch": "2.13", "commit": "def"},
                                          {"hardware": "cpu", "torch": "2.13", "commit": "abc"}])
    assert "| hardware: cpu, gpu | torch 2.13 | commit: abc, def |" in stamp(rows)  # every stretch of a resumed run
    assert "runs: 4 shown | settings: 2 of 3 run, 1–3 seeds each" in stamp(rows + rows[:3])  # shown twice, counted once
    rows[4].stored = record(diverged={"epoch": 3, "batch": 1, "loss": "nan"})  # a result, not a cell not yet run
    assert "runs: 4 shown, 1 diverged |" in stamp(rows)
    assert stamp(rows[4:6]) == "No finished runs: 1 diverged, the other cells are not yet run at this scale."


def test_pilot_table_weighs_the_gap_against_the_seed_noise():
    from recdrop.experiments.lm_tables import pilot_cells, pilot_table

    none, best = [label for label, _ in pilot_cells(2)]
    assert (none["scheme"], best["scheme"], best["rate"], best["sampling"]) == (
        "none", "semeniuta", 0.5, "per-sequence")

    def rows(none_values, best_values, at_best=lambda v: v):
        return [row(**label, seed=seed, record={"metrics": {"test_ppl": v, "best_test_ppl": at_best(v)}})
                for label, values in ((none, none_values), (best, best_values)) for seed, v in enumerate(values)]

    t = pilot_table(rows([390, 410], [270, 272]), "ppl", 2, 1).iloc[0]
    assert t["gap (ppl)"] == 129.0 and t["seed noise (2 SE)"] == 20.1  # 2 sqrt(200 / 2 + 2 / 2), to 1 decimal
    assert t["pilot"].startswith("the gap favours dropout") and t["no dropout"] == "400.0 ± 14.1 (n=2)"
    no_gain = pilot_table(rows([300, 340], [290, 300]), "ppl", 2, 1).iloc[0]
    assert no_gain["pilot"].endswith("this scale cannot test the claims")
    assert pilot_table(rows([300], [200, 210]), "ppl", 2, 1).iloc[0]["pilot"] == "not yet: fewer than 2 seeds a cell"
    # the no-dropout model over-fits: at its best-validation epoch it ties the dropout cell
    t = pilot_table(rows([390, 410], [270, 272], at_best=lambda v: 271 if v > 300 else v), "ppl", 2, 1)
    assert list(t["model tested"]) == ["final", "best validation"]
    assert t["pilot"][0].endswith("this scale can test the claims")
    assert t["gap (ppl)"][1] == 0.0 and t["pilot"][1].endswith("with early stopping, dropout gains nothing here")


def test_plot_against_paper_draws_the_test_cells_that_ran_with_their_rank_correlation():
    import matplotlib
    matplotlib.use("Agg")
    from recdrop.report import plot_against_paper

    metric = Metric("ppl", 1, 0.05, relative=True)

    def rows(values):
        return [row(block=b, cell=c, seed=s, record={"metrics": {"test": v, "valid": v + 1}})
                for (b, c), vs in values.items() for s, v in enumerate(vs)]

    cells = [({"block": b, "cell": c, "split": split}, p, split.lower())
             for b, c, p in (("a", 1, 100.0), ("a", 2, 110.0), ("b", 3, 90.0), ("b", 4, 95.0), ("b", 5, 120.0))
             for split in ("Valid", "Test")]
    ran = {("a", 1): [300.0, 310.0], ("a", 2): [320.0], ("b", 3): [280.0], ("b", 4): [270.0]}  # cell 5 not run
    fig = plot_against_paper(compare(rows(ran), cells, ["block", "cell"], metric), metric)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == (f"the paper's (test, {metric.unit})",
                                                  f"ours (test, {metric.unit}, mean over seeds)")
    # the paper's order 90 < 95 < 100 < 110 against ours 280, 270, 305, 320: ranks (1, 2, 3, 4) and (2, 1, 3, 4)
    assert ax.get_title() == "4 cells: Spearman's rank correlation 0.80"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]  # no diagonal: the ranges do not meet
    points = sorted(tuple(xy) for line in ax.lines if line.get_marker() == "o" for xy in line.get_xydata())
    assert points == [(90.0, 280.0), (95.0, 270.0), (100.0, 305.0), (110.0, 320.0)]  # test rows only
    same = plot_against_paper(compare(rows({("a", 1): [100.0], ("a", 2): [111.0]}), cells, ["block", "cell"], metric))
    assert "ours = the paper's" in [t.get_text() for t in same.axes[0].get_legend().get_texts()]
    empty = plot_against_paper(compare([], cells, ["block", "cell"], metric))
    assert [t.get_text() for t in empty.axes[0].texts] == ["not yet run"]


@pytest.mark.parametrize("experiment, wide", [("ner", "table4_wide"), ("sentiment", "table5_wide")])
def test_wide_tables_show_rates_as_labels_not_floats(experiment, wide):
    import importlib

    from recdrop.store import RunStore
    from recdrop.sweep import grid_rows

    rows = grid_rows(experiment, "ci", [0], store=RunStore("/nonexistent"))  # nothing run: every cell "not run"
    html = getattr(importlib.import_module(f"recdrop.experiments.{experiment}_chapter"), wide)(rows).to_html()
    assert ">0.25<" in html and "0.250000" not in html and "0.000000" not in html


def test_below_the_papers_scale_a_cell_is_not_judged_as_the_landing_page_says():
    m = Metric("%", digits=1, tolerance=10.0)
    rows = ([row(cell="a", record={"metrics": {"test_acc": 0.9}, "config": {"scale": "reduced"}})]
            + [row(cell="b", seed=s, record={"metrics": {"test_acc": v}, "config": {"scale": "paper"}})
               for s, v in enumerate((0.3, 0.31))])
    cells = [({"cell": "a"}, 100.0, "test_acc"), ({"cell": "b"}, 100.0, "test_acc"), ({"cell": "a"}, None, "test_acc")]
    t = compare(rows, cells, ["cell"], m, factor=100)
    assert t["verdict"].tolist() == ["not judged at this scale (reduced scale)", "not reproduced", None]
    assert t["below"].tolist() == ["reduced", "", "reduced"]
    assert [verdict_of(j) for j in t["verdict"][:2]] == [Verdict.NOT_JUDGED, Verdict.NOT_REPRODUCED]
    assert t["delta"].tolist()[:2] == [-10.0, -69.5] and pd.isna(t["delta"][2])  # the difference is still shown


def test_one_thread_is_said_in_the_singular_and_its_two_spellings_are_one_machine():
    rows = [row(run_id="a", config="c", record={"config": {"scale": "ci"}, "hardware": "AMD EPYC (1 threads)",
                                                "torch": "2.13", "commit": "abc", "finished": "2026-11-26T00:00"})]
    assert "hardware: AMD EPYC (1 thread) |" in stamp(rows)
    made = dict(config={"scale": "quick", "scaling": "paper"}, curves=[{"epoch": 1, "train_loss": 1.0}],
                metrics={"test_acc": 0.9}, hardware="AMD EPYC (1 threads)", path="fused")
    twins = [row(scheme="moon", sampling="per-sequence", length=10, record=made),
             row(scheme="semeniuta", sampling="per-sequence", length=10,
                 record={**made, "hardware": "AMD EPYC (1 thread)"})]
    assert moon_vs_ours_twins(twins, ["length"], "train_loss", "test_acc", "acc", lambda v: v)[
        "trained alike"].tolist() == ["yes"]


def test_a_verdict_that_is_the_same_in_every_row_is_said_once():
    m = Metric("%", digits=1, tolerance=10.0)
    rows = [row(cell=c, record={"metrics": {"test_acc": 0.9}, "config": {"scale": "reduced"}}) for c in "ab"]
    t = compare(rows, [({"cell": c}, 100.0, "test_acc") for c in "ab"], ["cell"], m, factor=100)
    shown = styled(t)
    assert ("verdict" not in shown.data and "every row: " in shown.caption
            and "not judged at this scale" in shown.caption)
    assert "verdict" in styled(t.assign(verdict=[t["verdict"][0], NOT_RUN])).data  # where rows differ, a column


def test_where_made_counts_each_run_under_every_machine_and_precision_that_ran_a_stretch_of_it():
    stretches = [{"hardware": "cpu", "torch": "2.13", "commit": "old"},
                 {"hardware": "gpu", "torch": "2.13", "commit": "new", "device": "cuda", "precision": "tf32"}]
    resumed = record(run_id="r2", seed=1, commit="new", hardware="gpu", device="cuda", precision="tf32",
                     finished="2026-11-28T00:00:00+00:00", segments=stretches)
    plain = record(run_id="r1", commit="old", finished="2026-11-26T00:00:00+00:00")
    made = where_made([plain, resumed]).set_index(["hardware", "precision"])
    assert made.loc[("cpu", "float32"), "runs"] == 2  # r1, and r2's first stretch
    assert made.loc[("cpu", "float32"), "seeds"] == "0, 1"
    assert made.loc[("cpu", "float32"), "finished"] == "2026-11-26 to 2026-11-28"
    assert made.loc[("gpu", "TF32 products"), "runs"] == 1 and made.loc[("gpu", "TF32 products"), "commits"] == 1
    commits = commits_of([plain, resumed]).set_index("commit")
    assert commits.loc["old", "runs"] == 2 and commits.loc["new", "runs"] == 1
    assert list(commits.index) == ["new", "old"]  # the newest first
    assert where_made([]).empty and commits_of([]).empty


def test_a_figure_alt_text_is_its_caption_without_markup():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from recdrop.report import figure_html

    fig, _ = plt.subplots()
    shown = figure_html(fig, "Curves at <code>paper</code> scale & below")
    assert 'alt="Curves at paper scale &amp; below"' in shown.data
    assert "<figcaption><b>Fig. " in shown.data and "<code>paper</code> scale" in shown.data  # the caption keeps it


def test_each_cell_says_where_its_runs_trained():
    from recdrop.report import trained_on

    t = pd.DataFrame({"cell": ["a", "b", "c"], "paper": [1.0, 2.0, 3.0]})
    rows = [row(cell="a", record={"hardware": "NVIDIA H200", "device": "cuda", "precision": "tf32"}),
            row(cell="a", seed=1, record={"hardware": "NVIDIA H200", "device": "cuda", "precision": "tf32"}),
            row(cell="b", record={"hardware": "NVIDIA H100", "device": "cuda",
                                  "config": {"scale": "paper", "recurrent_dropout": 0.5},
                                  "segments": [{"hardware": "NVIDIA H100", "device": "cuda", "precision": "bf16"}]}),
            row(cell="c")]
    assert trained_on(t, rows) == ["NVIDIA H200, TF32 products", "NVIDIA H100, float32; NVIDIA H100, bf16 autocast",
                                   "not yet run"]
