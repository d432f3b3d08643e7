"""The fast path (recdrop.fused) computes what the reference loop computes: outputs, states, gradients."""
import itertools

import pytest
import torch

import recdrop


def run(m, x, hx, masks, fused):
    m.fused = fused
    y, (h, c) = m(x, hx, masks=masks)
    loss = (y * torch.linspace(-1, 1, y.shape[-1], dtype=y.dtype)).sum() + h.sin().sum() + c.cos().sum()
    grads = torch.autograd.grad(loss, [x, *hx, *m.parameters()])
    return (y, h, c, *grads)


@pytest.mark.parametrize("scheme", recdrop.SCHEMES)
@pytest.mark.parametrize("sampling,scaling,training",
                         list(itertools.product(recdrop.SAMPLINGS, recdrop.SCALINGS, (True, False))))
def test_fused_lstm_equals_reference(scheme, sampling, scaling, training):
    torch.manual_seed(0)
    m = recdrop.LSTM(5, 7, 2, bidirectional=True, recurrent_dropout=0.4, scheme=scheme, sampling=sampling,
                     scaling=scaling).double().train(training)
    x = torch.randn(6, 3, 5, dtype=torch.float64, requires_grad=True)
    hx = tuple(torch.randn(4, 3, 7, dtype=torch.float64, requires_grad=True) for _ in range(2))
    masks = m.draw_masks(6, 3, dtype=torch.float64) if training else None
    for a, b in zip(run(m, x, hx, masks, True), run(m, x, hx, masks, False)):
        assert (a - b).abs().max() < 1e-10


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_fused_lstm_equals_reference_without_bias_and_relu(nonlinearity):
    torch.manual_seed(1)
    m = recdrop.LSTM(4, 6, bias=False, nonlinearity=nonlinearity, recurrent_dropout=0.3).double()
    x = torch.randn(5, 2, 4, dtype=torch.float64, requires_grad=True)
    hx = tuple(torch.randn(1, 2, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    masks = m.draw_masks(5, 2, dtype=torch.float64)
    for a, b in zip(run(m, x, hx, masks, True), run(m, x, hx, masks, False)):
        assert (a - b).abs().max() < 1e-10


def test_fused_is_the_default_and_matches_torch():
    ref = torch.nn.LSTM(3, 5).double()
    ours = recdrop.LSTM(3, 5).double()
    ours.load_state_dict(ref.state_dict())
    assert ours.fused
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    assert (ref(x)[0] - ours(x)[0]).abs().max() < 1e-12
