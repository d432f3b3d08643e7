"""Figure 1 of the paper, drawn by code: which connection of the LSTM each scheme drops.

Three panels (Moon et al., Gal, ours), each the same LSTM cell: the inputs x_t and h_{t-1} feed
the gates i, f, o and the update g; c_t = f * c_{t-1} + i * g; h_t = o * act(c_t). The
connection the scheme drops is drawn dashed and red with d(.) beside it (Eqs. 7, 8, 9).
"""
from __future__ import annotations

from typing import Dict, Tuple

# node -> (x, y) in a unit box
NODES: Dict[str, Tuple[float, float]] = {
    "x_t": (0.08, 0.12), "h_{t-1}": (0.08, 0.42), "c_{t-1}": (0.08, 0.82),
    "i": (0.38, 0.28), "f": (0.38, 0.52), "g": (0.38, 0.08), "o": (0.62, 0.22),
    "c_t": (0.62, 0.82), "h_t": (0.9, 0.42),
}
EDGES = [("x_t", "i"), ("x_t", "f"), ("x_t", "g"), ("x_t", "o"),
         ("h_{t-1}", "i"), ("h_{t-1}", "f"), ("h_{t-1}", "g"), ("h_{t-1}", "o"),
         ("c_{t-1}", "c_t"), ("f", "c_t"), ("i", "c_t"), ("g", "c_t"), ("c_t", "h_t"), ("o", "h_t")]
# scheme -> (dropped edges, equation, title)
DROPPED = {
    # Eq. 8 drops the new cell state itself, f * c_{t-1} + i * g_t: h_t reads it dropped, and the next step
    # carries it dropped (the dashed c_{t-1} -> c_t is the previous step's, as this step carries it on)
    "moon": ({("c_{t-1}", "c_t"), ("c_t", "h_t")}, "Eq. 8: the cell state c$_t$, as h$_t$ reads it and the next "
             "step carries it", "Moon et al. (2015)"),
    "gal": ({("h_{t-1}", "i"), ("h_{t-1}", "f"), ("h_{t-1}", "g"), ("h_{t-1}", "o")},
            "Eq. 7: h$_{t-1}$ where it enters the gates", "Gal (2015)"),
    "semeniuta": ({("g", "c_t")}, "Eq. 9: the update vector g$_t$", "Ours (Semeniuta et al.)"),
}


def draw_figure1():
    """The three panels side by side; returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    for ax, (scheme, (dropped, caption, title)) in zip(axes, DROPPED.items()):
        for a, b in EDGES:
            drop = (a, b) in dropped
            (x0, y0), (x1, y1) = NODES[a], NODES[b]
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                        arrowprops=dict(arrowstyle="-|>", color="tab:red" if drop else "0.45",
                                        linestyle="--" if drop else "-", lw=2.2 if drop else 1.0,
                                        shrinkA=13, shrinkB=13))
            if drop and (a, b) == sorted(dropped)[0]:
                ax.text((x0 + x1) / 2 + 0.07, (y0 + y1) / 2 + 0.04, "d(·)", color="tab:red", ha="center",
                        fontsize=11)
        for name, (x, y) in NODES.items():
            label = f"${name}$" if "_" in name else f"${name}_t$"
            ax.text(x, y, label, ha="center", va="center", fontsize=11,
                    bbox=dict(boxstyle="circle,pad=0.3" if len(name) == 1 else "round,pad=0.3", fc="white", ec="0.3"))
        ax.set_title(title, fontsize=12)
        ax.text(0.5, -0.06, caption, ha="center", va="top", fontsize=9, transform=ax.transAxes)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.02, 0.95)
        ax.axis("off")
    fig.tight_layout()
    return fig
