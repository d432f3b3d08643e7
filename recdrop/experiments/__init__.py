"""One module per paper experiment: its config and scales, its grids (the table's cells, and the
studies beyond the paper that reuse them), its task."""
from . import char_lm, memory_loss, ner, sentiment, temporal_order, word_lm

EXPERIMENTS = {
    "temporal_order": (temporal_order.TemporalOrderTask, temporal_order.GRIDS),
    "word_lm": (word_lm.WordLMTask, word_lm.GRIDS),
    "char_lm": (char_lm.CharLMTask, char_lm.GRIDS),
    "ner": (ner.NERTask, {"table": ner.grid}),
    "sentiment": (sentiment.SentimentTask, {"table": sentiment.grid}),
    "memory_loss": (memory_loss.MemoryLossTask, memory_loss.GRIDS),
}


def get(name: str, grid: str = "table"):
    """(task class, grid function) of experiment ``name``: ``grid`` is "table" (the paper's table),
    or another of its grids ("headline": the cells of the seeds study; "conjecture": gal+semeniuta)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment={name!r} is not known; allowed values: {', '.join(map(repr, EXPERIMENTS))}")
    task, grids = EXPERIMENTS[name]
    if grid not in grids:
        raise ValueError(f"grid={grid!r} is not a grid of {name}; allowed values: {', '.join(map(repr, grids))}")
    return task, grids[grid]
