"""An ablation beside its table's runs (``recdrop.ablations``): the change of each cell, its seed noise by
hand, the outcome's words and what the chapter and the landing page say it found."""
import pandas as pd
import pytest

from made import row
from recdrop.ablations import ablation_effects, ablation_finding, difference_noise, side_by_side
from recdrop.report import Metric, compare


def ablation_of(table_values, ablation_values, metric, paper=90.0, scale="paper", split=False):
    """``ablations.ablation_effects`` of an ablation on a table of cells "a" to "d" (the paper's number ``paper``
    each): ``{cell: one value per seed}`` for each side, "diverged" for a run that diverged, None for one not
    run. With ``split``, each cell has a validation row too (not in the paper's test numbers)."""
    splits = ("Valid", "Test") if split else ("Test",)
    cells = [({"setting": f"{c} {sp}" if split else c, "cell": c}, paper if sp == "Test" else None, "f1")
             for c in "abcd" for sp in splits]

    def comparison(rows):
        return compare(rows, cells, ["cell"], metric)

    def runs(values, side):
        def stored(v):
            if v is None:
                return {}
            if v == "diverged":
                return {"record": {"diverged": {"epoch": 1, "batch": 2, "loss": "nan"}, "config": {"scale": scale}}}
            return {"record": {"metrics": {"f1": v}, "config": {"scale": scale}}}
        return [row(cell=c, seed=i, run_id=f"{side}{c}{i}", **stored(v)) for c, vs in values.items()
                for i, v in enumerate(vs)]
    return ablation_effects(comparison, runs(table_values, "t"), runs(ablation_values, "a"), metric)


F1 = Metric("F1", digits=2, tolerance=1.0)


def test_an_ablation_is_shown_cell_by_cell_beside_the_tables_runs_with_its_change_and_seed_noise():
    effects = ablation_of({"a": [78.0, 80.0]}, {"a": [85.0], "b": [None]}, F1)  # b not run; c and d not in its grid
    t = side_by_side(effects, 2)
    assert t["setting"].tolist() == ["a", "b"]
    assert list(t.columns) == ["setting", "paper", "ours, the table's runs", "ours, the ablation's", "ablation − table",
                               "seed noise (95%)", "the ablation is", "distance to the paper's, table → ablation"]
    # by hand: one seed against two of sd sqrt(2): SE = sqrt(2) sqrt(1/2 + 1) = sqrt(3), t(0.975, 1 dof) = 12.706
    assert t.iloc[0].to_dict() == {"setting": "a", "paper": 90.0, "ours, the table's runs": "79.00 ± 1.41 (n=2)",
                                   "ours, the ablation's": "85.00", "ablation − table": "+6.00",
                                   "seed noise (95%)": "22.01", "the ablation is": "better, within the seed noise",
                                   "distance to the paper's, table → ablation": "11.00 → 5.00"}
    assert t.iloc[1]["ours, the ablation's"] == "not yet run" and t.iloc[1]["ablation − table"] == "—"
    assert t.iloc[1]["seed noise (95%)"] == "—" and t.iloc[1]["the ablation is"] == "—"


def test_below_the_papers_scale_an_ablations_side_by_side_says_its_level_is_not_judged():
    """At `quick`, beside the paper's column: no distance to the paper's number, and the table's own words."""
    t = side_by_side(ablation_of({"a": [78.0, 80.0]}, {"a": [85.0]}, F1, scale="quick"), 2)
    assert t.iloc[0]["distance to the paper's, table → ablation"] == "not judged at this scale (quick scale)"
    assert t.iloc[0]["the ablation is"] == "better, within the seed noise"  # the change is still judged
    alone = side_by_side(ablation_of({"a": [None]}, {"a": [85.0]}, F1, scale="quick"), 2)  # the table's cell not run
    assert alone.iloc[0]["distance to the paper's, table → ablation"] == "not judged at this scale (quick scale)"
    assert alone.iloc[0]["the ablation is"] == "—"  # not run both ways


