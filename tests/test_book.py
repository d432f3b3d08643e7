"""What the book build decides by itself: which scale each chapter shows, and the landing page."""
import json
from pathlib import Path

import pytest

from made import RECORD_DEFAULTS
from recdrop import book, chapters
from recdrop.store import RunStore
from recdrop.summary import landing_stamps, landing_table
from recdrop.sweep import grid_rows
from recdrop.verdicts import NOT_RUN, verdict_html


def fake_record(store, experiment, scale, name="r1", seed=0):
    path = store.root / experiment / scale / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**RECORD_DEFAULTS, "experiment": experiment, "seed": seed, "metrics": {}}))


def grid_record(store, experiment, scale, grid="table", cell=0, seed=0):
    """A stored record for one run of ``experiment``'s ``grid`` (the book only looks at which exist)."""
    row = [r for r in grid_rows(experiment, scale, [seed], grid, store=store)][cell]
    fake_record(store, experiment, scale, row.run_id, seed)


def test_each_chapter_shows_the_largest_scale_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    assert book.notebook_scale("word_lm") == "quick"  # nothing stored: quick, every cell "not yet run"
    grid_record(store, "word_lm", "ci")
    grid_record(store, "char_lm", "quick")
    assert book.chapter_scale("word_lm") == "ci" and book.notebook_scale("word_lm") == "ci"
    fake_record(store, "word_lm", "paper")  # a run of no grid of the chapter (a scale since redefined) does not move it
    assert book.chapter_scale("word_lm") == "ci" and book.notebook_scale("word_lm") == "ci"
    assert book.chapter_scale("ner") is None and book.notebook_scale("ner") == "quick"
    assert book.notebook_scale("schemes") == "quick"


def test_a_study_shows_the_largest_scale_of_its_own_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    grid_record(store, "word_lm", "ci", "conjecture")
    grid_record(store, "char_lm", "quick", "conjecture")
    assert book.notebook_scale("conjecture") == "quick"  # the larger of word_lm's and char_lm's
    grid_record(store, "word_lm", "paper", "table")  # a paper-scale table run is not a conjecture run
    assert book.notebook_scale("conjecture") == "quick"
    # the seeds study needs a cell with two seeds: one seed at paper scale does not move it
    grid_record(store, "temporal_order", "quick", "headline", seed=0)
    grid_record(store, "temporal_order", "quick", "headline", seed=1)
    grid_record(store, "word_lm", "paper", "headline", seed=0)
    assert book.notebook_scale("seeds") == "quick"
    grid_record(store, "word_lm", "reduced", "headline", seed=0)
    grid_record(store, "word_lm", "reduced", "headline", seed=1)
    assert book.notebook_scale("seeds") == "reduced"
    grid_record(store, "word_lm", "paper", "headline", seed=1)
    assert book.notebook_scale("seeds") == "paper"


def test_a_study_shows_only_a_scale_all_its_experiments_have(tmp_path, monkeypatch):
    from recdrop.experiments import Chapter

    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    assert "reduced" not in book.EXPERIMENTS["sentiment"].config.SCALES
    monkeypatch.setitem(book.CHAPTERS, "mixed", Chapter("mixed", (("word_lm", "headline"), ("sentiment", "table"))))
    grid_record(store, "sentiment", "quick")
    grid_record(store, "word_lm", "reduced", "headline")
    assert book.notebook_scale("mixed") == "quick"  # sentiment has no reduced scale: the study cannot show it
    grid_record(store, "word_lm", "paper", "headline")
    assert book.notebook_scale("mixed") == "paper"


