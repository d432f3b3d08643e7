"""recdrop: recurrent dropout without memory loss (Semeniuta, Severyn and Barth, COLING 2016).

Drop-in replacements for torch.nn's RNN, LSTM and GRU layers and cells, with the paper's three
recurrent dropouts (Moon: the cell state; Gal: h_{t-1} where it enters the gates; Semeniuta: the
update vector g_t), and the machinery that replicates the paper's experiments.
"""
from .cells import GRUCell, LSTMCell, RNNCell
from .layers import GRU, LSTM, RNN
from .masks import SAMPLINGS, SCALINGS, SCHEMES, RecurrentDropout

__version__ = "0.1.0"
__all__ = ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell", "RecurrentDropout",
           "SCHEMES", "SAMPLINGS", "SCALINGS"]
