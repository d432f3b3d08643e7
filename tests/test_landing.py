"""The landing page answers first: four verdicts, each a type with its own symbol and colour, a sentence
per table from the strongest evidence stored, the settings as a small table, thin rendered pages, and no
"± 0.000"."""
import nbformat
import pandas as pd
import pytest

from recdrop.book import thin_page
from recdrop.experiments.word_lm import WordLMConfig
from recdrop.report import config_table, fmt_mean_sd
from recdrop.summary import BEYOND, _claims_sentence, beyond_sentences, landing_html, verdict_key
from recdrop.verdicts import Claim, Judgement, NOT_RUN, Verdict, claim_verdict, verdict_html, verdict_of, verdict_tally


def test_every_verdict_is_one_of_four_with_its_seeds_beside_it():
    by_seed = {s: {"a": 1.0, "b": float(s)} for s in range(3)}
    def claim(cell, holds):
        return Claim("", (cell,), lambda v: holds(v[cell]))
    made = [claim_verdict(claim("a", lambda a: a > 0), by_seed), claim_verdict(claim("a", lambda a: a < 0), by_seed),
            claim_verdict(claim("b", lambda b: b > 0.5), by_seed),
            claim_verdict(claim("a", lambda a: a > 0), {0: by_seed[0]}),
            claim_verdict(claim("a", lambda a: a < 0), {0: by_seed[0]}),
            claim_verdict(claim("c", lambda c: c > 0), by_seed)]
    assert [verdict_of(v) for v in made] == [Verdict.REPRODUCED, Verdict.NOT_REPRODUCED, Verdict.WITHIN_NOISE,
                                             Verdict.NOT_JUDGED, Verdict.NOT_JUDGED, Verdict.NOT_JUDGED]
    assert [v.seeds for v in made] == [3, 3, 3, 1, 1, 0]
    assert [v.against_noise for v in made] == [True, True, True, False, False, False]
    assert [v.too_few_seeds for v in made] == [False, False, False, True, True, False]
    # one seed neither confirms nor refutes a claim: it says what the seed showed
    assert str(made[3]) == "not judged at this scale (holds on 1 seed, too few to judge against seed noise)"
    assert str(made[4]) == "not judged at this scale (fails on 1 seed, too few to judge against seed noise)"
    # the conjecture's verdicts are the same four
    from recdrop.experiments.conjecture import _judged
    assert verdict_of(_judged(0.5, noise=1.0, seeds=3, lean="")) is Verdict.WITHIN_NOISE
    assert verdict_of(_judged(-5.0, noise=1.0, seeds=3, lean="")) is Verdict.REPRODUCED
    assert verdict_of(_judged(5.0, noise=1.0, seeds=3, lean="")) is Verdict.NOT_REPRODUCED
    assert verdict_of(_judged(5.0, noise=1.0, seeds=1, lean="worse")) is Verdict.NOT_JUDGED  # too few seeds
    assert verdict_tally(made + made[:1]) == ("2 ✔ reproduced, 1 ≈ within seed noise, 1 ✘ not reproduced, "
                                              "3 · not judged at this scale")
    assert len(Verdict) == 4 and len({v.symbol for v in Verdict}) == len({v.colour for v in Verdict}) == 4


def test_a_verdict_is_never_read_from_words():
    with pytest.raises(TypeError, match="never read from words"):
        verdict_of("reproduced (3 of 3 seeds)")
    j = Judgement(Verdict.WITHIN_NOISE, "holds in 2 of 3 seeds", 3)
    assert j == "within seed noise (holds in 2 of 3 seeds)" and verdict_of(j.noted("more")) is Verdict.WITHIN_NOISE
    assert verdict_of(j.not_judged("at quick")) is Verdict.NOT_JUDGED and not NOT_RUN.ran
    assert pd.DataFrame({"v": [j]})["v"].iloc[0].verdict is Verdict.WITHIN_NOISE  # a table keeps the type


