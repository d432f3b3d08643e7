"""A group of runs on a leading dimension (issue 35): the step functions of ``cells.py`` take stacked
weights, states and factors, and each run of the group computes what it computes alone."""
import zlib

import pytest
import torch

from recdrop.cells import GATES, gru_step, lstm_step, recurrent_product, rnn_step

R, B, H = 3, 4, 5
STEPS = {"LSTM": lstm_step, "GRU": gru_step, "RNN": rnn_step}


def factors_of(scheme, g):
    """(gal, sem, moon) of a group: each run its own 0/1 mask, scaled as Eq. 18 by its own rate, or
    None where the scheme does not drop there."""
    rates = torch.tensor([0.25, 0.5, 0.0], dtype=torch.float64).view(R, 1, 1)
    mask = (torch.rand(R, B, H, generator=g, dtype=torch.float64) >= rates).double() / (1 - rates)
    return tuple(mask if scheme == name else None for name in ("gal", "semeniuta", "moon"))


@pytest.mark.parametrize("cell", list(STEPS))
@pytest.mark.parametrize("scheme", ["gal", "semeniuta", "moon", None])
@pytest.mark.parametrize("bias", [True, False])
def test_a_stacked_step_is_each_runs_own_step_forward_and_backward(cell, scheme, bias):
    g = torch.Generator().manual_seed(zlib.crc32(repr((cell, scheme, bias)).encode()))

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    gx, h = rand(R, B, GATES[cell] * H), rand(R, B, H)
    c = rand(R, B, H)
    w_hh = rand(R, GATES[cell] * H, H)
    b_hh = rand(R, GATES[cell] * H) if bias else None
    gal, sem, moon = factors_of(scheme, g)
    act = torch.relu if cell == "RNN" else torch.tanh

    def step(r=None):
        def at(t):
            return t if r is None or t is None else t[r]

        args = (at(gx), at(h)) + ((at(c),) if cell == "LSTM" else ()) + (at(w_hh), at(b_hh))
        out = STEPS[cell](*args, at(gal), at(sem), at(moon), act)
        return out if isinstance(out, tuple) else (out,)

    group = step()
    alone = [step(r) for r in range(R)]
    for k, out in enumerate(group):
        torch.testing.assert_close(out, torch.stack([a[k] for a in alone]), rtol=1e-12, atol=1e-12)
    leaves = [t for t in (gx, h, c, w_hh, b_hh) if t is not None]
    weights = torch.randn(group[0].shape, generator=g, dtype=torch.float64)  # a loss that mixes every output
    grads_group = torch.autograd.grad(sum((o * weights).sum() for o in group), leaves, allow_unused=True)
    grads_alone = torch.autograd.grad(sum((a[k] * weights[r]).sum() for r, a in enumerate(alone)
                                          for k in range(len(group))), leaves, allow_unused=True)
    for ga, gb in zip(grads_group, grads_alone):
        if ga is None:
            assert gb is None
            continue
        torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-12)


def test_a_group_of_one_is_the_run_alone_and_bad_shapes_are_clear_errors():
    g = torch.Generator().manual_seed(0)
    h, w, b = torch.randn(B, H, generator=g), torch.randn(4 * H, H, generator=g), torch.randn(4 * H, generator=g)
    torch.testing.assert_close(recurrent_product(h[None], w[None], b[None])[0], torch.nn.functional.linear(h, w, b))
    with pytest.raises(ValueError, match=r"need states of shape \(R, B, H\) with R = 2, got \(3, 4, 5\)"):
        recurrent_product(torch.zeros(3, B, H), torch.zeros(2, 4 * H, H), None)


