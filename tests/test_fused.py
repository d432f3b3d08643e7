"""The fast path (recdrop.fused) computes what the reference loop computes: outputs, states, gradients."""
import itertools

import pytest
import torch

import recdrop


def run(m, x, hx, masks, fused):
    """Outputs, final states and the gradients of x, the initial states (a tuple) and every parameter."""
    m.fused = fused
    y, state = m(x, hx if len(hx) == 2 else hx[0], masks=masks)
    states = state if isinstance(state, tuple) else (state,)
    loss = (y * torch.linspace(-1, 1, y.shape[-1], dtype=y.dtype)).sum() + sum(s.sin().sum() for s in states)
    grads = torch.autograd.grad(loss, [x, *hx, *m.parameters()])
    return (y, *states, *grads)


def initial_state(kind, shape):
    n = 2 if kind == "LSTM" else 1
    return tuple(torch.randn(shape, dtype=torch.float64, requires_grad=True) for _ in range(n))


CASES = [(k, s) for k in ("LSTM", "GRU") for s in recdrop.SCHEMES] + [("RNN", s) for s in ("semeniuta", "gal", "moon")]


@pytest.mark.parametrize("kind,scheme", CASES)
@pytest.mark.parametrize("sampling,scaling,training",
                         list(itertools.product(recdrop.SAMPLINGS, recdrop.SCALINGS, (True, False))))
def test_fused_equals_reference(kind, scheme, sampling, scaling, training):
    torch.manual_seed(0)
    m = getattr(recdrop, kind)(5, 7, 2, bidirectional=True, recurrent_dropout=0.4, scheme=scheme,
                               sampling=sampling, scaling=scaling).double().train(training)
    x = torch.randn(6, 3, 5, dtype=torch.float64, requires_grad=True)
    hx = initial_state(kind, (4, 3, 7))
    masks = m.draw_masks(6, 3, dtype=torch.float64) if training else None
    fast = run(m, x, hx, masks, True)
    ref = run(m, x, hx, masks, False)
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref):
        assert (a - b).abs().max() < 1e-10


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_fused_equals_reference_without_bias_and_relu(kind, nonlinearity):
    torch.manual_seed(1)
    m = getattr(recdrop, kind)(4, 6, bias=False, nonlinearity=nonlinearity, recurrent_dropout=0.3).double()
    x = torch.randn(5, 2, 4, dtype=torch.float64, requires_grad=True)
    hx = initial_state(kind, (1, 2, 6))
    masks = m.draw_masks(5, 2, dtype=torch.float64)
    for a, b in zip(run(m, x, hx, masks, True), run(m, x, hx, masks, False)):
        assert (a - b).abs().max() < 1e-10


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_fused_is_the_default_and_matches_torch(kind):
    ref = getattr(torch.nn, kind)(3, 5).double()
    ours = getattr(recdrop, kind)(3, 5).double()
    ours.load_state_dict(ref.state_dict())
    assert ours.fused
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    assert (ref(x)[0] - ours(x)[0]).abs().max() < 1e-12


def test_double_backward_is_a_clear_error_and_the_loop_supports_it():
    m = recdrop.LSTM(3, 4).double()
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="higher-order gradients.*fused = False"):
        torch.autograd.grad(m(x)[0].pow(2).sum(), x, create_graph=True)
    m.fused = False
    (g,) = torch.autograd.grad(m(x)[0].pow(2).sum(), x, create_graph=True)
    assert torch.autograd.grad(g.sum(), x)[0].abs().sum() > 0
