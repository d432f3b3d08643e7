"""A notebook rerun by papermill: a parameter it does not take is an error, not a run of its defaults,
and its progress bars are text that ``papermill --log-output`` shows."""
import json
import os
from pathlib import Path

import pytest

from recdrop import chapters, progress

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
OURS = '# Parameters: papermill injects new values after this cell.\nscale = "ci"\nseeds = [0]\ntrain = True\n'


def test_a_parameter_the_notebook_does_not_take_is_an_error_naming_what_it_takes():
    with pytest.raises(ValueError, match=r"takes no parameter 'seed', 'precision'; it takes scale, seeds, train "
                                         r"\(seeds as a list: papermill -y 'seeds: \[0, 1, 2\]'\)"):
        chapters.check_parameters(["", OURS, '# Parameters\nscale = "paper"\nseed = 1\nprecision = "bf16"\n'])


def test_papermills_parameters_make_the_bars_text_and_a_notebook_run_by_hand_keeps_tqdms_choice(monkeypatch):
    monkeypatch.setenv("RECDROP_PROGRESS", "")  # restored after the test, whatever check_parameters sets
    monkeypatch.delenv("RECDROP_PROGRESS")
    chapters.check_parameters(["", OURS, "from recdrop.chapters import check_parameters\n"])  # no papermill
    assert "RECDROP_PROGRESS" not in os.environ
    assert type(progress.bar(total=1, disable=True)) is progress._auto  # tqdm's own choice
    chapters.check_parameters(["", OURS, '# Parameters\nscale = "paper"\nseeds = [0, 1, 2]\n'])
    bar = progress.bar(total=3, position=2, leave=False, disable=False)  # not CI's TQDM_DISABLE: a disabled bar
    # keeps no settings
    assert type(bar) is progress._text and bar.pos == 0 and bar.leave and bar.mininterval == progress.TEXT_EVERY_S
    bar.close()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_checks_its_parameters_right_after_papermill_injects_them(path):
    cells = json.loads(path.read_text())["cells"]
    at = [i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", [])]
    assert len(at) == 1 and "".join(cells[at[0]]["source"]).startswith("# Parameters:")  # chapters.OURS
    assert "check_parameters()" in "".join(cells[at[0] + 1]["source"])


def test_text_bars_draw_whole_lines_that_workers_sharing_a_log_cannot_split(monkeypatch, capsys):
    monkeypatch.setenv("RECDROP_PROGRESS", "text")
    bars = [progress.bar(total=2, desc=name, disable=False) for name in ("first", "second")]
    for b in bars:
        b.update(1)
        b.refresh()
    for b in bars:
        b.close()
    drawn = capsys.readouterr().err
    assert "\r" not in drawn and drawn.endswith("\n")
    assert all(line.startswith(("first:", "second:")) for line in drawn.splitlines())
