"""Progress bars: tqdm's, as widgets in a notebook someone watches, as text on stderr everywhere else.

A notebook that papermill runs headless draws widgets no one sees; there, and wherever
``RECDROP_PROGRESS=text`` is set, the bars are text, redrawn at most every 30 s, so that
``papermill --log-output`` shows each run's progress and ETA in the terminal. The worker processes of a
sweep inherit the setting.
"""
from __future__ import annotations

import os

from tqdm.auto import tqdm as _auto
from tqdm.std import tqdm as _text

TEXT_EVERY_S = 30.0  # a log line per redraw: often enough to see a run move, rare enough to read


def use_text() -> None:
    """From here on, in this process and the workers it starts, the bars are text (``RECDROP_PROGRESS``)."""
    os.environ["RECDROP_PROGRESS"] = "text"


def bar(**kwargs):
    """A tqdm bar: text where ``RECDROP_PROGRESS=text``, else tqdm's choice (``tqdm.auto``). As text, each
    redraw is a line of a log: every bar on the first line (another ``position`` moves the cursor) and
    none wiped at its end (``leave``)."""
    if os.environ.get("RECDROP_PROGRESS") == "text":
        return _text(mininterval=TEXT_EVERY_S, **{**kwargs, "position": 0, "leave": True})
    return _auto(**kwargs)


def say(line: str) -> None:
    """A line beside the bars (``tqdm.write``), which does not break them."""
    _auto.write(line)
