"""Figure 1 is drawn from the scheme definitions: one dashed red connection per dropped edge."""
import matplotlib

matplotlib.use("Agg")

from matplotlib.text import Annotation  # noqa: E402

from recdrop.figure1 import DROPPED, EDGES, draw_figure1  # noqa: E402


def test_each_panel_drops_its_schemes_connections():
    fig = draw_figure1()
    assert [ax.get_title() for ax in fig.axes] == ["Moon et al. (2015)", "Gal (2015)", "Ours (Semeniuta et al.)"]
    for ax, (dropped, _, _) in zip(fig.axes, DROPPED.values()):
        arrows = [c for c in ax.get_children() if isinstance(c, Annotation)]
        assert len(arrows) == len(EDGES)
        dashed = [a for a in arrows if a.arrow_patch.get_linestyle() not in ("-", "solid")]
        assert len(dashed) == len(dropped)
