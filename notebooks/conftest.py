"""nbval's settings for the notebooks: after a cell has run, nbval waits 5 seconds (hard-coded) for its
outputs to arrive, and on a loaded machine they can take longer, which failed cells that had run
fine (nbval issues #136, #231). Wait a minute instead; a cell's own run time is bounded by
``--nbval-cell-timeout``."""

OUTPUT_WAIT_S = 60


def pytest_collection_modifyitems(items):
    for item in items:
        if hasattr(item, "output_timeout"):  # nbval's cell (IPyNbCell)
            item.output_timeout = OUTPUT_WAIT_S
