"""With recurrent dropout off (or in eval() with inverted scaling) recdrop computes what torch.nn computes:
by default it then runs torch.nn's own forward; here its own paths (the fast path and the plain loop,
``fused``) are checked against torch.nn (``torch_kernels = False``)."""
import pytest
import torch

import recdrop

KINDS = ["LSTM", "GRU", "RNN"]
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def twins(kind, dtype, *args, fused=True, **kwargs):
    ref = getattr(torch.nn, kind)(*args, **kwargs).to(dtype)
    ours = getattr(recdrop, kind)(*args, **kwargs).to(dtype)
    ours.load_state_dict(ref.state_dict())
    ours.torch_kernels = False  # recdrop's own computation, not torch.nn's forward
    ours.fused = fused  # its fast path, or the plain loop over recdrop.cells' steps
    return ref, ours


def assert_close(a, b, tol):
    assert a.shape == b.shape
    assert (a - b).abs().max().item() <= tol, (a - b).abs().max().item()


def run_both(ref, ours, x, hx, tol):
    outs = []
    for m in (ref, ours):
        y, state = m(x, hx)
        states = state if isinstance(state, tuple) else (state,)
        loss = y.pow(2).sum() + sum(s.sin().sum() for s in states)
        grads = torch.autograd.grad(loss, list(m.parameters()))
        outs.append((y, states, grads))
    (y1, s1, g1), (y2, s2, g2) = outs
    assert len(s1) == len(s2) and len(g1) == len(g2)  # every state and gradient: zip stops at the shorter
    assert_close(y1, y2, tol)
    for a, b in zip(s1, s2):
        assert_close(a, b, tol)
    for a, b in zip(g1, g2):
        assert_close(a, b, tol * 10)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "plain loop"])
def test_layer_parity(dtype, kind, num_layers, batch_first, bidirectional, with_state, fused):
    torch.manual_seed(0)
    ref, ours = twins(kind, dtype, 5, 7, num_layers, batch_first=batch_first, bidirectional=bidirectional,
                      fused=fused)
    T, B = 6, 3
    x = torch.randn((B, T, 5) if batch_first else (T, B, 5), dtype=dtype)
    hx = None
    if with_state:
        shape = (num_layers * (2 if bidirectional else 1), B, 7)
        hx = (torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)) if kind == "LSTM" \
            else torch.randn(shape, dtype=dtype)
    run_both(ref, ours, x, hx, TOL[dtype])
    assert ours.last_route.body == ("fused" if fused else "loop")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_lstm_with_projection_matches_torch(dtype, num_layers, bidirectional, bias):
    torch.manual_seed(3)
    ref, ours = twins("LSTM", dtype, 5, 7, num_layers, bias=bias, bidirectional=bidirectional, proj_size=3)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [[w.shape for w in ws] for ws in ours.all_weights] == [[w.shape for w in ws] for ws in ref.all_weights]
    n = num_layers * (2 if bidirectional else 1)
    x = torch.randn(6, 3, 5, dtype=dtype)
    run_both(ref, ours, x, None, TOL[dtype])
    run_both(ref, ours, x, (torch.randn(n, 3, 3, dtype=dtype), torch.randn(n, 3, 7, dtype=dtype)), TOL[dtype])
    run_both(ref, ours, x[:, 0], (torch.randn(n, 3, dtype=dtype), torch.randn(n, 7, dtype=dtype)), TOL[dtype])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "plain loop"])
def test_unbatched_input_and_no_bias(kind, batch_first, fused):
    torch.manual_seed(1)
    ref, ours = twins(kind, torch.float64, 4, 6, 2, bias=False, bidirectional=True, batch_first=batch_first,
                      fused=fused)
    run_both(ref, ours, torch.randn(5, 4, dtype=torch.float64), None, 1e-10)  # (T, H) out, batch_first or not


