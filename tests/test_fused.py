"""The fast path (recdrop.fused) computes what the reference loop computes: outputs, states, gradients."""
import itertools

import pytest
import torch

import recdrop


def run(m, x, hx, masks, fused):
    """Outputs, final states and the gradients of x, the initial states (a tuple) and every parameter."""
    m.fused, m.torch_kernels = fused, False  # recdrop's own paths, also where no dropout acts
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


@pytest.mark.parametrize("kind,scheme", CASES)
@pytest.mark.parametrize("batch", [1, 3, 16])
def test_fused_in_float32_with_packed_weights_equals_reference(kind, scheme, batch):
    """On a CPU in float32 the per-step matmuls run on oneDNN with the weight packed once per
    sequence: the same numbers as the reference loop's torch.mm, to float32 rounding."""
    from recdrop.fused import _packed_matmul_usable

    torch.manual_seed(2)
    m = getattr(recdrop, kind)(8, 32, bidirectional=True, recurrent_dropout=0.25, scheme=scheme)
    if not _packed_matmul_usable(m.weight_hh_l0):
        pytest.skip("this torch has no oneDNN prepacked linear: the fast path uses torch.mm")
    x = torch.randn(7, batch, 8, requires_grad=True)
    hx = tuple(torch.randn(2, batch, 32, requires_grad=True) for _ in range(2 if kind == "LSTM" else 1))
    masks = m.draw_masks(7, batch)
    for a, b in zip(run(m, x, hx, masks, True), run(m, x, hx, masks, False)):
        assert (a - b).abs().max() < 2e-5 * max(1.0, b.abs().max().item())


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
    ours.torch_kernels = False  # recdrop's own path where no dropout acts
    assert ours.fused
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    assert (ref(x)[0] - ours(x)[0]).abs().max() < 1e-12


def second_order(m, x, hx, masks, fused):
    """The gradient of x and the initial states under create_graph=True, then the gradients of their
    (weighted) sum with respect to x, the initial states and every parameter."""
    m.fused = fused
    y, state = m(x, hx if len(hx) == 2 else hx[0], masks=masks)
    states = state if isinstance(state, tuple) else (state,)
    loss = (y * torch.linspace(-1, 1, y.shape[-1], dtype=y.dtype)).pow(2).sum() + sum(s.sin().sum() for s in states)
    first = torch.autograd.grad(loss, [x, *hx], create_graph=True)
    inputs = [x, *hx, *m.parameters()]
    second = torch.autograd.grad(sum((g * g).sum() for g in first), inputs, allow_unused=True)
    return [*first, *(torch.zeros_like(i) if g is None else g for g, i in zip(second, inputs))]


@pytest.mark.parametrize("kind,scheme", CASES)
@pytest.mark.parametrize("sampling", recdrop.SAMPLINGS)
def test_higher_order_gradients_on_the_fast_path_equal_the_loop(kind, scheme, sampling):
    torch.manual_seed(2)
    m = getattr(recdrop, kind)(3, 4, 2, bidirectional=True, recurrent_dropout=0.4, scheme=scheme,
                               sampling=sampling).double()
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    hx = initial_state(kind, (4, 2, 4))
    masks = m.draw_masks(5, 2, dtype=torch.float64)
    fast, ref = second_order(m, x, hx, masks, True), second_order(m, x, hx, masks, False)
    for a, b in zip(fast, ref):
        assert (a - b).abs().max() < 1e-10
    assert sum(g.abs().sum() for g in fast[len(hx) + 1:]) > 0  # the second-order gradients are not all zero


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_gradgradcheck_on_the_fast_path(kind):
    m = getattr(recdrop, kind)(2, 3, recurrent_dropout=0.3).double()
    assert m.fused
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    masks = m.draw_masks(4, 2, dtype=torch.float64)
    w = m.weight_hh_l0

    def f(x, w):
        return torch.func.functional_call(m, {"weight_hh_l0": w}, (x,), {"masks": masks})[0]

    assert torch.autograd.gradcheck(f, (x, w)) and torch.autograd.gradgradcheck(f, (x, w))
