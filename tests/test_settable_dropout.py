"""The recurrent dropout's settings can be changed after construction (issue 36): checked as at
construction, acting from the next call, as torch.nn.LSTM's ``dropout`` does."""
import pytest
import torch

import recdrop

LAYERS = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}
CELLS = {"LSTMCell": torch.nn.LSTMCell, "GRUCell": torch.nn.GRUCell, "RNNCell": torch.nn.RNNCell}


@pytest.mark.parametrize("kind", list(LAYERS))
def test_setting_the_rate_to_zero_after_construction_gives_torch_nns_output_in_training(kind):
    torch.manual_seed(0)
    ours = getattr(recdrop, kind)(3, 5, recurrent_dropout=0.5).train()
    ref = LAYERS[kind](3, 5).train()
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(7, 2, 3)
    assert not torch.allclose(ours(x)[0], ref(x)[0])  # dropout acts
    ours.recurrent_dropout = 0
    assert ours.recurrent_dropout == 0.0 and ours.rdrop.p == 0.0
    torch.testing.assert_close(ours(x)[0], ref(x)[0])
    ours.recurrent_dropout = 0.25  # and back on, from the next call
    assert not torch.allclose(ours(x)[0], ref(x)[0])


@pytest.mark.parametrize("kind", list(CELLS))
def test_a_cells_settings_are_settable_too_and_a_per_sequence_mask_is_drawn_anew(kind):
    torch.manual_seed(0)
    cell = getattr(recdrop, kind)(3, 4, recurrent_dropout=0.5, sampling="per-sequence").train()
    ref = CELLS[kind](3, 4)
    ref.load_state_dict(cell.state_dict())
    x, h0 = torch.randn(2, 3), torch.randn(2, 4)  # a state that is not zero: Moon's and Gal's masks drop it
    state = (h0, h0) if kind == "LSTMCell" else h0
    cell.torch_kernels = False  # our own cell throughout, also where no dropout acts

    def h(out):
        return out[0] if isinstance(out, tuple) else out
    assert not torch.allclose(h(cell(x, state)), h(ref(x, state)))  # dropout acts
    old = cell._sequence_masks
    assert old is not None
    cell.recurrent_dropout = 0.0
    assert cell._sequence_masks is None  # drawn under the old settings: forgotten
    torch.testing.assert_close(h(cell(x, state)), h(ref(x, state)))
    cell.recurrent_dropout = 0.25  # on again: a new mask from the next call, kept for the sequence
    out = h(cell(x, state))
    assert not torch.allclose(out, h(ref(x, state)))
    new = cell._sequence_masks
    assert new is not None and new is not old
    torch.testing.assert_close(h(cell(x, state)), out)  # per sequence: the same mask at the next step


def test_each_setting_is_checked_as_at_construction_and_a_refused_one_changes_nothing():
    lstm = recdrop.LSTM(3, 4, recurrent_dropout=0.25)
    for name, bad, message in [("recurrent_dropout", 1.0, "recurrent_dropout"),
                               ("recurrent_dropout", -0.1, "recurrent_dropout"),
                               ("scheme", "bogus", "scheme"), ("sampling", "per-batch", "sampling"),
                               ("scaling", "none", "scaling")]:
        with pytest.raises(ValueError, match=message):
            setattr(lstm, name, bad)
    assert (lstm.recurrent_dropout, lstm.scheme, lstm.sampling, lstm.scaling) == (0.25, "semeniuta", "per-step",
                                                                                 "inverted")
    with pytest.raises(ValueError, match="scheme"):
        recdrop.RNN(3, 4).scheme = "gal+semeniuta"  # the vanilla RNN refuses it at construction too
    lstm.scheme, lstm.sampling, lstm.scaling = "moon", "per-sequence", "paper"
    assert "scheme='moon', sampling='per-sequence', scaling='paper'" in repr(lstm)
    masks = lstm.draw_masks(5, 2)
    assert set(masks[0]) == {"moon"} and masks[0]["moon"].shape == (2, 4)  # per sequence, Moon's target


def test_the_nonlinearity_is_settable_checked_and_torch_nns_mode_follows_it():
    """Set after construction, the RNN's nonlinearity is what both paths compute: torch.nn's forward
    (where no dropout acts, which reads ``mode``) and recdrop's own."""
    torch.manual_seed(0)
    rnn = recdrop.RNN(3, 4, recurrent_dropout=0.3).eval()
    rnn.nonlinearity = "relu"
    assert rnn.mode == "RNN_RELU" and "nonlinearity='relu'" in repr(rnn)
    x = torch.randn(5, 2, 3)
    torch_path = rnn(x)[0]
    assert rnn.last_route.body == "torch.nn"
    rnn.torch_kernels = False
    torch.testing.assert_close(rnn(x)[0], torch_path)
    assert (torch_path >= 0).all()  # relu's, not tanh's
    with pytest.raises(ValueError, match="nonlinearity='gelu' is not valid"):
        rnn.nonlinearity = "gelu"
    assert (rnn.nonlinearity, rnn.mode) == ("relu", "RNN_RELU")  # a refused value changes nothing
    cell = recdrop.RNNCell(3, 4)
    cell.nonlinearity = "relu"
    assert (cell(torch.randn(2, 3)) >= 0).all()
