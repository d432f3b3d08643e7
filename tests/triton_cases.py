"""The fused LSTM and GRU through the Triton kernels equal them without. Run by tests/test_triton.py
in a subprocess with TRITON_INTERPRET=1 (Triton decides at import whether it interprets), on CPU
tensors; or directly on a CUDA machine (``pytest tests/triton_cases.py``), where the kernels are
compiled and run on the GPU."""
import os

import pytest
import torch

import recdrop
from recdrop import triton_kernels

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
assert INTERPRETING or torch.cuda.is_available(), "run through tests/test_triton.py, or on a CUDA machine"
DEVICE = "cpu" if INTERPRETING else "cuda"

CASES = [("semeniuta", "per-step"), ("semeniuta", "per-sequence"), ("gal", "per-step"), ("moon", "per-step"),
         ("moon", "per-sequence"), ("gal+semeniuta", "per-step")]


def _assert_paths_agree(module, x, state, masks, loss, monkeypatch):
    """Run ``module(x, state)`` on leaf copies through the Triton kernels and without them; the
    outputs, the gradients of x and of the state, and the parameters' gradients must agree.
    ``state`` is None, a tensor or a tuple of them; ``loss(y, new_state)`` -> (the scalar to
    differentiate, the outputs to compare)."""
    given = [] if state is None else [state] if isinstance(state, torch.Tensor) else list(state)
    results = []
    for use in (True, False):
        monkeypatch.setenv("RECDROP_TRITON", "1" if use else "0")
        assert triton_kernels.usable(x) is use
        module.zero_grad()
        leaves = [t.clone().requires_grad_() for t in [x, *given]]
        st = None if state is None else leaves[1] if isinstance(state, torch.Tensor) else tuple(leaves[1:])
        y, new_state = module(leaves[0], st, masks=masks)
        assert module.last_route.triton is use  # the route the layer took: through the kernels or not
        scalar, outputs = loss(y, new_state)
        scalar.backward()
        results.append(list(outputs) + [t.grad for t in leaves] + [p.grad.clone() for p in module.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# Every scheme and sampling in training with the paper's scaling, plus test mode, inverted
# scaling, relu and a reverse direction on some of them (the interpreter is slow: ~1 s a case).
SETTINGS = [(scheme, sampling, "paper", True, "tanh", False) for scheme, sampling in CASES] + [
    ("semeniuta", "per-step", "paper", False, "tanh", False), ("moon", "per-sequence", "paper", False, "tanh", False),
    ("moon", "per-step", "inverted", True, "tanh", False), ("gal+semeniuta", "per-step", "inverted", True, "tanh", False),
    ("semeniuta", "per-sequence", "paper", True, "relu", True), ("gal", "per-step", "paper", True, "relu", True)]


@pytest.mark.parametrize("scheme,sampling,scaling,training,nonlinearity,bidirectional", SETTINGS)
def test_triton_kernels_equal_the_torch_path(scheme, sampling, scaling, training, nonlinearity, bidirectional,
                                             monkeypatch):
    torch.manual_seed(0)
    m = recdrop.LSTM(5, 7, recurrent_dropout=0.3, scheme=scheme, sampling=sampling, scaling=scaling,
                     nonlinearity=nonlinearity, bidirectional=bidirectional).double().train(training).to(DEVICE)
    x = torch.randn(6, 3, 5, dtype=torch.float64, device=DEVICE)
    h0 = torch.randn(2 if bidirectional else 1, 3, 7, dtype=torch.float64, device=DEVICE)
    c0 = torch.randn_like(h0)

    def loss(y, state):
        h, c = state
        return y.sum() + (h * 1.5).sum() + (c * 0.5).sum(), [y, h, c]
    _assert_paths_agree(m, x, (h0, c0), m.draw_masks(6, 3, device=DEVICE) if training else None, loss, monkeypatch)


GRU_SETTINGS = [("semeniuta", "per-step", "paper", True, "tanh", False), ("gal", "per-sequence", "paper", True, "tanh", False),
                ("moon", "per-step", "inverted", True, "tanh", False), ("gal+semeniuta", "per-step", "paper", True, "relu", True),
                ("semeniuta", "per-sequence", "paper", False, "tanh", True)]


@pytest.mark.parametrize("scheme,sampling,scaling,training,nonlinearity,bidirectional", GRU_SETTINGS)
def test_gru_triton_kernels_equal_the_torch_path(scheme, sampling, scaling, training, nonlinearity, bidirectional,
                                                 monkeypatch):
    torch.manual_seed(0)
    m = recdrop.GRU(5, 7, recurrent_dropout=0.3, scheme=scheme, sampling=sampling, scaling=scaling,
                    nonlinearity=nonlinearity, bidirectional=bidirectional).double().train(training).to(DEVICE)
    x = torch.randn(6, 3, 5, dtype=torch.float64, device=DEVICE)
    h0 = torch.randn(2 if bidirectional else 1, 3, 7, dtype=torch.float64, device=DEVICE)

    def loss(y, h):
        return y.sum() + (h * 1.5).sum(), [y, h]
    _assert_paths_agree(m, x, h0, m.draw_masks(6, 3, device=DEVICE) if training else None, loss, monkeypatch)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("loss_kind", ["sum of h_n (zero-stride gradient)", "permuted h_n (strided gradient)"])
def test_non_contiguous_final_state_gradients(kind, loss_kind, monkeypatch):
    torch.manual_seed(0)
    m = getattr(recdrop, kind)(5, 7, recurrent_dropout=0.3, bidirectional=True).double().to(DEVICE)
    x = torch.randn(6, 3, 5, dtype=torch.float64, device=DEVICE)
    w = torch.randn(14, 2, dtype=torch.float64, device=DEVICE)

    def loss(y, state):
        h_n = state[0] if kind == "LSTM" else state
        extra = h_n.sum() if loss_kind.startswith("sum") else (h_n.permute(1, 0, 2).reshape(3, 14) @ w).pow(2).sum()
        return y.pow(2).sum() + extra, []
    _assert_paths_agree(m, x, None, m.draw_masks(6, 3, device=DEVICE), loss, monkeypatch)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_run_alone_on_a_groups_path_equals_it_through_the_kernels(kind, monkeypatch):
    """A run alone on a group's path is a stack of one (``w_hh`` of shape ``(1, G, H)``; the char LM
    trains so on a GPU). Its route is the fused path without the kernels, whose outputs and gradients equal the run's
    own through the kernels: on a lent H200 (2026-11-27) the kernels' loop was chosen for a stack of one
    and its backward failed."""
    monkeypatch.setattr("recdrop.route.STACK_ON_CPU", True)
    monkeypatch.setenv("RECDROP_TRITON", "1")
    torch.manual_seed(0)
    m = getattr(recdrop, kind)(5, 7, recurrent_dropout=0.3).double().train().to(DEVICE)
    x = torch.randn(6, 3, 5, dtype=torch.float64, device=DEVICE)
    state = [torch.randn(1, 3, 7, dtype=torch.float64, device=DEVICE) for _ in range(2 if kind == "LSTM" else 1)]
    results, routes = [], []
    for group in (True, False):
        m.zero_grad()
        m.generator = torch.Generator(DEVICE).manual_seed(1)  # the same masks on both paths
        leaves = [t.clone().requires_grad_() for t in [x, *state]]
        if group:
            y, finals = recdrop.layers.run_group([m], leaves[0][:, None], tuple(leaves[1:]))
            y = y[:, 0]
        else:
            y, finals = m(leaves[0], tuple(leaves[1:]) if kind == "LSTM" else leaves[1])
        finals = finals if isinstance(finals, tuple) else (finals,)
        routes.append(m.last_route)
        (y.sum() + sum((1.5 * f).sum() for f in finals)).backward()
        results.append([y, *finals] + [t.grad for t in leaves] + [p.grad.clone() for p in m.parameters()])
    assert (routes[0].triton, routes[0].runs, routes[1].triton) == (False, 1, True), routes
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