@pytest.mark.parametrize("training", [True, False])
def test_a_groups_dropout_applies_each_runs_own_at_every_step(training):
    """A group mixing schemes, samplings, scalings and rates (and a run without dropout): each run's
    slice of every stacked step is its own step with its own masks, drawn from its own generator."""
    from recdrop.masks import GroupDropout, RecurrentDropout

    T = 6
    runs = [RecurrentDropout(0.25, "semeniuta", "per-step", "paper"), RecurrentDropout(0.5, "gal", "per-sequence"),
            RecurrentDropout(0.5, "moon", "per-sequence", "paper"), RecurrentDropout(0.0),
            RecurrentDropout(0.25, "gal+semeniuta", "per-step")]
    n = len(runs)
    alone = [r.factors(r.draw(r.mask_shape(T, B, H), dtype=torch.float64,
                              generator=torch.Generator().manual_seed(seed)) if training and r.targets else None,
                       training, per_step=r.sampling == "per-step") for seed, r in enumerate(runs)]
    generators = [torch.Generator().manual_seed(seed) for seed in range(n)]
    group = GroupDropout(runs, generators, torch.float64, "cpu").factors(T, B, H, torch.zeros((), dtype=torch.float64),
                                                                         training)
    assert group.per_step == training
    assert group.semeniuta.shape == ((T, n, B, H) if training else (n, 1, 1))  # at test: the paper-scaled (1 - p)
    assert group.moon is not None and (group.gal is not None) == training  # Gal runs here scale inverted: none at test
    g = torch.Generator().manual_seed(1)
    gx = torch.randn(T, n, B, 4 * H, generator=g, dtype=torch.float64)
    w_hh = torch.randn(n, 4 * H, H, generator=g, dtype=torch.float64)
    h = c = torch.zeros(n, B, H, dtype=torch.float64)
    mine = [(torch.zeros(B, H, dtype=torch.float64),) * 2 for _ in runs]
    for t in range(T):
        h, c = lstm_step(gx[t], h, c, w_hh, None, *group.at(t))
        mine = [lstm_step(gx[t, r], *mine[r], w_hh[r], None, *alone[r].at(t)) for r in range(n)]
        for r in range(n):
            torch.testing.assert_close(h[r], mine[r][0], rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(c[r], mine[r][1], rtol=1e-12, atol=1e-12)


def test_a_target_no_run_drops_stays_none_and_test_time_constants_stack_per_run():
    from recdrop.masks import GroupDropout, RecurrentDropout

    runs = [RecurrentDropout(0.25, "semeniuta", scaling="paper"), RecurrentDropout(0.5, "semeniuta", scaling="paper"),
            RecurrentDropout(0.5, "semeniuta")]  # inverted: identity at test
    group = GroupDropout(runs, [None] * 3, torch.float32, "cpu", own=False).factors(4, B, H, torch.zeros(()), False)
    assert group.gal is None and group.moon is None and not group.per_step
    assert group.semeniuta.shape == (3, 1, 1) and group.semeniuta.flatten().tolist() == [0.75, 0.5, 1.0]


def _group_and_alone_sequences(cell, scheme, sampling, reverse, relu, T=5, runs=3, batch=2, hidden=4):
    """The fast path's sequence Function for a group of ``runs`` stacked, and for each run alone: the
    inputs (float64, requiring grad) and both results."""
    from recdrop import fused
    from recdrop.masks import GroupDropout, RecurrentDropout

    g = torch.Generator().manual_seed(zlib.crc32(repr((cell, scheme, sampling, reverse, relu)).encode()))

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()
    gates = GATES[cell] * hidden
    gx, h0, c0 = rand(T, runs, batch, gates), rand(runs, batch, hidden), rand(runs, batch, hidden)
    w_hh, b_hh = rand(runs, gates, hidden), rand(runs, gates)
    rates = (0.25, 0.5, 0.0)
    alone_factors, rdrops = [], []
    for r in range(runs):
        rd = RecurrentDropout(rates[r] if scheme else 0.0, scheme or "semeniuta", sampling, "paper",
                              ("semeniuta", "gal", "moon") if cell == "RNN" else
                              ("semeniuta", "gal", "moon", "gal+semeniuta"))
        masks = rd.draw(rd.mask_shape(T, batch, hidden), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(r)) if rd.targets else None
        alone_factors.append(rd.factors(masks, True, per_step=sampling == "per-step"))
        rdrops.append(rd)
    generators = [torch.Generator().manual_seed(r) for r in range(runs)]
    group_factors = GroupDropout(rdrops, generators, torch.float64, "cpu").factors(T, batch, hidden, gx, True)
    act = "relu" if relu else "tanh"

    def run(gx_, h0_, c0_, w_, b_, f):
        if cell == "LSTM":
            ys, (h, c) = fused.lstm_sequence(gx_, h0_, c0_, w_, f, act, reverse)
            return ys, h, c
        if cell == "GRU":
            ys, (h,) = fused.gru_sequence(gx_, h0_, w_, b_, f, act, reverse)
            return ys, h
        ys, (h,) = fused.rnn_sequence(gx_, h0_, w_, f, act, reverse)
        return ys, h
    group = run(gx, h0, c0, w_hh, b_hh, group_factors)
    alone = [run(gx[:, r], h0[r], c0[r], w_hh[r], b_hh[r], alone_factors[r]) for r in range(runs)]
    inputs = [gx, h0, c0, w_hh] + ([b_hh] if cell == "GRU" else [])
    return inputs, group, alone


@pytest.mark.parametrize("cell, scheme, sampling", [
    (cell, scheme, sampling) for cell in ("LSTM", "GRU", "RNN")
    for scheme, sampling in ((None, "per-step"), ("semeniuta", "per-step"), ("gal", "per-sequence"),
                             ("moon", "per-step"), ("gal+semeniuta", "per-sequence"))
    if not (cell == "RNN" and scheme == "gal+semeniuta")])  # the vanilla RNN has no gal+semeniuta
@pytest.mark.parametrize("reverse, relu", [(False, False), (True, True)])
def test_the_fast_path_runs_a_group_as_each_run_alone_forward_and_backward(cell, scheme, sampling, reverse, relu):
    """Each run's slice of the group's outputs and of every gradient (inputs, states, weights, biases)
    equals that run's own fast path, in float64: the hand-written backward takes the leading run
    dimension too."""
    inputs, group, alone = _group_and_alone_sequences(cell, scheme, sampling, reverse, relu)
    # ys is (T, R, B, H), a final state (R, B, H)
    outs_alone = [torch.stack([a[0] for a in alone], 1)] + [torch.stack([a[k] for a in alone]) for k in
                                                            range(1, len(group))]
    for got, want in zip(group, outs_alone):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    g = torch.Generator().manual_seed(7)
    weights = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in group]
    grads_group = torch.autograd.grad(sum((o * w).sum() for o, w in zip(group, weights)), inputs, allow_unused=True)
    grads_alone = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs_alone, weights)), inputs,
                                      allow_unused=True)
    for name, ga, gb in zip(("gx", "h0", "c0", "w_hh", "b_hh"), grads_group, grads_alone):
        assert (ga is None) == (gb is None), name
        if ga is not None:
            torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("fused", [True, False])
