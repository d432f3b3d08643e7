"""What Tables 4 and 5 share: one recurrent layer of each cell type (RNN, LSTM, GRU), without and
with 0.25 recurrent dropout (the layers themselves are built in ``recdrop.models``)."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

CELLS = ("RNN", "LSTM", "GRU")
RATES = (0.0, 0.25)


def check_cell(cell: str) -> None:
    if cell not in CELLS:
        raise ValueError(f"cell={cell!r} is not valid; allowed values: {', '.join(map(repr, CELLS))}")


def cell_rate_grid(scale: str, config_class, **overrides) -> List[Tuple[Dict[str, Any], Any]]:
    """Each cell without and with 0.25 recurrent dropout, labelled ``cell`` and ``rate``."""
    return [({"cell": cell, "rate": rate},
             config_class.at_scale(scale, **{"cell": cell, "recurrent_dropout": rate, **overrides}))
            for cell in CELLS for rate in RATES]
