"""Progress bars: tqdm's, as widgets in a notebook someone watches, as text on stderr everywhere else.

A notebook that papermill runs headless draws widgets no one sees; there, and wherever
``RECDROP_PROGRESS=text`` is set, the bars are text, redrawn at most every 30 s, so that
``papermill --log-output`` shows each run's progress and ETA in the terminal. The worker processes of a
sweep inherit the setting.
"""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm as _auto
from tqdm.std import tqdm as _text

TEXT_EVERY_S = 30.0  # a log line per redraw: often enough to see a run move, rare enough to read


def use_text() -> None:
    """From here on, in this process and the workers it starts, the bars are text (``RECDROP_PROGRESS``)."""
    os.environ["RECDROP_PROGRESS"] = "text"


class _Lines:
    """stderr for text bars: each redraw a whole line (tqdm's carriage return made a newline), so that the bars
    of a sweep's worker processes, writing to one log, interleave by lines and never within one."""

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            sys.stderr.write(line + "\n")

    def flush(self) -> None:
        sys.stderr.flush()


def bar(**kwargs):
    """A tqdm bar: text where ``RECDROP_PROGRESS=text``, else tqdm's choice (``tqdm.auto``). As text, each
    redraw is a line of a log (``_Lines``): every bar on the first line (another ``position`` moves the
    cursor) and none wiped at its end (``leave``)."""
    if os.environ.get("RECDROP_PROGRESS") == "text":
        return _text(mininterval=TEXT_EVERY_S, **{**kwargs, "position": 0, "leave": True, "file": _Lines()})
    return _auto(**kwargs)


def say(line: str) -> None:
    """A line beside the bars (``tqdm.write``), which does not break them."""
    _auto.write(line)