def claims():
    return pd.DataFrame([
        {"table": "Table 2", "claim": "a", "scale": "reduced",
         "on ours": Judgement(Verdict.REPRODUCED, "3 of 3 seeds", 3), "chapter": "word_lm"},
        {"table": "Table 2", "claim": "b", "scale": "paper",
         "on ours": Judgement(Verdict.NOT_JUDGED, "fails on 1 seed, too few to judge against seed noise", 1),
         "chapter": "word_lm"},
        {"table": f"{BEYOND}: seeds", "claim": "c", "scale": "reduced",
         "on ours": Judgement(Verdict.NOT_REPRODUCED, "3 of 3 seeds", 3), "chapter": "seeds"}])


def test_a_tables_claims_are_said_by_verdict_at_the_scale_each_is_judged():
    said = _claims_sentence(claims()[claims()["chapter"] == "word_lm"])
    assert said == ("its 2 claims, at <code>reduced</code> on 3 seeds: "
                    f'<span class="verdict" style="color: {Verdict.REPRODUCED.colour}">1 ✔ reproduced</span>; '
                    "at <code>paper</code> on 1 seed: "
                    f'<span class="verdict" style="color: {Verdict.NOT_JUDGED.colour}">'
                    '1 · not judged at this scale</span>')
    assert _claims_sentence(claims()[:1].assign(**{"on ours": [NOT_RUN]})) == "its 1 claim is not yet run"
    assert beyond_sentences(claims()) == [f"c (<code>reduced</code>): {verdict_html(claims()['on ours'][2])}."]


def test_the_claims_table_shows_each_verdict_with_its_symbol_colour_and_a_key():
    html = landing_html(claims(), classes="landing claims")
    green = Verdict.REPRODUCED.colour
    assert f'<span class="verdict" style="color: {green}">✔ reproduced (3 of 3 seeds)</span>' in html
    assert "· not judged at this scale (fails on 1 seed, too few to judge against seed noise)" in html
    assert 'href="word_lm.html"' in html
    key = verdict_key()
    assert all(f"{v.symbol} <i>{v.value}</i>" in key for v in Verdict)


def test_the_settings_show_as_their_differences_from_the_papers():
    cfg = WordLMConfig.at_scale("reduced")
    shown = config_table(cfg).data.set_index("setting")
    paper = WordLMConfig.at_scale("paper").to_dict()
    differ = [k for k, v in cfg.to_dict().items() if k != "scale" and v != paper[k]]
    assert list(shown.index) == differ and differ  # only those, in the config's order
    assert shown.loc["train_tokens"].tolist() == [116_000, "all"]  # 0: the whole split, shown as such
    assert list(shown.columns) == ["at reduced", "at paper"]  # not "the paper's": it gives no batch for Table 3
    assert "Every setting is as at `paper` scale" in config_table(WordLMConfig.at_scale("paper")).data


def test_a_sequence_setting_shows_as_its_items():
    from recdrop.experiments.memory_loss import MemoryLossConfig

    cfg = MemoryLossConfig.at_scale("ci")
    shown = config_table(cfg).data.set_index("setting")
    assert shown.loc["test_lengths", "at ci"] == ", ".join(str(n) for n in cfg.test_lengths)  # not a Python tuple


def test_no_zero_spread_is_shown_as_plus_minus_zero():
    assert fmt_mean_sd(87.04, 0.0, 3, 1) == "87.0 (n=3, identical)"
    assert fmt_mean_sd(87.0, 0.042, 3, 1) == "87.0 ± <0.05 (n=3)"  # seeds that differ are not called identical
    assert fmt_mean_sd(87.04, 0.06, 3, 1) == "87.0 ± 0.1 (n=3)"
    assert fmt_mean_sd(87.04, float("nan"), 1, 2) == "87.04"