def test_the_seed_noise_of_a_difference_is_a_95_percent_t_interval_and_needs_two_seeds_on_one_side():
    def cell(mean, sd, n):
        return pd.Series({"mean": mean, "sd": sd, "n": n})
    # Welch: SE^2 = 4/4 + 1/2 = 1.5; dof = 1.5^2 / (1^2/3 + 0.5^2/1) = 3.857; t(0.975, 3.857) = 2.8175, between
    # the tables' 3.182 (3 dof) and 2.776 (4 dof)
    assert difference_noise(cell(80, 2.0, 4), cell(82, 1.0, 2)) == pytest.approx(2.8175 * 1.5 ** 0.5, rel=1e-4)
    # one seed against three of sd 0.3: SE = 0.3 sqrt(1/3 + 1), t(0.975, 2 dof) = 4.3027
    assert difference_noise(cell(80, 0.3, 3), cell(83, float("nan"), 1)) == pytest.approx(
        4.3027 * 0.3 * (4 / 3) ** 0.5, rel=1e-4)
    assert difference_noise(cell(80, 0.0, 3), cell(83, 0.0, 3)) == 0.0  # identical seeds each way
    assert pd.isna(difference_noise(cell(80, float("nan"), 1), cell(83, float("nan"), 1)))  # one seed each
    assert pd.isna(difference_noise(cell(80, 0.3, 3), cell(float("nan"), float("nan"), 0)))  # not run


def test_an_ablations_outcome_in_a_cell_is_better_or_worse_beyond_or_within_the_noise_equal_or_not_judged():
    effects = ablation_of({"a": [80.0, 80.1, 79.9], "b": [70.0, 70.2, 69.8], "c": [60.0], "d": [75.0, 75.0]},
                          {"a": [85.0], "b": [70.2], "c": [50.0], "d": [75.004, 75.004]}, F1)
    assert effects["outcome"].tolist() == ["better beyond", "better within", "not judged", "equal"]
    ppl = Metric("ppl", digits=1, tolerance=0.1, relative=True, higher_is_better=False)
    assert ablation_of({"a": [80.0, 80.1, 79.9]}, {"a": [85.0]}, ppl)["outcome"][0] == "worse beyond"
    # identical seeds each way (noise 0): a change beyond the digits shown is beyond the noise, one below is equal
    tied = ablation_of({"a": [1.0, 1.0]}, {"a": [1.02, 1.02]}, F1)
    assert tied["noise"][0] == 0.0 and tied["outcome"][0] == "better beyond"
    assert ablation_of({"a": [1.0, 1.0]}, {"a": [1.006, 1.006]}, F1)["outcome"][0] == "better within"


def test_an_ablations_finding_counts_the_papers_test_cells_that_ran_both_ways():
    table = {"a": [80.0, 81.0, 79.0], "b": [70.0, 70.2, 69.8], "c": [60.0]}
    ablation = {"a": [85.0], "b": [70.2], "c": [50.0], "d": ["diverged"]}
    found = ablation_finding(ablation_of(table, ablation, F1))
    assert found.startswith("*What it found:* of the 3 cells of the paper's table that ran both ways, the ablation is "
                            "better in 2 (1 beyond the seed noise), worse in 0, not judged in 1 (one seed each way), "
                            "1 diverged.")
    # the distances to 90: 10 -> 5, 20 -> 19.8, 30 -> 40: (5 + 0.2 - 10) / 60 = -8%
    assert "it brings our numbers 8% further from the paper's numbers" in found
    assert ablation_finding(ablation_of(table, ablation, F1), short=True) == (
        "against the table's runs, in 3 cells: better in 2 (1 beyond the seed noise), worse in 0, not judged in 1 "
        "(one seed each way), 1 diverged; overall 8% further from the paper's numbers")
    nearer = ablation_finding(ablation_of({"a": [79.0, 81.0]}, {"a": [88.0]}, F1), short=True)
    assert nearer.endswith("overall 80% nearer the paper's numbers")  # 10 -> 2
    # the validation rows are not the paper's test numbers: each cell counts once
    assert "of the 1 cell of" in ablation_finding(ablation_of({"a": [80.0, 81.0]}, {"a": [88.0]}, F1, split=True))
    # below the paper's scale the level is not the paper's: no distance to it
    below = ablation_finding(ablation_of({"a": [80.0, 81.0]}, {"a": [88.0]}, F1, scale="reduced"))
    assert "nearer" not in below and "further" not in below
    assert ablation_finding(ablation_of(table, {}, F1)) == (
        "*What it found:* nothing yet: no cell of the paper's table has run both ways.")
    assert ablation_finding(ablation_of(table, {}, F1), short=True) == "no cell run both ways yet"