def test_every_notebook_is_a_chapter_of_the_book():
    import yaml

    from recdrop.paths import REPO_ROOT

    toc = yaml.safe_load((REPO_ROOT / "_toc.yml").read_text())
    files = {toc["root"]} | {c["file"] for c in toc["chapters"]}
    for name, path in book.NOTEBOOKS.items():
        assert f"book/executed/{name}" in files, name
        assert (REPO_ROOT / path).exists(), path
    notebooks = {p.name for p in (REPO_ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks == {p.split("/")[-1] for p in book.NOTEBOOKS.values()}
    # and in the registry's order
    executed = [toc["root"]] + [c["file"] for c in toc["chapters"] if c["file"].startswith("book/executed/")]
    assert executed == [f"book/executed/{name}" for name in book.NOTEBOOKS]


def test_landing_page_says_not_yet_run_below_paper_scale(tmp_path):
    table = landing_table(RunStore(tmp_path))
    # Figure 1, the five tables, Figure 2, and the ablations: Table 4's two and Table 5's one
    assert len(table) == 10 and table["what"].iloc[0].startswith("Figure 1")
    assert "Table 4: NER on CoNLL-2003, test F1; ablation: the word vectors tuned in training" in \
        " ".join(table["what"])
    assert set(table["cells"].iloc[1:]) == {"not yet run", verdict_html(NOT_RUN)}  # a figure's, with its symbol
    assert table.set_index("chapter").loc["word_lm", "paper"].iloc[0] == "87.0 ppl"  # the paper's best, as it prints it
    # what has run is this store's: nothing (the project's store has some of Tables 2, 4 and 5 at paper scale)
    assert set(table["scale"].iloc[1:]) <= {"none stored", "—"}


def test_the_landing_row_names_what_a_paper_scale_lacks(tmp_path):
    from recdrop.experiments.sentiment import TEST_SETS

    store = RunStore(tmp_path)
    row = next(r for r in grid_rows("sentiment", "paper", [0], store=store))
    path = store.path("sentiment", "paper", row.run_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": 0, "config": {"scale": "paper"},
                                "metrics": {f"test_f1:{t}": 50.0 for t in TEST_SETS}}))
    table = landing_table(store).set_index("chapter")
    assert table.loc["sentiment", "scale"].iloc[0] == "paper (6 of 36 cells)"  # the paper's cells, partial, counted
    assert table.loc["sentiment", "cells"].iloc[0] == (
        "6 · not judged at this scale (6 outside 1 F1 of the paper's on 1 seed, too few to judge against seed noise); "
        "without the pre-training on 1M weakly labelled tweets, the word2vec vectors "
        "(GloVe 50d here) and, most likely, the 2013 test tweets in training (see Deviations)")
    assert table.loc["word_lm", "cells"].iloc[0] == "not yet run"  # the caveat only where cells ran at `paper`


def test_an_ablations_runs_show_beside_their_table_on_the_landing_page_and_in_the_chapter(tmp_path, monkeypatch):
    """Table 4 trained with torch's RMSprop (before issue 34) is an ablation: its stored runs put the
    chapter at their scale and fill the ablation's row, never the table's."""
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    row = grid_rows("ner", "paper", [0], "torch-rmsprop", store=store)[0]  # RNN without dropout
    assert row.config.optimizer == "rmsprop-torch" and row.config.clip_norm == 0.0
    path = store.path("ner", "paper", row.run_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": 0, "config": {"scale": "paper"},
                                "metrics": {"test_f1_short": 64.1},
                                "curves": [], "hardware": "cpu", "torch": "2.13.0", "commit": "0123456",
                                "finished": "2026-11-25T18:00:00Z"}))
    assert book.chapter_scale("ner") == "paper"
    table = landing_table(store).set_index("what")
    ablated = table.loc["Table 4: NER on CoNLL-2003, test F1; ablation: torch's RMSprop, no clipping"]
    assert ablated["scale"] == "paper (1 of 12 cells)" and ablated["cells"].startswith("1 · not judged at this scale")
    assert table.loc["Table 4: NER on CoNLL-2003, test F1", "cells"] == "not yet run"

    shown = []
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    chapters.show_ablations("ner", "paper", [0], store)
    assert shown[0].data.startswith("### Ablation: torch's RMSprop, no clipping") and "runs: 1 shown" in shown[0].data
    side = shown[1].data.set_index("setting")
    assert side.loc["5 word long sequences, RNN 0.0", "ours, the ablation's"] == "64.10"
    assert side.loc["5 word long sequences, RNN 0.0", "ours, the table's runs"] == "not yet run"
    assert shown[2].data == "*What it found:* nothing yet: no cell of the paper's table has run both ways."
    assert ablated["cells"].endswith("; no cell run both ways yet")