def test_a_group_of_layers_computes_what_each_layer_computes_alone(kind, training, fused, monkeypatch):
    """``layers.run_group``: layers of different recurrent dropouts, each drawing from its own
    generator, on the fast path and on the reference loop, their weights stacked as on a GPU; outputs,
    final states and every weight's gradient per run equal the layer's own forward on its slice, in
    float64. (On a CPU by default a group runs each layer's own forward, which needs no such test.)"""
    import recdrop
    from recdrop.layers import run_group

    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")  # a GPU's stacked weights
    T, D = 6, 3
    dropouts = [dict(recurrent_dropout=0.25, scheme="semeniuta", sampling="per-step", scaling="paper"),
                dict(recurrent_dropout=0.5, scheme="gal", sampling="per-sequence"),
                dict(recurrent_dropout=0.0),
                dict(recurrent_dropout=0.5, scheme="moon", sampling="per-step", scaling="paper")]
    torch.manual_seed(0)
    layers = [getattr(recdrop, kind)(D, H, **d).double().train(training) for d in dropouts]
    for m in layers:
        monkeypatch.setattr(m, "fused", fused)
    n_states = 2 if kind == "LSTM" else 1
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, len(layers), B, D, generator=g, dtype=torch.float64)
    hx = tuple(torch.randn(len(layers), B, H, generator=g, dtype=torch.float64) for _ in range(n_states))

    def seed_generators():
        for r, m in enumerate(layers):
            m.generator = torch.Generator().manual_seed(100 + r)
    seed_generators()
    ys, states = run_group(layers, x, hx)
    assert layers[0].last_route.runs == len(layers)  # one stacked call, not each layer's own
    seed_generators()
    alone = []
    for r, m in enumerate(layers):
        h = tuple(s[r].unsqueeze(0) for s in hx)
        y, st = m(x[:, r], h if n_states == 2 else h[0])
        alone.append((y, st if n_states == 2 else (st,)))
    torch.testing.assert_close(ys, torch.stack([a[0] for a in alone], 1), rtol=1e-10, atol=1e-12)
    for k in range(n_states):
        torch.testing.assert_close(states[k], torch.stack([a[1][k][0] for a in alone]), rtol=1e-10, atol=1e-12)
    params = [p for m in layers for p in m.parameters()]
    w = torch.randn(ys.shape, generator=g, dtype=torch.float64)
    grads_group = torch.autograd.grad((ys * w).sum() + states[0].sum(), params)
    grads_alone = torch.autograd.grad(sum((a[0] * w[:, r]).sum() + a[1][0].sum() for r, a in enumerate(alone)),
                                      params)
    for ga, gb in zip(grads_group, grads_alone):
        torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12)