def test_a_rendered_page_drops_its_parameters_and_folds_its_code(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("scale = 'ci'", metadata={"tags": ["parameters", "hide-cell"]}),
        nbformat.v4.new_code_cell("scale = 'paper'", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("table()"),
        nbformat.v4.new_code_cell("display(x)", metadata={"tags": ["remove-input"]})])
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, path)
    thin_page(path)
    tags = [c.metadata.get("tags", []) for c in nbformat.read(path, as_version=4).cells]
    assert tags == [[], ["parameters", "remove-cell"], ["injected-parameters", "remove-cell"], ["hide-input"],
                    ["remove-input"]]


def test_the_finding_on_longer_sequences_is_said_from_the_runs(tmp_path):
    from made import stored

    from recdrop.store import RunStore
    from recdrop.summary import longer_sequences_sentence
    from recdrop.sweep import grid_rows

    store = RunStore(tmp_path)
    assert longer_sequences_sentence(store) is None  # nothing run
    at_60 = {"semeniuta": 0.79, "moon": 0.82, "gal": 0.66}
    for r in grid_rows("memory_loss", "quick", [0], store=store):
        acc = at_60.get(r["scheme"], 0.3) if r["sampling"] == "per-step" and r["scaling"] == "paper" else 0.3
        stored(store, "memory_loss", r, metrics={"test_acc_by_length": {"15": 1.0, "60": acc}})
    assert longer_sequences_sentence(store) == (
        "On Temporal Order sequences of 60 steps, 4 times as long as those trained on, the accuracy of each per-step "
        "scheme: ours per-step 79.0%, Moon per-step 82.0%, Gal per-step 66.0% (at <code>quick</code>, 1 seed); "
        "on the means, Moon per-step is more accurate than ours.")


def test_the_landing_page_leads_with_a_verdict_judged_against_the_noise_over_one_on_too_few_seeds():
    from recdrop.chapters import leading_verdicts

    one_seed = Judgement(Verdict.NOT_JUDGED, "holds on 1 seed, too few to judge against seed noise", 1)
    by_scale = [("paper", {"judged below": one_seed, "judged here": Judgement(Verdict.REPRODUCED, "3 of 3 seeds", 3),
                           "only quick below": one_seed, "run below only": NOT_RUN,
                           "diverged here": Judgement(Verdict.NOT_JUDGED, "a run it needs diverged"),
                           "run nowhere": NOT_RUN}),
                ("reduced", {"judged below": Judgement(Verdict.WITHIN_NOISE, "holds in 1 of 3 seeds", 3),
                             "judged here": Judgement(Verdict.NOT_REPRODUCED, "3 of 3 seeds", 3),
                             "only quick below": one_seed, "run below only": one_seed,
                             "diverged here": Judgement(Verdict.REPRODUCED, "3 of 3 seeds", 3),
                             "run nowhere": NOT_RUN}),
                ("quick", {"only quick below": Judgement(Verdict.REPRODUCED, "3 of 3 seeds", 3)})]
    led = {claim: (scale, str(v)) for claim, (scale, v) in leading_verdicts(by_scale).items()}
    assert led == {
        "judged below": ("reduced", "within seed noise (holds in 1 of 3 seeds; at paper scale: holds on 1 seed, "
                                    "too few to judge against seed noise)"),
        "judged here": ("paper", "reproduced (3 of 3 seeds)"),
        "only quick below": ("paper", str(one_seed)),  # quick under-fits: it tests no claim
        "run below only": ("reduced", str(one_seed)),
        "diverged here": ("paper", "not judged at this scale (a run it needs diverged)"),  # not for lack of seeds
        "run nowhere": ("paper", str(NOT_RUN))}


def test_with_nothing_run_each_tables_sentence_names_it_and_what_it_measures():
    from recdrop.store import RunStore
    from recdrop.summary import landing_claims, shown_tables, table_sentences

    store = RunStore("/nonexistent")
    sentences = table_sentences(shown_tables(store), landing_claims(store))
    assert sentences[0].startswith("<b>Figure 1</b> (the three schemes)")
    table2 = "<b>Table 2</b> (word-level PTB, test perplexity): not yet run"
    assert any(s.startswith(table2) for s in sentences), sentences