def test_an_ablations_runs_at_another_scale_show_under_other_scales(tmp_path, monkeypatch):
    """Table 4's `quick` runs of torch's RMSprop (from before the switch) match no run of the table's grid
    there: *Other scales* of a chapter at `paper` shows them as the ablation's, beside the table's runs
    of that scale (none), and nothing of a scale where neither ran."""
    from made import stored

    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    stored(store, "ner", grid_rows("ner", "paper", [0], store=store)[0], metrics={"test_f1_short": 80.0})
    stored(store, "ner", grid_rows("ner", "quick", [0], "torch-rmsprop", store=store)[0],
           metrics={"test_f1_short": 64.1})
    shown = []
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    chapters.show_other_scales("ner", "paper", store)
    texts = [getattr(s, "data", s) for s in shown]
    assert texts[0] == "### At `quick` scale\n\nThe table's grid has no runs at this scale; its ablations' runs follow."
    assert texts[1].startswith("#### Ablation: torch's RMSprop, no clipping\n\n<details")  # its stamp, folded
    assert "Scale: quick | runs: 1 shown" in texts[1]
    assert texts[2].set_index("setting").loc["5 word long sequences, RNN 0.0", "ours, the ablation's"] == "64.10"
    assert texts[3] == "*What it found:* nothing yet: no cell of the paper's table has run both ways."
    # its curves, named where no legend covers the name (the curves' legend sits at the figure's top)
    assert shown[4].figure.legends[0].get_title().get_text() == "Ablation: torch's RMSprop, no clipping"
    assert "<figcaption><b>Fig. " in texts[4]  # numbered, with a caption
    table = texts[2].set_index("setting")  # below the paper's scale, where the table's cell has not run
    assert table.loc["5 word long sequences, RNN 0.0", "distance to the paper's, table → ablation"] == (
        "not judged at this scale (quick scale)")
    assert not any(isinstance(t, str) and "At `paper` scale" in t for t in texts)  # the chapter's own scale


def test_an_ablation_of_some_cells_is_judged_on_those_against_the_tables_runs(tmp_path, monkeypatch):
    """The word vectors tuned run the RNN's cells only: the landing row counts those 2 runs' 4 cells, not the
    table's 12, and says what tuning found against the table's runs of the same cells."""
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()

    def put(row, f1):
        path = store.path("ner", "paper", row.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": row.seed, "config": {"scale": "paper"},
                                    "metrics": {"test_f1_short": f1, "test_f1_long": f1}, "curves": [],
                                    "hardware": "cpu", "torch": "2.13.0", "commit": "0123456",
                                    "finished": "2026-11-27T10:00:00Z"}))
    for r in grid_rows("ner", "paper", [0, 1, 2], store=store):
        if r["cell"] == "RNN":
            put(r, 80.0 + r.seed / 10)  # 80.0, 80.1 and 80.2: the seed noise of a difference is 0.23
    for r in grid_rows("ner", "paper", [0], "tuned-embeddings", store=store):
        put(r, 83.0)
    tuned = landing_table(store).set_index("what").loc[
        "Table 4: NER on CoNLL-2003, test F1; ablation: the word vectors tuned in training (the paper keeps them "
        "static); the RNN's cells only"]
    # one seed each, outside 1 F1 of the paper's: no seed noise to weigh them against
    assert tuned["cells"].startswith("4 · not judged at this scale (4 outside 1 F1 of the paper's on 1 seed, too few "
                                     "to judge against seed noise);") and tuned["ours"] == "83.00 (n=1)"
    assert tuned["the paper's best cell"] == "15 word long sequences, RNN 0.25 (the best of the cells it runs)"
    # 2.9 F1 nearer each of the paper's 85.60, 86.48, 86.12 and 86.95, from 80.1: 11.6 of 24.75 (47%)
    assert tuned["cells"].endswith("; against the table's runs, in 4 cells: better in 4 (4 beyond the seed noise), "
                                     "worse in 0; overall 47% nearer the paper's numbers")
    stamps = landing_stamps(store).set_index("table")["where the numbers came from"]  # its runs stamped apart
    assert stamps["Table 4; ablation: the word vectors tuned in training (the paper keeps them static); the RNN's "
                  "cells only"].startswith("Scale: paper | runs: 2 shown | settings: 2 of 2 run, 1 seed each")
    assert not any("torch's RMSprop" in t for t in stamps.index)  # not run: no stamp