def test_a_group_refuses_layers_that_cannot_share_a_model():
    import recdrop
    from recdrop.layers import run_group

    x = torch.zeros(2, 2, 1, 3)
    with pytest.raises(ValueError, match="must share their kind, sizes"):
        run_group([recdrop.LSTM(3, 4), recdrop.LSTM(3, 5)], x, (torch.zeros(2, 1, 4),) * 2)
    with pytest.raises(ValueError, match="one-layer, one-direction, time-major layers"):
        run_group([recdrop.LSTM(3, 4, num_layers=2)] * 2, x, (torch.zeros(2, 1, 4),) * 2)
    with pytest.raises(ValueError, match="one-layer, one-direction, time-major layers"):  # x is (T, R, B, I)
        run_group([recdrop.LSTM(3, 4, batch_first=True)] * 2, x, (torch.zeros(2, 1, 4),) * 2)
    with pytest.raises(ValueError, match=r"needs inputs of shape \(T, R, B, I\) with R = 3"):
        run_group([recdrop.GRU(3, 4)] * 3, x, (torch.zeros(3, 1, 4),))


def test_a_forward_dropout_without_a_generator_draws_as_torch_nn_dropout():
    """Without a run's own generator (torch's global one) ``ForwardDropout`` is ``torch.nn.Dropout``."""
    from recdrop.models import Dropout, LanguageModel, set_generator

    model = LanguageModel(11, 4, 5, Dropout(0.25, "semeniuta", "per-step", "paper", 0.2, 0.5), 0.05).double()
    set_generator(model, torch.Generator().manual_seed(10))
    set_generator(model, None)  # back to torch's global generator
    torch.manual_seed(5)
    drop = model.input_drop(torch.ones(1000, dtype=torch.float64))
    torch.manual_seed(5)
    torch.testing.assert_close(drop, torch.nn.functional.dropout(torch.ones(1000, dtype=torch.float64), 0.2))


def test_a_dropout_of_one_drops_every_element_alone_between_layers_and_in_a_stacked_group():
    """p = 1, which torch.nn's dropouts allow, drawn from a run's own generator: every element zero (as
    ``F.dropout``), not 0 / 0, in a model's forward dropout, between a layer's stacked layers, and for
    that run in a stacked group, whose other runs keep theirs."""
    import recdrop
    from recdrop.models import Dropout, LanguageModel, set_generator
    from recdrop.stacked import StackedLanguageModels

    torch.manual_seed(0)
    models = [LanguageModel(11, 4, 5, Dropout(0.0, input=p), 0.05).double().train() for p in (1.0, 0.5)]
    for r, m in enumerate(models):
        set_generator(m, torch.Generator().manual_seed(10 + r))
    x = torch.ones(7, 3, 4, dtype=torch.float64)
    assert torch.equal(models[0].input_drop(x), torch.zeros_like(x))
    group = StackedLanguageModels(models).input_dropout(torch.ones(7, 2, 3, 4, dtype=torch.float64))
    assert torch.equal(group[:, 0], torch.zeros_like(x)) and set(group[:, 1].unique().tolist()) == {0.0, 2.0}

    two = recdrop.LSTM(4, 5, num_layers=2, dropout=1.0).double().train()
    two.generator = torch.Generator().manual_seed(1)
    second = recdrop.LSTM(5, 5).double()  # the second layer alone, on the zeros the dropout leaves
    second.load_state_dict({k.replace("_l1", "_l0"): v for k, v in two.state_dict().items() if "_l1" in k})
    y, _ = two(torch.randn(7, 3, 4, dtype=torch.float64))
    torch.testing.assert_close(y, second(torch.zeros(7, 3, 5, dtype=torch.float64))[0])


