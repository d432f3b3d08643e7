"""The fast path (recdrop.fused) computes what the reference loop computes: outputs, states, gradients."""
import re

import pytest
import torch

import recdrop
from kernel_cases import TRAINING_AND_TEST


@pytest.fixture(autouse=True)
def products_through_onednn(monkeypatch):
    """A CPU's float32 products through oneDNN whatever the CPU's maker (``recdrop.cpu_products``): these
    tests check that path."""
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "onednn")


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
@pytest.mark.parametrize("sampling,scaling,training", TRAINING_AND_TEST)
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
def test_fused_in_float32_with_packed_weights_equals_reference(kind, scheme, batch, monkeypatch):
    """On a CPU in float32 the per-step matmuls of a loop in Python (the GRU's, or the LSTM's without the
    C++ kernels, whose loop has its own products) run on oneDNN with the weight packed once per
    sequence: the same numbers as the reference loop's torch.mm, to float32 rounding. The products
    here are small, so the size above which the weight is packed is lowered to 0, and the test
    counts the packings (at these sizes the fast path would otherwise take torch.addmm)."""
    from recdrop import fused

    if kind == "LSTM":
        monkeypatch.setenv("RECDROP_CPU_KERNELS", "0")
    torch.manual_seed(2)
    m = getattr(recdrop, kind)(8, 32, recurrent_dropout=0.25, scheme=scheme)  # one direction: one run's products
    if not fused._packed_matmul_usable(m.weight_hh_l0):
        pytest.skip("this torch has no oneDNN prepacked linear: the fast path uses torch.mm")
    packings = []
    reorder = torch.ops.mkldnn._reorder_linear_weight
    monkeypatch.setattr(fused, "SMALL_PRODUCT", 0)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", lambda *a: packings.append(a) or reorder(*a))
    x = torch.randn(7, batch, 8, requires_grad=True)
    hx = tuple(torch.randn(1, batch, 32, requires_grad=True) for _ in range(2 if kind == "LSTM" else 1))
    masks = m.draw_masks(7, batch)
    fast = run(m, x, hx, masks, True)
    assert packings, "the fast path packed no weight"
    ref = run(m, x, hx, masks, False)
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref):
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
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    assert (ref(x)[0] - ours(x)[0]).abs().max() < 1e-12
    assert ours.last_route.body == "fused"  # the fast path, not the loop, unless told otherwise


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
    for a, b in zip(fast, ref):  # second-order gradients reach 1e4 here: float64 rounding is relative
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert sum(g.abs().sum() for g in fast[len(hx) + 1:]) > 0  # the second-order gradients are not all zero


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_gradgradcheck_on_the_fast_path(kind):
    m = getattr(recdrop, kind)(2, 3, recurrent_dropout=0.3).double()
    x = torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
    masks = m.draw_masks(4, 2, dtype=torch.float64)
    w = m.weight_hh_l0

    def f(x, w):
        return torch.func.functional_call(m, {"weight_hh_l0": w}, (x,), {"masks": masks})[0]

    assert torch.autograd.gradcheck(f, (x, w)) and torch.autograd.gradgradcheck(f, (x, w))
    assert m.last_route.body == "fused"


def _onednn_or_skip(*tensors):
    from recdrop.fused import _onednn_usable
    if not _onednn_usable(*tensors):
        pytest.skip("this torch has no oneDNN linear: recdrop uses torch.mm")


@pytest.mark.parametrize("shape", [(40, 70, 30), (10, 200, 5)])  # a transposed: oneDNN copies a, or b and the result
@pytest.mark.parametrize("a_transposed", [False, True])
@pytest.mark.parametrize("b_transposed", [False, True])
def test_matmul_through_onednn_equals_torch_mm_in_every_layout(a_transposed, b_transposed, shape):
    from recdrop.fused import matmul
    torch.manual_seed(0)
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    if a_transposed:  # the same values, held column-major
        a = a.t().contiguous().t()
    if b_transposed:
        b = b.t().contiguous().t()
    assert a.is_contiguous() != a_transposed and b.is_contiguous() != b_transposed
    _onednn_or_skip(a, b)
    got, want = matmul(a, b), torch.mm(a, b)
    assert got.shape == want.shape and torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.is_contiguous()  # as a weight's .grad takes it, without another copy
    a64, b64 = a.double(), b.double()
    assert torch.equal(matmul(a64, b64), torch.mm(a64, b64))  # float64: torch.mm itself


@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 5)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_through_onednn_equals_f_linear_with_its_gradients(shape, bias):
    from recdrop.fused import _OneDNNLinear, linear
    torch.manual_seed(1)
    x = torch.randn(*shape, requires_grad=True)
    w = torch.randn(7, 5, requires_grad=True)
    b = torch.randn(7, requires_grad=True) if bias else None
    _onednn_or_skip(x, w)
    inputs = [t for t in (x, w, b) if t is not None]
    y = linear(x, w, b)
    assert y.grad_fn.name().startswith(_OneDNNLinear.__name__)
    ref = torch.nn.functional.linear(x, w, b)
    assert torch.allclose(y, ref, rtol=1e-5, atol=1e-6)
    dy = torch.randn_like(ref)
    got = torch.autograd.grad(y, inputs, dy, create_graph=True)
    want = torch.autograd.grad(ref, inputs, dy, create_graph=True)
    for g, r in zip(got, want):
        assert torch.allclose(g, r, rtol=1e-5, atol=1e-5)
    # double backward (create_graph) is differentiable too, and equal to F.linear's
    got2 = torch.autograd.grad(sum((g * g).sum() for g in got), inputs, allow_unused=True)
    want2 = torch.autograd.grad(sum((g * g).sum() for g in want), inputs, allow_unused=True)
    for g, r in zip(got2, want2):
        assert (g is None and r is None) or torch.allclose(g, r, rtol=1e-4, atol=1e-4)