def test_a_chapter_shows_the_runs_of_its_other_scales(store, monkeypatch):
    from recdrop.experiments.temporal_order import TemporalOrderTask
    from recdrop.train import train_run

    shown = []
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    chapters.show_other_scales("temporal_order", "quick", store)
    assert shown == []  # nothing stored at another scale
    train_run(TemporalOrderTask, grid_rows("temporal_order", "ci", [0], store=store)[0].config, store=store,
              progress=False)
    chapters.show_other_scales("temporal_order", "quick", store)
    assert "At `ci` scale" in shown[0].data and "runs: 1 shown" in shown[0].data
    n_cells = len(grid_rows("temporal_order", "ci", [0], store=store))
    assert f"settings: 1 of {n_cells} run" in shown[0].data and n_cells > 1  # of the whole grid, not of those run
    table = shown[1].data  # a Styler of the comparison
    assert len(table) == 2 and "not yet run" not in set(table["ours"])  # the one cell that ran: train, test
    assert "one cell run" in [t.get_text() for t in shown[2].figure.axes[0].texts]  # ours against the paper's
    assert len(shown[3]) == 10 and NOT_RUN in set(shown[3]["on ours"])  # Table 1's claims, judged on it
    chapters.show_other_scales("temporal_order", "ci", store)
    assert len(shown) == 4  # the scale shown is not repeated


def test_claims_judged_at_quick_under_other_scales_say_that_quick_is_no_test_of_them(store, monkeypatch):
    r = next(r for r in grid_rows("ner", "quick", [0], store=store))
    path = store.root / "ner" / "quick" / f"{r.run_id}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD_DEFAULTS, "experiment": "ner", "seed": 0, "config": {"scale": "quick"},
                                "metrics": {"test_f1_short": 80.0, "test_f1_long": 85.0}}))
    shown = []
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    chapters.show_other_scales("ner", "paper", store)
    said = [i for i, o in enumerate(shown) if "judged at `quick`, a smoke test" in str(getattr(o, "data", ""))]
    assert len(said) == 1 and "on ours" in shown[said[0] + 1]  # just above the claims table
    shown.clear()
    chapters.show_other_scales("ner", "quick", store)  # quick is the scale shown: not under other scales
    assert not shown


def test_a_chapter_says_where_its_claims_not_yet_run_are_judged(store):
    from recdrop.chapters import claims_judged_below

    assert claims_judged_below("ner", "quick", store) == ""  # nothing stored anywhere
    rows = grid_rows("ner", "ci", [0], store=store)

    def ran(r, scale="ci"):
        path = store.root / "ner" / scale / f"{r.run_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        gain = (3.0 if r["cell"] == "LSTM" else 2.0) if r["rate"] else 0.0  # dropout helps, more after the
        # short stage, the most in the LSTM: every claim reads every cell (none fails before the last is read)
        path.write_text(json.dumps({**RECORD_DEFAULTS, "experiment": "ner", "seed": 0, "metrics": {
            "test_f1_short": 80.0 + gain, "test_f1_long": 85.0 + gain / 2}}))
    for r in rows[:-1]:  # every cell but one at ci: the claims still wait there too
        ran(r)
    assert claims_judged_below("ner", "quick", store) == ""
    ran(rows[-1])
    assert claims_judged_below("ner", "quick", store) == \
        "4 of the 4 claims have not yet run at `quick` scale; *Other scales* below judges 4 at `ci` scale."
    assert claims_judged_below("ner", "ci", store) == ""  # judged where it is shown
    for r in grid_rows("ner", "quick", [0], store=store):  # a larger scale: the landing page judges there
        ran(r, "quick")
    assert claims_judged_below("ner", "ci", store) == (
        "4 of the 4 claims also have a verdict at a larger scale (4 at `quick`), and the landing page gives those; "
        "*Other scales* below shows them.")


