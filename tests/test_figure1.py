"""Figure 1 is drawn from the scheme definitions: one dashed red connection per dropped edge."""
import matplotlib

matplotlib.use("Agg")

from matplotlib.text import Annotation  # noqa: E402

from recdrop.figure1 import EDGES, NODES, draw_figure1  # noqa: E402


# Written out from the paper, not read from recdrop.figure1: the connections each scheme drops.
PAPER_DROPPED = {
    # Eq. 8: c_t = d(f * c_{t-1} + i * g_t), dropped as the next step carries it and as h_t reads it
    "Moon et al. (2015)": {("c_{t-1}", "c_t"), ("c_t", "h_t")},
    "Gal (2015)": {("h_{t-1}", gate) for gate in ("i", "f", "g", "o")},  # Eq. 7: h_{t-1} into every gate
    "Ours (Semeniuta et al.)": {("g", "c_t")},  # Eq. 9: the update vector g_t
}


def test_each_panel_drops_its_schemes_connections():
    fig = draw_figure1()
    assert [ax.get_title() for ax in fig.axes] == list(PAPER_DROPPED)
    node_at = {xy: name for name, xy in NODES.items()}
    for ax in fig.axes:
        arrows = [c for c in ax.get_children() if isinstance(c, Annotation)]
        assert len(arrows) == len(EDGES)
        dashed = {(node_at[tuple(a.xyann)], node_at[tuple(a.xy)]) for a in arrows
                  if a.arrow_patch.get_linestyle() not in ("-", "solid")}
        assert dashed == PAPER_DROPPED[ax.get_title()], ax.get_title()
        for a in arrows:  # dashed and red go together
            red = matplotlib.colors.same_color(a.arrow_patch.get_edgecolor(), "tab:red")
            assert red == (a.arrow_patch.get_linestyle() not in ("-", "solid"))
