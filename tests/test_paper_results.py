"""data/paper_results.csv holds every number of the paper's Tables 1-5, and nothing else."""
import os
import re
from collections import Counter
from pathlib import Path

import pytest

from recdrop.paper import paper_results

LABELS = {1: "table:order_results", 2: "table:lm_results", 3: "table:char_lm_results",
          4: "table:ner_results", 5: "table:semeval_results"}
NUMBER = re.compile(r"(?<![A-Za-z\d.])\d+(?:\.\d+)?(?![A-Za-z\d])")


def paper_tex() -> str:
    data = Path(os.environ.get("RECDROP_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    tex = data.parent / "paper" / "recurrent-dropout-without-memory-loss.tex"
    if not tex.exists():
        pytest.skip(f"the paper's LaTeX is not at {tex}")
    return tex.read_text()


def tabular_of(tex: str, label: str) -> str:
    end = tex.index(r"\label{" + label + "}")
    start = tex.rindex(r"\begin{tabular}", 0, end)
    body = tex[start:tex.index(r"\end{tabular}", start)]
    body = body.split("\n", 1)[1]  # drop the column spec line ({lc|rr|...})
    return re.sub(r"\\(multicolumn|multirow)\{\d+\}", "", body)  # layout arguments, not data


@pytest.mark.parametrize("table", [1, 2, 3, 4, 5])
def test_every_number_matches_the_latex(table):
    latex = Counter(NUMBER.findall(tabular_of(paper_tex(), LABELS[table])))
    df = paper_results(table)
    ours = Counter(df["value"])
    # the numbers the paper prints as row and block labels (rates, "5 word long sequences")
    for text in df[["group", "row"]].drop_duplicates()["row"]:
        ours.update(NUMBER.findall(text))
    for text in df["group"].unique():
        ours.update(NUMBER.findall(re.sub(r"\(\d{4}\)", "", text)))  # not the citation years
    assert ours == latex, (f"missing from the CSV: {latex - ours}; not in the paper: {ours - latex}")


def test_bold_marks_match_the_latex():
    tex = paper_tex()
    for table in (2, 3):
        bold = Counter(re.findall(r"\\textbf\{([\d.]+)\}", tabular_of(tex, LABELS[table])))
        df = paper_results(table)
        assert Counter(df.loc[df["bold"] == 1, "value"]) == bold


def test_unknown_table_is_an_error():
    with pytest.raises(ValueError, match="table=6"):
        paper_results(6)