def test_each_registered_experiment_names_its_own_config_and_grids():
    for name, e in book.EXPERIMENTS.items():
        assert e.config.experiment == name
        for grid in e.grids.values():
            assert all(type(cfg) is e.config for _, cfg in grid("ci"))


def test_stored_scales_walks_the_scales_with_records_largest_first(tmp_path):
    from recdrop.sweep import stored_scales
    store = RunStore(tmp_path)
    for scale in ("ci", "reduced"):
        grid_record(store, "word_lm", scale, seed=1)
    assert [(scale, {r.seed for r in rows}) for scale, rows in stored_scales("word_lm", store=store)] == \
        [("reduced", {1}), ("ci", {1})]  # quick has none; the seeds are those stored
    assert [scale for scale, _ in stored_scales("word_lm", store=store, up_to="quick")] == ["ci"]
    grid_record(store, "sentiment", "ci")
    fake_record(store, "sentiment", "reduced")  # a scale sentiment does not have is passed over
    assert [scale for scale, _ in stored_scales("sentiment", store=store)] == ["ci"]


def test_every_claims_table_names_its_claims_first_and_our_verdicts_in_on_ours(tmp_path):
    from recdrop.verdicts import claim_verdicts
    assert sum(e.claims is not None for e in book.EXPERIMENTS.values()) >= 5  # every table's claims, at least
    for name, e in book.EXPERIMENTS.items():
        if e.claims is not None:
            t = e.claims(grid_rows(name, "quick", store=RunStore(tmp_path)))
            verdicts = claim_verdicts(t)
            assert len(verdicts) == len(t) and all(isinstance(c, str) and len(c) > 20 for c in verdicts)
            assert set(verdicts.values()) == {NOT_RUN}  # nothing stored


def test_a_table_is_shown_at_the_largest_scale_where_every_cell_ran_with_the_paper_cells_so_far_beside(
        tmp_path, monkeypatch):
    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    n_cells = len(grid_rows("temporal_order", "quick", [0], store=store))
    for cell in range(n_cells):  # every cell of Table 1 at quick
        row = grid_rows("temporal_order", "quick", [0], store=store)[cell]
        path = store.path("temporal_order", "quick", row.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": 0, "metrics": {"train_acc": 1.0, "test_acc": 0.5}}))
    assert book.complete_scale("temporal_order") == "quick" and book.chapter_scale("temporal_order") == "quick"
    row = grid_rows("temporal_order", "paper", [0], store=store)[0]  # one cell at paper
    path = store.path("temporal_order", "paper", row.run_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD_DEFAULTS, "seed": 0, "config": {"scale": "paper"},
                                "metrics": {"train_acc": 1.0, "test_acc": 1.0},
                                "curves": [], "hardware": "cpu", "torch": "2.13.0", "commit": "0123456",
                                "finished": "2026-11-25T18:00:00Z"}))
    assert book.complete_scale("temporal_order") == "quick"  # paper has one cell: the chapter stays at quick
    assert book.chapter_scale("temporal_order") == "quick"
    table = landing_table(store).set_index("chapter")
    # the landing row leads with the strongest evidence: the paper's cells, partial, counted
    assert table.loc["temporal_order", "scale"] == "paper (1 of 12 cells)"
    assert table.loc["temporal_order", "cells"] == "1 ✔ reproduced"
    assert table.loc["word_lm", "scale"].iloc[0] == "none stored"

    shown = []
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    chapters.show_paper_so_far("temporal_order", "quick", store)
    chapters.show_paper_so_far("temporal_order", "paper", store)  # the chapter shows paper: nothing to add
    assert shown[0].data.startswith("## Table 1 at the paper's scale: 1 of 12 cells run") and len(shown) == 2
    settings = len(grid_rows("temporal_order", "paper", [0], store=store))
    assert f"settings: 1 of {settings} run" in shown[0].data  # the stamp counts the settings not yet run too
    cells = shown[1].data.set_index("setting")  # every cell, the one that ran beside the paper's
    so_far = cells.loc[[s for s in cells.index if s.startswith("short")][0]]
    assert len(cells) == 12 and so_far["ours"] == "100.0" and so_far["paper"] == 100
    assert (cells["ours"] == "not yet run").sum() == 11
    shown.clear()  # under Other scales, the paper's scale points up to those cells and shows only its other rows
    chapters.show_other_scales("temporal_order", "quick", store)
    assert shown[0].data.startswith("### At `paper` scale")
    assert shown[1].data == "Its test cells lead this chapter (Table 1 at the paper's scale); its other rows:"
    rest = shown[2].data
    assert len(rest) == 1 and rest["split"].tolist() == ["train"] and rest["ours"].tolist() == ["100.0"]


