"""Bad arguments and bad input get a ValueError naming the argument and the allowed values."""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import recdrop

LAYERS = [recdrop.LSTM, recdrop.GRU, recdrop.RNN]
CELLS = [recdrop.LSTMCell, recdrop.GRUCell, recdrop.RNNCell]


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5, "0.5", None, True])
def test_rate_outside_range(cls, rate):
    with pytest.raises(ValueError, match=r"recurrent_dropout.*\[0, 1\)"):
        cls(3, 4, recurrent_dropout=rate)


@pytest.mark.parametrize("cls", LAYERS + CELLS)
@pytest.mark.parametrize("arg,value,allowed", [
    ("scheme", "zaremba", "'semeniuta'"), ("sampling", "per_step", "'per-sequence'"),
    ("scaling", "none", "'inverted'"), ("nonlinearity", "sigmoid", "'relu'")])
def test_unknown_choice(cls, arg, value, allowed):
    with pytest.raises(ValueError, match=f"{arg}='{value}'.*allowed values:.*{allowed}"):
        cls(3, 4, recurrent_dropout=0.25, **{arg: value})


@pytest.mark.parametrize("cls", [recdrop.RNN, recdrop.RNNCell])
def test_rnn_rejects_combined_scheme(cls):
    with pytest.raises(ValueError, match="scheme='gal\\+semeniuta'"):
        cls(3, 4, recurrent_dropout=0.25, scheme="gal+semeniuta")


@pytest.mark.parametrize("cls", LAYERS)
def test_forward_dropout_and_sizes(cls):
    with pytest.raises(ValueError, match="dropout"):
        cls(3, 4, 2, dropout=1.2)
    with pytest.raises(ValueError, match="hidden_size"):
        cls(3, 0)
    with pytest.raises(ValueError, match="num_layers"):
        cls(3, 4, 0)


@pytest.mark.parametrize("cls", LAYERS)
def test_wrong_input_rank_and_features(cls):
    m = cls(3, 4)
    with pytest.raises(ValueError, match="input must be 3-D"):
        m(torch.randn(2, 5, 3, 1))
    with pytest.raises(ValueError, match="input must be 3-D"):
        m(torch.randn(3))
    with pytest.raises(ValueError, match="input_size=3"):
        m(torch.randn(5, 2, 4))


@pytest.mark.parametrize("cls", LAYERS)
def test_initial_state_wrong_shape(cls):
    m = cls(3, 4, 2)
    x = torch.randn(5, 2, 3)
    bad = torch.zeros(1, 2, 4)  # one layer's worth, for a two-layer module: no broadcasting
    hx = (bad, torch.zeros(2, 2, 4)) if cls is recdrop.LSTM else bad
    with pytest.raises(ValueError, match=r"hx: h_0 must have shape \(2, 2, 4\)"):
        m(x, hx)
    if cls is recdrop.LSTM:
        with pytest.raises(ValueError, match=r"hx must be a tuple \(h_0, c_0\)"):
            m(x, (torch.zeros(2, 2, 4),))


@pytest.mark.parametrize("cls", CELLS)
def test_cell_bad_input(cls):
    cell = cls(3, 4)
    with pytest.raises(ValueError, match=r"input must be 2-D \(batched\) or 1-D"):
        cell(torch.randn(2, 2, 3))
    with pytest.raises(ValueError, match="input_size=3"):
        cell(torch.randn(2, 5))
    bad = torch.zeros(3, 4)
    with pytest.raises(ValueError, match=r"hx: h_0 must have shape \(2, 4\)"):
        cell(torch.randn(2, 3), (bad, bad) if cls is recdrop.LSTMCell else bad)


def test_given_masks_checked():
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.5, scheme="semeniuta", sampling="per-step")
    x = torch.randn(5, 2, 3)
    with pytest.raises(ValueError, match=r"masks\['semeniuta'\] must have shape \(5, 2, 4\)"):
        m(x, masks=[{"semeniuta": torch.ones(2, 4)}])
    with pytest.raises(ValueError, match="keys \\['semeniuta'\\]"):
        m(x, masks=[{"moon": torch.ones(5, 2, 4)}])


def test_a_bad_proj_size_is_torch_nns_error():
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
            recdrop.LSTM(3, 4, proj_size=bad)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        recdrop.LSTM(3, 4, proj_size=4)
    m = recdrop.LSTM(3, 4, proj_size=2)  # h_0 has proj_size units, c_0 hidden_size
    with pytest.raises(ValueError, match=r"h_0 must have shape \(1, 5, 2\)"):
        m(torch.randn(7, 5, 3), (torch.zeros(1, 5, 4), torch.zeros(1, 5, 4)))
    m = recdrop.LSTM(3, 4, proj_size=2, recurrent_dropout=0.5, scheme="gal")  # Gal drops h_{t-1}: 2 units
    with pytest.raises(ValueError, match=r"masks\['gal'\] must have shape \(7, 5, 2\)"):
        m(torch.randn(7, 5, 3), masks=[{"gal": torch.ones(7, 5, 4)}])


def test_packed_input_is_supported():
    m = recdrop.LSTM(3, 4)  # tests/test_packed.py
    packed = pack_padded_sequence(torch.randn(5, 2, 3), torch.tensor([5, 3]))
    assert isinstance(m(packed)[0], type(packed))
