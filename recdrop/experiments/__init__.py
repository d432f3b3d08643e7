"""One module per paper experiment: its config and scales, its grid (the table's cells), its task."""
from . import char_lm, ner, sentiment, temporal_order, word_lm

EXPERIMENTS = {
    "temporal_order": (temporal_order.TemporalOrderTask, temporal_order.grid),
    "word_lm": (word_lm.WordLMTask, word_lm.grid),
    "char_lm": (char_lm.CharLMTask, char_lm.grid),
    "ner": (ner.NERTask, ner.grid),
    "sentiment": (sentiment.SentimentTask, sentiment.grid),
}


def get(name: str):
    """(task class, grid function) of experiment ``name``."""
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment={name!r} is not known; allowed values: {', '.join(map(repr, EXPERIMENTS))}")
    return EXPERIMENTS[name]