def test_a_figures_landing_row_is_judged_at_the_largest_scale_where_its_cells_ran(tmp_path, monkeypatch):
    """Figure 2 needs two cells of Table 2: where they ran at `paper` and the chapter shows `reduced` (its
    grid run in full there only), the figure's row is judged at `paper`, stamped there, and the chapter
    draws it there."""
    import matplotlib.pyplot as plt

    from made import stored
    from recdrop.experiments import word_lm_chapter

    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()

    def ppl(r, scale):
        ours = (r["forward"], r["scheme"], r["rate"], r["sampling"]) == (
            "without forward dropout", "semeniuta", 0.25, "per-step")
        train, valid = (33.0, 108.0) if ours else (26.0, 142.0)
        if scale == "reduced":  # the reverse: the row must not be judged here
            train, valid = valid, train
        return {"train_ppl": train, "valid_ppl": valid, "test_ppl": valid}

    for r in grid_rows("word_lm", "reduced", [0], store=store):
        stored(store, "word_lm", r, metrics=ppl(r, "reduced"))
    for r in grid_rows("word_lm", "paper", [0], store=store):
        if r["forward"] == "without forward dropout" and r["scheme"] in ("none", "semeniuta") and r["rate"] != 0.5:
            stored(store, "word_lm", r, metrics=ppl(r, "paper"))
    assert book.chapter_scale("word_lm") == "reduced"
    figure = landing_table(store).set_index("what").loc["Figure 2: learning curves, word-level PTB"]
    assert figure["scale"] == "paper"
    assert figure["ours"] == ("train 33.0 vs 26.0, valid 108.0 vs 142.0 (seed 0): not judged at this scale "
                              "(holds on 1 seed, too few to "
                              "judge against seed noise)")
    assert "· not judged at this scale (holds on 1 seed, too few to judge against seed noise)" in figure["cells"]
    stamps = landing_stamps(store).set_index("table")
    assert stamps.loc["Figure 2", "scale"] == "paper"  # stamped apart: the two runs it draws, not the table's
    assert "runs: 2 shown" in stamps.loc["Figure 2", "where the numbers came from"]
    shown = []  # and the chapter draws it there, saying so
    monkeypatch.setattr(chapters, "display", lambda obj: shown.append(obj))
    drawn = []
    chapters.show_figure("word_lm", word_lm_chapter.figure2_row, lambda rows: drawn.append(rows) or plt.figure(), [],
                         "reduced", store)
    line, figure_stamp = shown[0].data.split("\n\n")
    assert line == ("At `paper` scale (larger than this page's: the largest where its runs have run): "
                    + figure["ours"] + ".")
    assert stamps.loc["Figure 2", "where the numbers came from"] in figure_stamp  # its runs' hardware and precision
    assert figure_stamp.startswith("<details")  # folded: for the reader who asks
    assert {r.config.scale for r in drawn[0]} == {"paper"}

    # with 3 seeds of the two cells at reduced, where the figure fails in each: as a claim's, its row leads
    # with what reduced found against the seed noise, and says what paper found on 1 seed
    for r in grid_rows("word_lm", "reduced", [1, 2], store=store):
        if r["forward"] == "without forward dropout" and r["scheme"] in ("none", "semeniuta") and r["rate"] != 0.5:
            stored(store, "word_lm", r, metrics=ppl(r, "reduced"))
    figure = landing_table(store).set_index("what").loc["Figure 2: learning curves, word-level PTB"]
    assert figure["scale"] == "reduced" and figure["ours"] == (
        "train 108.0 vs 142.0, valid 33.0 vs 26.0 (mean of 3 seeds): not reproduced (3 of 3 seeds); "
        "at paper scale: train 33.0 vs 26.0, valid 108.0 vs 142.0 (seed 0): not judged at this scale (holds on 1 "
        "seed, too few to judge against seed noise)")
    assert ("not reproduced (3 of 3 seeds; at paper scale: holds on 1 seed, too few to judge against seed noise)"
            in figure["cells"])  # the verdict says so too, not only the numbers
    shown.clear()  # and the chapter draws it at reduced, its page's own scale
    drawn.clear()
    chapters.show_figure("word_lm", word_lm_chapter.figure2_row, lambda rows: drawn.append(rows) or plt.figure(), [],
                         "reduced", store)
    assert shown[0].data.startswith("At `reduced` scale: train 108.0") and {r.config.scale for r in drawn[0]} == {
        "reduced"}
    assert {r.config.scale for r in drawn[1]} == {"paper"}  # and at paper too, beneath, nearer the paper's figure
    assert "How the numbers at paper scale were made" in shown[2].data and "runs: 2 shown" in shown[2].data
    assert "at <code>paper</code> scale, on too few seeds to judge" in shown[3].data
    stamps = landing_stamps(store)  # the landing page stamps the runs of both scales its row gives
    assert sorted(stamps[stamps["table"] == "Figure 2"]["scale"]) == ["paper", "reduced"]