def test_linear_falls_back_to_f_linear_off_a_float32_cpu():
    from recdrop.fused import linear
    x, w = torch.randn(3, 5, dtype=torch.float64, requires_grad=True), torch.randn(4, 5, dtype=torch.float64)
    assert torch.equal(linear(x, w), torch.nn.functional.linear(x, w))
    assert "OneDNN" not in linear(x, w).grad_fn.name()
    assert torch.autograd.gradcheck(lambda x: linear(x, w), (x,))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_the_fast_path_projects_its_inputs_through_onednn(kind, monkeypatch):
    from recdrop import fused
    m = getattr(recdrop, kind)(5, 8, recurrent_dropout=0.25)
    _onednn_or_skip(m.weight_ih_l0)
    calls = []
    real = fused._OneDNNLinear.apply
    monkeypatch.setattr(fused._OneDNNLinear, "apply", lambda *a: calls.append(a[0].shape) or real(*a))
    m(torch.randn(6, 2, 5))[0].sum().backward()
    assert calls == [(6, 2, 5)]


def test_linear_reads_a_strided_bias_as_strided():
    from recdrop.fused import linear
    x, w = torch.randn(4, 5), torch.randn(7, 5)
    _onednn_or_skip(x, w)
    for b in (torch.arange(14.0)[::2], torch.tensor([1.0]).expand(7)):
        assert torch.allclose(linear(x, w, b), torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-5)


def test_a_gru_with_a_strided_bias_equals_its_reference_loop():
    m = recdrop.GRU(5, 8, recurrent_dropout=0.25)
    _onednn_or_skip(m.weight_ih_l0)
    params = {k: v for k, v in m.named_parameters()}
    for name in ("bias_ih_l0", "bias_hh_l0"):
        params[name] = torch.randn(2 * params[name].numel())[::2]
    x = torch.randn(6, 3, 5)
    masks = m.draw_masks(6, 3)
    outs = []
    for fused in (True, False):
        m.fused = fused
        outs.append(torch.func.functional_call(m, params, (x,), {"masks": masks})[0])
    assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("shape", [(6, 0, 5), (0, 3, 5)])
@pytest.mark.parametrize("bidirectional", [False, True], ids=["one direction", "both"])
def test_an_empty_batch_or_sequence_trains_as_torch_nn_does(kind, shape, bidirectional):
    m = getattr(recdrop, kind)(5, 8, recurrent_dropout=0.25, bidirectional=bidirectional)
    x = torch.randn(*shape, requires_grad=True)
    try:
        torch_out = getattr(torch.nn, kind)(5, 8, bidirectional=bidirectional)(x)[0]
    except RuntimeError as refused:  # an empty sequence: ours refuses it too, with torch.nn's error
        for mode in (m.train(), m.eval()):
            with pytest.raises(RuntimeError, match=re.escape(str(refused))):
                mode(x)
        return
    y = m(x)[0]
    assert y.shape == torch_out.shape
    y.sum().backward()
    assert x.grad.shape == x.shape and m.weight_hh_l0.grad is not None


def test_onednn_is_not_used_where_torch_disables_it():
    from recdrop.fused import linear
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(7, 5)
    _onednn_or_skip(x, w)
    with torch.backends.mkldnn.flags(enabled=False):
        assert "OneDNN" not in linear(x, w).grad_fn.name()
    assert "OneDNN" in linear(x, w).grad_fn.name()


def test_the_language_models_decoder_is_a_linear_module_whose_hooks_run():
    from recdrop.models import Dropout, LanguageModel
    model = LanguageModel(11, 4, 5, Dropout(), init_scale=0.1)
    assert isinstance(model.out, torch.nn.Linear) and set(model.out.state_dict()) == {"weight", "bias"}
    seen = []
    model.out.register_forward_hook(lambda mod, inp, out: seen.append(out.shape))
    logits, _ = model(torch.randint(11, (7, 2)), None)
    assert seen == [logits.shape] == [(7, 2, 11)]


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_bidirectional_layers_directions_run_as_one_group_of_two(kind, monkeypatch):
    """Both directions of a layer run as one group on the fast path (their weights stacked, the reverse
    direction's input flipped in time): a bidirectional forward and backward dispatches about the ops of
    one direction, not twice as many, and says it ran as one run (its route)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountOps(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountOps.count += 1
            return func(*args, **(kwargs or {}))

    def ops(bidirectional: bool) -> int:
        m = getattr(recdrop, kind)(6, 8, bidirectional=bidirectional, recurrent_dropout=0.25).train()
        x = torch.randn(12, 3, 6, requires_grad=True)
        CountOps.count = 0
        with CountOps():
            y, _ = m(x)
            y.sum().backward()
        assert str(m.last_route) == "fused"
        return CountOps.count
    monkeypatch.setenv("RECDROP_CPU_KERNELS", "0")  # each step's torch ops, which a second run would double
    one, both = ops(False), ops(True)
    assert both < 1.3 * one, (one, both)  # two directions one after the other: about twice one's
