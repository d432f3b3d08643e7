"""The fused LSTM and GRU through the Triton kernels equal them without. Run by tests/test_triton.py
in a subprocess with TRITON_INTERPRET=1 (Triton decides at import whether it interprets), on CPU
tensors; or directly on a CUDA machine (``pytest tests/triton_cases.py``), where the kernels are
compiled and run on the GPU."""
import os

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

import recdrop
from kernel_cases import GRU_SETTINGS, LSTM_SETTINGS
from recdrop import triton_kernels

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
assert INTERPRETING or torch.cuda.is_available(), "run through tests/test_triton.py, or on a CUDA machine"
DEVICE = "cpu" if INTERPRETING else "cuda"


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


# kernel_cases' settings (the interpreter is slow: ~1 s a case)
@pytest.mark.parametrize("scheme,sampling,scaling,training,nonlinearity,bidirectional", LSTM_SETTINGS)
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


def test_a_packed_lstm_through_the_kernels_equals_it_without(monkeypatch):
    """A packed batch keeps every step's c_t (each sequence's final state is taken at its own end): its
    gradient enters the kernels' backward at every step."""
    torch.manual_seed(0)
    m = recdrop.LSTM(3, 5, bidirectional=True, recurrent_dropout=0.3, scheme="gal+semeniuta").double().to(DEVICE)
    seqs = [torch.randn(n, 3, dtype=torch.float64, device=DEVICE) for n in (4, 7, 1, 5)]
    masks = m.draw_masks(7, 4, dtype=torch.float64, device=DEVICE)
    results = []
    for use in (True, False):
        monkeypatch.setenv("RECDROP_TRITON", "1" if use else "0")
        m.zero_grad()
        leaves = [s.clone().requires_grad_() for s in seqs]
        out, (h, c) = m(pack_sequence(leaves, enforce_sorted=False), masks=masks)
        assert m.last_route.triton is use
        padded, _ = pad_packed_sequence(out)
        (padded.sum() + (h * 1.5).sum() + (c * c).sum()).backward()
        results.append([padded, h, c] + [s.grad for s in leaves] + [p.grad.clone() for p in m.parameters()])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


GROUP = [("semeniuta", "per-step"), ("gal", "per-sequence"), ("moon", "per-step")]  # one run each


def _group_through_both_paths(kind, runs, training, monkeypatch, dtype=torch.float64, autocast=False):
    """A group of ``runs`` layers (``layers.run_group``: their weights stacked on a leading dimension; a
    run alone on a group's path is a stack of one, as the char LM trains on a GPU), through the kernels
    and without them, from the same masks: the routes and, per path, the outputs, final states and
    gradients of the inputs, states and parameters."""
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    torch.manual_seed(0)
    ms = [getattr(recdrop, kind)(5, 7, recurrent_dropout=0.3, scheme=sc, sampling=sa, scaling="paper")
          .to(dtype).train(training).to(DEVICE) for sc, sa in GROUP[:runs]]
    x = torch.randn(6, runs, 3, 5, dtype=dtype, device=DEVICE)
    state = [torch.randn(runs, 3, 7, dtype=dtype, device=DEVICE) for _ in range(2 if kind == "LSTM" else 1)]
    results, routes = [], []
    for use in (True, False):
        monkeypatch.setenv("RECDROP_TRITON", "1" if use else "0")
        for r, m in enumerate(ms):
            m.zero_grad()
            m.generator = torch.Generator(DEVICE).manual_seed(r)  # the same masks on both paths
        leaves = [t.clone().requires_grad_() for t in [x, *state]]
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=autocast):
            y, finals = recdrop.layers.run_group(ms, leaves[0], tuple(leaves[1:]))
        routes.append(ms[0].last_route)
        (y.float().sum() + sum((1.5 * f).sum() for f in finals)).backward()
        results.append([y, *finals] + [t.grad for t in leaves] + [p.grad.clone() for m in ms for p in m.parameters()])
    return routes, results


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("runs,training", [(1, True), (3, True), (3, False)])
def test_a_groups_stacked_runs_through_the_kernels_equal_them_without(kind, runs, training, monkeypatch):
    """The kernels index a stack's flat memory ``(R, B, H)``; at test a group's constant factors (Eq. 3,
    ``(R, 1, 1)``) broadcast to it."""
    routes, (through, without) = _group_through_both_paths(kind, runs, training, monkeypatch)
    assert [(r.body, r.triton, r.runs) for r in routes] == [("fused", True, runs), ("fused", False, runs)]
    for a, b in zip(through, without):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("runs", [1, 3])
def test_under_autocast_the_kernels_take_bf16_products_and_equal_the_torch_path(kind, runs, monkeypatch):
    """Under bf16 autocast both take the fused path, with the products (and the LSTM's gates' gradients)
    in bf16 and the states in float32; the kernels read them as the torch path does. They differ by
    the rounding of h_t to bf16 for the next product (Triton's interpreter truncates, a GPU rounds)."""
    routes, (through, without) = _group_through_both_paths(kind, runs, True, monkeypatch, torch.float32, True)
    assert [(r.body, r.triton) for r in routes] == [("fused", True), ("fused", False)]
    assert through[1].dtype == torch.float32  # h_n: the state stays float32
    for a, b in zip(through, without):
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.02)


def test_a_stacked_adam_through_the_kernel_steps_each_run_as_torch_adam(monkeypatch):
    """``triton_kernels.adam_step``, one pass a stacked parameter, at each run's own learning rate: three
    steps equal each model's own ``torch.optim.Adam`` (float32), weights and moments. The step sizes differ
    by 10x between runs, so a run read with another's rate would be far off."""
    from recdrop.models import Dropout, LanguageModel
    from recdrop import updates
    from recdrop.stacked import StackedLanguageModels

    monkeypatch.setenv("RECDROP_TRITON", "1")
    torch.manual_seed(0)
    models = [LanguageModel(11, 4, 5, Dropout(), 0.1).to(DEVICE) for _ in range(3)]
    alone = [LanguageModel(11, 4, 5, Dropout(), 0.1).to(DEVICE) for _ in range(3)]
    for a, m in zip(alone, models):
        a.load_state_dict(m.state_dict())
    lrs = torch.tensor([1e-3, 1e-2, 3e-3], device=DEVICE)
    opts = [torch.optim.Adam(m.parameters(), lr=float(lr)) for m, lr in zip(models, lrs)]
    theirs = [torch.optim.Adam(m.parameters(), lr=float(lr)) for m, lr in zip(alone, lrs)]
    stack = StackedLanguageModels(models)
    adam = updates.Adam(stack.params, [list(m.parameters()) for m in models], opts)
    assert triton_kernels.usable(stack.params[0])
    for step in range(3):
        gen = torch.Generator().manual_seed(step)
        grads = [[torch.randn(p.shape, generator=gen).to(DEVICE) for p in m.parameters()] for m in models]
        for p, g in zip(stack.params, zip(*grads)):
            p.grad = torch.stack(g)
        adam.count()
        adam.update(stack.grads(), lrs)
        for m, o, gs in zip(alone, theirs, grads):
            for p, g in zip(m.parameters(), gs):
                p.grad = g
            o.step()
    for m, a, o, oa in zip(models, alone, opts, theirs):
        for p, q in zip(m.parameters(), a.parameters()):
            # to float32's rounding of updates of about lr: another order of the same operations
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(o.state[p]["exp_avg"], oa.state[q]["exp_avg"], rtol=1e-5, atol=1e-7)
            torch.testing.assert_close(o.state[p]["exp_avg_sq"], oa.state[q]["exp_avg_sq"], rtol=1e-5, atol=1e-9)
