"""torch's program transforms on recdrop's layers, on the default (fast) path: tracing, export and
compile give a module that matches eager in eval and in train mode (the same seed draws the same
masks); functorch transforms, forward-mode AD and batched gradients work (layers.plain_ops_needed)."""
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch._dynamo as dynamo

import recdrop

KINDS = ["LSTM", "GRU", "RNN"]


def layer(kind, training, dtype=torch.float32, scaling="paper"):
    """A layer on the fast path. With the paper's scaling its recurrent dropout acts in both modes
    ((1 - p) at test), so that recdrop's own code runs, not torch.nn's, in eval too."""
    torch.manual_seed(0)
    m = getattr(recdrop, kind)(3, 4, 2, bidirectional=True, recurrent_dropout=0.3, scaling=scaling)
    m = m.to(dtype).train(training)
    assert m.fused and (scaling != "paper" or not m._torch_computes_it(torch.randn(5, 2, 3, dtype=dtype)))
    return m


def same_draws(f, g, x):
    """f(x) and g(x) from the same random state: in train mode, the same masks."""
    torch.manual_seed(1)
    a = f(x)
    torch.manual_seed(1)
    b = g(x)
    return a, b


def assert_same_gradients(f, f_params, m, x):
    """f(x) and eager m(x), from the same draws, give each parameter the same gradient; ``f_params`` holds
    f's parameters (``m`` itself where f shares them)."""
    grads = []
    for g, owner in ((f, f_params), (m, m)):
        for p in owner.parameters():
            p.grad = None
        torch.manual_seed(1)
        g(x)[0].pow(2).sum().backward()
        grads.append([p.grad for p in owner.parameters()])
    assert len(grads[0]) == len(grads[1]) and all(g is not None for g in grads[0])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