@pytest.mark.parametrize("cpu_kernels", ["0", "1"], ids=["torch ops", "C++ kernels"])
def test_a_groups_input_products_and_their_gradient_are_never_copied_whole(monkeypatch, cpu_kernels):
    """The LSTM group's gx ``(T, R, B, 4H)`` stays in the batched product's run-major memory
    (``fused.group_linear``) and its gradient is kept so (``fused._lstm_backward``): a forward and backward
    copy gx at most once in all (the torch path starts the gates from it; the Triton kernels add it
    themselves), where copies to time-major and back, and step by step into the gates, moved it four times."""
    import recdrop
    from torch.utils._python_dispatch import TorchDispatchMode

    from recdrop.layers import run_group

    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")  # a GPU's stacked weights
    monkeypatch.setenv("RECDROP_CPU_KERNELS", cpu_kernels)  # the torch path, or the kernels (which add gx too)
    T, D, Hs = 6, 3, 7
    layers = [recdrop.LSTM(D, Hs, recurrent_dropout=p).double() for p in (0.25, 0.5)]
    x = torch.randn(T, len(layers), B, D, dtype=torch.float64, requires_grad=True)
    states = tuple(torch.zeros(len(layers), B, Hs, dtype=torch.float64) for _ in range(2))
    copies = (torch.ops.aten.copy_, torch.ops.aten.clone, torch.ops.aten._to_copy)

    class Copies(TorchDispatchMode):
        found: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket in copies and isinstance(out, torch.Tensor):
                self.found.append((str(func), out.numel()))
            return out

    with Copies() as mode:
        y, _ = run_group(layers, x, states)
        y.sum().backward()
    assert layers[0].last_route.body == "fused" and layers[0].last_route.runs == len(layers)
    assert any(n == T * len(layers) * B * D for _, n in mode.found)  # the input's own copy is seen
    gx, step = T * len(layers) * B * 4 * Hs, len(layers) * B * 4 * Hs
    assert sum(n for _, n in mode.found if n in (gx, step)) <= gx, mode.found


@pytest.mark.parametrize("library", ["mkl", "onednn"])
def test_a_groups_input_products_on_a_cpu_equal_each_runs_own_with_dense_gradients(monkeypatch, library):
    """``fused.group_linear`` in float32 on a CPU: one ``bmm`` each way where MKL is the faster library, a
    product per run through oneDNN where oneDNN is; each run's product and gradients as ``F.linear``'s, and
    the weight's gradient dense, as a torch.nn module's."""
    from recdrop import fused

    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", library)
    torch.manual_seed(0)
    x = torch.randn(5, 2, 3, 8, requires_grad=True)
    w, b = torch.randn(2, 12, 8, requires_grad=True), torch.randn(2, 12, requires_grad=True)
    got = fused.group_linear(x, w, b)
    want = torch.stack([torch.nn.functional.linear(x[:, r], w[r], b[r]) for r in range(2)], 1)
    torch.testing.assert_close(got, want)
    dy = torch.randn_like(want)
    grads, want_grads = (torch.autograd.grad(y, (x, w, b), dy) for y in (got, want))
    for g, want_g in zip(grads, want_grads):
        torch.testing.assert_close(g, want_g)
    assert grads[1].is_contiguous() and grads[2].is_contiguous()  # the weight's and the bias's
