"""The landing page answers first (issue 48): a bottom line made from the landing and claims tables, one
vocabulary of verdicts with a symbol each, the settings as a small table, thin rendered pages, and no
"± 0.000"."""
import nbformat
import pandas as pd

from recdrop.book import thin_page
from recdrop.experiments.word_lm import WordLMConfig
from recdrop.report import VERDICTS, claim_verdict, config_table, fmt_mean_sd, verdict_kind, verdict_tally
from recdrop.summary import BEYOND, bottom_line, landing_html, verdict_key


def test_every_verdict_a_claim_gets_has_one_kind():
    by_seed = {s: {"a": 1.0, "b": float(s)} for s in range(3)}
    made = [claim_verdict(lambda v: v["a"] > 0, by_seed), claim_verdict(lambda v: v["a"] < 0, by_seed),
            claim_verdict(lambda v: v["b"] > 0.5, by_seed), claim_verdict(lambda v: v["a"] > 0, {0: by_seed[0]}),
            claim_verdict(lambda v: v["a"] < 0, {0: by_seed[0]}), claim_verdict(lambda v: v["c"] > 0, by_seed)]
    assert [verdict_kind(v) for v in made] == ["confirmed", "refuted", "open", "holds", "fails", "not yet run"]
    assert verdict_kind("inconclusive: without dropout ...") == "other"
    # a difference within the seed noise, in the conjecture's words and a figure's, is open (≈), not "?"
    from recdrop.experiments.conjecture import _beats
    from recdrop.report import figure_verdict
    assert verdict_kind(_beats(0.5, noise=1.0)) == verdict_kind(figure_verdict(made[2])) == "open"
    assert verdict_kind(_beats(-5.0, noise=1.0)) == "other"  # the conjecture's own "yes": see its chapter
    assert verdict_tally(made + made[:1]) == "2 ✔ confirmed, 1 ✓ holds, 1 ≈ open, 1 ✗ fails, 1 ✘ refuted, 1 · not yet run"
    assert len({symbol for _, symbol, _ in VERDICTS}) == len(VERDICTS)


def landing():
    table = pd.DataFrame([
        {"what": "Figure 1: the three schemes", "scale": "—", "paper": "—", "ours": "—", "delta": "—",
         "at paper scale so far": "—"},
        {"what": "Table 2: word-level PTB, test perplexity", "scale": "reduced", "paper": "87.0 ppl", "ours": "250.1",
         "delta": "+187 %", "at paper scale so far": "11 of 26 cells run (...)"},
        {"what": "Table 3: character-level PTB, test bpc", "scale": "reduced", "paper": "1.301 bpc", "ours": "1.8",
         "delta": "+0.5 bpc", "at paper scale so far": "none run"},
        {"what": "Table 4: NER on CoNLL-2003, test F1", "scale": "paper", "paper": "87.10 F1", "ours": "84.05",
         "delta": "-3.05 F1", "at paper scale so far": "shown"},
        {"what": "Table 4: NER on CoNLL-2003, test F1; ablation: torch's RMSprop", "scale": "paper", "paper": "87.10 F1",
         "ours": "80.00", "delta": "-7.1 F1", "at paper scale so far": "shown"},
        {"what": "Figure 2: learning curves, word-level PTB", "scale": "paper", "paper": "—", "ours": "train ...",
         "delta": "—", "at paper scale so far": "—"}])
    claims = pd.DataFrame([
        {"table": "Table 2", "claim": "a", "scale": "reduced", "on ours": "confirmed (3 of 3 seeds)", "chapter": "word_lm"},
        {"table": "Table 4", "claim": "b", "scale": "paper", "on ours": "fails (1 seed, too few)", "chapter": "ner"},
        {"table": f"{BEYOND}: seeds", "claim": "c", "scale": "reduced", "on ours": "refuted (3 of 3 seeds)",
         "chapter": "seeds"}])
    return table, claims


def test_the_bottom_line_is_made_from_the_landing_tables():
    text = bottom_line(*landing())
    assert "Tables 2 and 3 at `reduced` scale; Table 4 at `paper` scale" in text
    assert "; Figure 2 at `paper` scale (the largest where the runs it draws have run)." in text  # not Figure 1
    assert "At the paper's scale so far: Table 2, 11 of 26 cells." in text  # Table 3: none run, not listed
    assert "Table 4, 84.05 against the paper's 87.10 F1 (-3.05 F1)" in text and "80.00" not in text  # no ablation
    assert "Of the paper's 2 claims on its tables, on our runs: 1 ✔ confirmed, 1 ✗ fails" in text  # not the study's


def test_the_claims_table_shows_each_verdict_with_its_symbol_and_a_key():
    _, claims = landing()
    html = landing_html(claims, classes="landing claims")
    assert '<span class="verdict v-confirmed">✔ confirmed (3 of 3 seeds)</span>' in html
    assert '<span class="verdict v-fails">✗ fails' in html and 'href="ner.html"' in html
    key = verdict_key(claims)
    assert key.startswith("**3 claims: 1 ✔ confirmed, 1 ✗ fails, 1 ✘ refuted.**") and "*open*" not in key


def test_the_settings_show_as_a_small_table_of_every_field():
    cfg = WordLMConfig.at_scale("reduced")
    shown = config_table(cfg).data
    values = dict(zip(shown.filter(like="setting").to_numpy().ravel(), shown.filter(like="value").to_numpy().ravel()))
    limits = {"valid_tokens": "all", "test_tokens": "all"}  # 0: the whole split, shown as such
    assert {k: values[k] for k in cfg.to_dict()} == {k: limits.get(k, f"{v:g}" if isinstance(v, float) else v)
                                                     for k, v in cfg.to_dict().items()}
    assert cfg.valid_tokens == 0 and cfg.train_tokens == 116_000 and values["train_tokens"] == 116_000
    assert shown.shape[1] == 6 and len(shown) == -(-len(cfg.to_dict()) // 3)


def test_a_sequence_setting_shows_as_its_items():
    from recdrop.experiments.memory_loss import MemoryLossConfig

    cfg = MemoryLossConfig.at_scale("reduced")
    shown = config_table(cfg).data
    values = dict(zip(shown.filter(like="setting").to_numpy().ravel(), shown.filter(like="value").to_numpy().ravel()))
    assert values["test_lengths"] == ", ".join(str(n) for n in cfg.test_lengths)  # not a Python tuple


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