def assert_outputs_close(a, b):
    torch.testing.assert_close(a[0], b[0])
    for s, t in zip(a[1] if isinstance(a[1], tuple) else (a[1],), b[1] if isinstance(b[1], tuple) else (b[1],)):
        torch.testing.assert_close(s, t)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_trace_matches_eager(kind, training):
    m, x = layer(kind, training), torch.randn(5, 2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates tracing; users still trace
        traced = torch.jit.trace(m, (x,), check_trace=False)
    assert_outputs_close(*same_draws(traced, m, x))
    assert_same_gradients(traced, m, m, x)


@pytest.mark.parametrize("batch_first", [False, True])
def test_a_trace_of_recdrops_own_loop_warns_that_it_runs_the_traced_length_only(batch_first):
    m = recdrop.LSTM(3, 4, batch_first=batch_first, recurrent_dropout=0.3)
    x = torch.randn(2, 5, 3) if batch_first else torch.randn(5, 2, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(m, (x,), check_trace=False)
    assert any(issubclass(w.category, torch.jit.TracerWarning) and "over the traced input's 5 steps" in str(w.message)
               for w in caught), [str(w.message) for w in caught]
    with warnings.catch_warnings(record=True) as caught:  # torch.nn's forward traces as one op: it generalises
        warnings.simplefilter("always")
        torch.jit.trace(m.eval(), (x,), check_trace=False)
    assert not any("traced input's" in str(w.message) for w in caught)


@pytest.mark.parametrize("make", [lambda: recdrop.GRU(3, 4), lambda: recdrop.LSTMCell(3, 4),
                                  lambda: torch.nn.Sequential(torch.nn.Linear(3, 3), recdrop.RNN(3, 4))],
                         ids=["layer", "cell", "inside a model"])
def test_torchscript_is_refused_by_name(make):
    with pytest.raises(NotImplementedError, match=r"recdrop\.\w+ does not support TorchScript"):
        torch.jit.script(make())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_export_matches_eager_and_trains(kind, training):
    m, x = layer(kind, training), torch.randn(5, 2, 3)
    exported = torch.export.export(m, (x,)).module()
    assert_outputs_close(*same_draws(exported, m, x))
    assert_same_gradients(exported, exported, m, x)  # with gradients, not only under no_grad


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@dynamo.config.patch(allow_rnn=True)  # Dynamo runs torch.nn's RNN, GRU, LSTM and their subclasses eagerly otherwise
def test_compile_has_no_graph_break_and_matches_eager(kind, training):
    m, x = layer(kind, training), torch.randn(5, 2, 3)
    dynamo.reset()
    explained = dynamo.explain(m)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    assert_outputs_close(*same_draws(compiled, m, x))
    assert_same_gradients(compiled, m, m, x)


@dynamo.config.patch(allow_rnn=True)
def test_masks_given_in_eval_break_no_graph_and_warn_only_eagerly():
    """In eval given masks are not applied (``RecurrentDropout.factors``): eagerly a warning says so; compiled,
    the warning is left out, as it would break the graph."""
    m, x = layer("LSTM", False), torch.randn(5, 2, 3)
    masks = m.draw_masks(5, 2)
    dynamo.reset()
    explained = dynamo.explain(lambda x: m(x, masks=masks))(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    with pytest.warns(UserWarning, match="masks given in eval mode are not applied"):
        m(x, masks=masks)


@pytest.mark.parametrize("kind", KINDS)
@dynamo.config.patch(allow_rnn=False)  # Dynamo's default (the example tagger sets it for its own process)
def test_under_compile_with_dynamos_defaults_the_layer_runs_eagerly_on_its_fast_path(kind, monkeypatch):
    """Dynamo skips an RNN module without ``allow_rnn`` but compiled the helpers its forward calls, each
    a frame of its own, where the plain per-step loop ran (found by compiling a public word LM): the
    layer now runs eagerly below its forward, on the fast path, with eager's result and gradients."""
    m, x = layer(kind, True), torch.randn(6, 2, 3)
    ref = layer(kind, True)
    calls = {"step": 0, "sequence": 0}
    for name in calls:
        real = getattr(type(m), f"_{name}")

        def counted(self, *args, real=real, name=name, **kwargs):
            calls[name] += 1
            return real(self, *args, **kwargs)
        monkeypatch.setattr(type(m), f"_{name}", counted)
    dynamo.reset()
    compiled = torch.compile(lambda x: m(x)[0].pow(2).sum(), backend="eager")
    torch.manual_seed(1)
    loss = compiled(x)
    loss.backward()
    assert calls == {"step": 0, "sequence": 2}  # 2 layers, each one fused sequence of its two directions
    torch.manual_seed(1)
    ref(x)[0].pow(2).sum().backward()
    torch.testing.assert_close(m.weight_hh_l0.grad, ref.weight_hh_l0.grad)


def _padded_loss(m, x):
    return m(x)[0].pow(2).sum()


def _packed_loss(m, x):
    lengths = torch.arange(x.shape[0], x.shape[0] - x.shape[1], -1).clamp(min=1)
    out, _ = m(torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False))
    return torch.nn.utils.rnn.pad_packed_sequence(out)[0].pow(2).sum()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("loss,breaks", [(_padded_loss, 0), (_packed_loss, 3)], ids=["padded", "packed"])
@dynamo.config.patch(allow_rnn=True)
def test_compile_trains_over_batches_of_varying_length_with_dropout_on(kind, loss, breaks):
    """Issue 36: with dynamic shapes Dynamo refused ``torch.rand(..., generator=None)`` (a training
    batch of a new length crashed); each length now trains, padded and packed, and its gradients are
    finite. Graph breaks: none padded; packed, at most the functions of torch.nn.utils.rnn that Dynamo
    skips: the caller's packing, and the layer's own unpacking and packing (before, a Tensor.item() in
    torch.nn's check of the pack's sizes broke it too)."""
    m = layer(kind, True)
    dynamo.reset()
    assert dynamo.explain(lambda x: loss(m, x))(torch.randn(5, 2, 3)).graph_break_count <= breaks
    dynamo.reset()
    compiled = torch.compile(lambda x: loss(m, x), dynamic=True, backend="eager")
    for steps in (5, 7, 9):
        m.zero_grad()
        compiled(torch.randn(steps, 2, 3)).backward()
        assert torch.isfinite(m.weight_hh_l0.grad).all() and m.weight_hh_l0.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", KINDS)
def test_functorch_transforms_and_forward_ad(kind):
    m = layer(kind, False, torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    loss = lambda x: m(x)[0].pow(2).sum()  # noqa: E731
    torch.testing.assert_close(torch.func.grad(loss)(x), torch.autograd.grad(loss(x.requires_grad_()), x)[0])
    x = x.detach()
    xs = torch.randn(3, 5, 2, 3, dtype=torch.float64)
    torch.testing.assert_close(torch.func.vmap(lambda x: m(x)[0])(xs), torch.stack([m(xi)[0] for xi in xs]))
    tangent = torch.randn_like(x)
    _, jvp = torch.func.jvp(lambda x: m(x)[0], (x,), (tangent,))
    eps = 1e-6  # against a central difference
    torch.testing.assert_close(jvp, (m(x + eps * tangent)[0] - m(x - eps * tangent)[0]) / (2 * eps),
                               atol=1e-7, rtol=1e-6)
    with fwAD.dual_level():
        dual = fwAD.unpack_dual(m(fwAD.make_dual(x, tangent))[0]).tangent
    torch.testing.assert_close(dual, jvp)


@pytest.mark.parametrize("kind", KINDS)
def test_batched_gradients_through_the_fast_backward(kind):
    m = layer(kind, True, torch.float64)
    x = torch.randn(4, 2, 3, dtype=torch.float64, requires_grad=True)
    masks = m.draw_masks(4, 2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: m(x, masks=masks)[0], (x,), check_batched_grad=True)
    jac = torch.autograd.functional.jacobian(lambda x: m(x, masks=masks)[0], x, vectorize=True)
    m.fused = False
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(lambda x: m(x, masks=masks)[0], x))


@pytest.mark.parametrize("kind", KINDS)
def test_autocast_mixed_precision(kind):
    m, x = layer(kind, True, scaling="inverted"), torch.randn(5, 2, 3)  # eval then equals torch.nn's
    proj = torch.nn.Linear(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(proj(x))[0]  # a bfloat16 input into float32 weights, with recurrent dropout
    y.float().sum().backward()
    assert all(p.grad is not None and p.grad.isfinite().all() for p in m.parameters())
    ref = getattr(torch.nn, kind)(3, 4, 2, bidirectional=True).eval()
    ref.load_state_dict(m.state_dict())
    m.eval().torch_kernels = False  # recdrop's own ops under autocast, against torch.nn's
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(m(proj(x))[0].float(), ref(proj(x))[0].float(), atol=3e-2, rtol=3e-2)
