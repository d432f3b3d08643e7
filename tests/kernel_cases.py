"""The settings on which the layers are checked: against the paper's equations and the fast path against
the reference loop, (sampling, scaling, training); the step kernels (recdrop.triton_kernels,
recdrop.cpu_kernels) against the torch path, (scheme, sampling, scaling, training, nonlinearity,
bidirectional)."""
import recdrop

# Training with each sampling and scaling; at test no mask is drawn, so one sampling stands for both.
TRAINING_AND_TEST = [(sampling, scaling, True) for sampling in recdrop.SAMPLINGS for scaling in recdrop.SCALINGS] + \
    [("per-step", scaling, False) for scaling in recdrop.SCALINGS]

# Every scheme and sampling in training with the paper's scaling, plus test mode, inverted scaling,
# relu and a reverse direction on some of them.
CASES = [("semeniuta", "per-step"), ("semeniuta", "per-sequence"), ("gal", "per-step"), ("moon", "per-step"),
         ("moon", "per-sequence"), ("gal+semeniuta", "per-step")]
LSTM_SETTINGS = [(scheme, sampling, "paper", True, "tanh", False) for scheme, sampling in CASES] + [
    ("semeniuta", "per-step", "paper", False, "tanh", False),
    ("moon", "per-sequence", "paper", False, "tanh", False),
    ("moon", "per-step", "inverted", True, "tanh", False),
    ("gal+semeniuta", "per-step", "inverted", True, "tanh", False),
    ("semeniuta", "per-sequence", "paper", True, "relu", True),
    ("gal", "per-step", "paper", True, "relu", True)]
GRU_SETTINGS = [("semeniuta", "per-step", "paper", True, "tanh", False),
                ("gal", "per-sequence", "paper", True, "tanh", False),
                ("moon", "per-step", "inverted", True, "tanh", False),
                ("gal+semeniuta", "per-step", "paper", True, "relu", True),
                ("semeniuta", "per-sequence", "paper", False, "tanh", True)]