@pytest.mark.parametrize("kind", KINDS)
def test_a_bias_that_is_not_a_bool_is_torch_nns_type_error(kind):
    messages = []
    for mod in (torch.nn, recdrop):
        with pytest.raises(TypeError) as err:
            getattr(mod, kind)(3, 4, bias=0)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_rnn_relu_positional_nonlinearity():
    torch.manual_seed(2)
    ref, ours = twins("RNN", torch.float64, 4, 6, 1, "relu")
    assert ours.nonlinearity == "relu"
    run_both(ref, ours, torch.randn(5, 2, 4, dtype=torch.float64), None, 1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", ["semeniuta", "gal", "moon"])
@pytest.mark.parametrize("torch_kernels", [True, False])
def test_eval_with_inverted_dropout_matches_torch(kind, scheme, torch_kernels):
    torch.manual_seed(3)
    ref = getattr(torch.nn, kind)(4, 6, 2).double()
    ours = getattr(recdrop, kind)(4, 6, 2, recurrent_dropout=0.4, scheme=scheme).double()
    ours.load_state_dict(ref.state_dict())
    ours.torch_kernels = torch_kernels
    ref.eval(), ours.eval()
    x = torch.randn(5, 3, 4, dtype=torch.float64)
    assert_close(ref(x)[0], ours(x)[0], 1e-10)
    assert (ours.last_route.body == "torch.nn") == torch_kernels  # torch.nn's hand-over, or our own code
    ours.train()  # and in training the dropout does change the output
    assert (ref(x)[0] - ours(x)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_a_layer_is_its_torch_nn_twin_and_runs_torch_nns_forward_where_no_dropout_acts(kind):
    torch.manual_seed(4)
    ref = getattr(torch.nn, kind)(4, 6, 2, bidirectional=True, dropout=0.3)
    ours = getattr(recdrop, kind)(4, 6, 2, bidirectional=True, dropout=0.3, recurrent_dropout=0.4)
    assert isinstance(ours, type(ref)) and ours.mode == ref.mode
    ours.load_state_dict(ref.state_dict())
    assert [w.data_ptr() for w in ours._flat_weights] == [w.data_ptr() for w in ours.parameters()]
    x = torch.randn(5, 3, 4)
    ref.eval(), ours.eval()
    assert torch.equal(ref(x)[0], ours(x)[0])  # bit for bit: torch.nn's own kernels
    ours.rdrop = recdrop.RecurrentDropout(0.4, scaling="paper", schemes=ours.rdrop.schemes)
    assert not torch.equal(ref(x)[0], ours(x)[0])  # Eq. 3 at test: the (1 - p) factor acts
    plain = getattr(recdrop, kind)(4, 6, 2, bidirectional=True, dropout=0.3).train()
    plain.load_state_dict(ref.state_dict())
    ref.train()
    torch.manual_seed(5)
    a = ref(x)[0]
    torch.manual_seed(5)
    assert torch.equal(a, plain(x)[0])  # no recurrent dropout: torch.nn's forward, its dropout between layers


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batched", [False, True])
def test_cell_parity(dtype, kind, batched):
    torch.manual_seed(4)
    ref = getattr(torch.nn, kind + "Cell")(5, 7).to(dtype)
    ours = getattr(recdrop, kind + "Cell")(5, 7).to(dtype)
    ours.load_state_dict(ref.state_dict())
    ours.torch_kernels = False  # recdrop's own step, not torch.nn's forward
    x = torch.randn((3, 5) if batched else (5,), dtype=dtype)
    hshape = (3, 7) if batched else (7,)
    for hx in (None, torch.randn(hshape, dtype=dtype)):
        if kind == "LSTM" and hx is not None:
            hx = (hx, torch.randn(hshape, dtype=dtype))
        a, b = ref(x, hx), ours(x, hx)
        a = a if isinstance(a, tuple) else (a,)
        b = b if isinstance(b, tuple) else (b,)
        for u, v in zip(a, b):
            assert_close(u, v, TOL[dtype])
        ga = torch.autograd.grad(sum(u.sum() for u in a), list(ref.parameters()))
        gb = torch.autograd.grad(sum(v.sum() for v in b), list(ours.parameters()))
        for u, v in zip(ga, gb):
            assert_close(u, v, TOL[dtype] * 10)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_loads_both_ways(kind):
    ours = getattr(recdrop, kind)(3, 4, 2, bidirectional=True, recurrent_dropout=0.25)
    ref = getattr(torch.nn, kind)(3, 4, 2, bidirectional=True)
    ref.load_state_dict(ours.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for (_, a), (_, b) in zip(ours.named_parameters(), ref.named_parameters()):
        assert torch.equal(a, b)
    torch.nn.init.normal_(ref.weight_hh_l1_reverse)  # and back: torch.nn's weights into a fresh recdrop module
    back = getattr(recdrop, kind)(3, 4, 2, bidirectional=True, recurrent_dropout=0.25)
    back.load_state_dict(ref.state_dict())
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for (_, a), (_, b) in zip(back.named_parameters(), ref.named_parameters()):
        assert torch.equal(a, b)
    back.torch_kernels = False  # recdrop's own forward computes with the loaded weights
    x = torch.randn(5, 2, 3)
    torch.testing.assert_close(back.eval()(x)[0], ref.eval()(x)[0])
    assert back.last_route.body != "torch.nn"