def test_a_figure_whose_runs_ran_nowhere_is_shown_at_the_chapters_scale_on_its_rows(tmp_path, monkeypatch):
    """Where Figure 2's runs have run at no scale, the chapter and the landing page both show it at the
    chapter's scale, on the chapter's rows, as not yet run (one fallback, in ``figure_at_largest_scale``)."""
    from recdrop.experiments import word_lm_chapter

    monkeypatch.setenv("RECDROP_RUNS", str(tmp_path))
    store = RunStore()
    rows = grid_rows("word_lm", "quick", [0], store=store)
    scale, drawn, row = chapters.figure_at_largest_scale("word_lm", word_lm_chapter.figure2_row, rows, "quick", store)
    assert (scale, drawn) == ("quick", rows)
    assert row["judged"] == NOT_RUN
    figure = landing_table(store).set_index("what").loc["Figure 2: learning curves, word-level PTB"]
    assert "not judged at this scale (not yet run)" in figure["cells"]


def test_each_notebook_runs_once_into_its_page_and_jobs_below_one_is_an_error(monkeypatch, capsys):
    executed = []
    monkeypatch.setattr(book, "execute_notebook", lambda nb, params, out: executed.append((nb, out.name)))
    monkeypatch.setattr(book, "chapter_seeds", lambda name, scale: [0])
    book.execute_notebooks("ci", jobs=1)
    assert executed == [(nb, Path(nb).name) for nb in book.NOTEBOOKS.values()]  # in book order
    with pytest.raises(SystemExit):
        book.main(["--jobs", "0"])
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
