"""The C++ kernels of the CPU's fused LSTM and GRU (recdrop.cpu_kernels) equal the torch ops they replace."""
import logging

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

import recdrop
from kernel_cases import GRU_SETTINGS, LSTM_SETTINGS
from recdrop import cpu_kernels, cpu_products, layers

pytestmark = pytest.mark.skipif(cpu_kernels.compiled() is None, reason="no C++ compiler to build the kernels")


def _both_ways(monkeypatch, run):
    """``run()`` (its tensors: outputs and gradients) with the kernels and without, and the routes taken."""
    results, routes = [], []
    for use in ("1", "0"):
        monkeypatch.setenv("RECDROP_CPU_KERNELS", use)
        out, route = run()
        results.append(out)
        routes.append(route)
    return results, routes


def _assert_close(results, tol):
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _loop_products(monkeypatch) -> list:
    """The ``brgemm`` argument of every later call of the LSTM loop's C++ functions: True where the loop's
    products ran on oneDNN's brgemm kernel, False on ATen's mm."""
    kernels, seen = cpu_kernels.compiled(), []
    for name in ("lstm_forward_sequence", "lstm_backward_sequence"):
        monkeypatch.setattr(kernels, name, lambda *a, real=getattr(kernels, name): seen.append(a[-1]) or real(*a))
    return seen


# kernel_cases' settings, and test mode with both directions and every factor a constant (and Moon's alone)
TEST_MODE = [("gal+semeniuta", "per-step", "paper", False, "tanh", True)]
GRU_TEST_MODE = TEST_MODE + [("moon", "per-sequence", "paper", False, "tanh", False)]
SETTINGS = [("LSTM", *s) for s in LSTM_SETTINGS + TEST_MODE] + [("GRU", *s) for s in GRU_SETTINGS + GRU_TEST_MODE]


@pytest.mark.parametrize("kind,scheme,sampling,scaling,training,nonlinearity,bidirectional", SETTINGS)
def test_the_kernels_equal_the_torch_path_in_float64(kind, scheme, sampling, scaling, training, nonlinearity,
                                                     bidirectional, monkeypatch):
    torch.manual_seed(0)
    # 19 units: a vector's width and a remainder, whatever the CPU's width
    m = getattr(recdrop, kind)(5, 19, recurrent_dropout=0.3, scheme=scheme, sampling=sampling, scaling=scaling,
                               nonlinearity=nonlinearity, bidirectional=bidirectional).double().train(training)
    x = torch.randn(6, 3, 5, dtype=torch.float64)
    states = [torch.randn(2 if bidirectional else 1, 3, 19, dtype=torch.float64) for _ in range(m.n_states)]
    masks = m.draw_masks(6, 3) if training else None

    def run():
        m.zero_grad()
        leaves = [t.clone().requires_grad_() for t in (x, *states)]
        y, finals = m(leaves[0], tuple(leaves[1:]) if m.n_states == 2 else leaves[1], masks=masks)
        finals = finals if m.n_states == 2 else (finals,)
        (y.sum() + sum((f * w).sum() for f, w in zip(finals, (1.5, 0.5)))).backward()
        return [y, *finals] + [t.grad for t in leaves] + [p.grad.clone() for p in m.parameters()], m.last_route
    results, routes = _both_ways(monkeypatch, run)
    assert [r.cpp for r in routes] == [True, False]
    _assert_close(results, 1e-10)


# one row, a remainder of a vector, and states large enough to split over two threads (the GRU's rows, the LSTM's
# blocks of units)
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch,hidden", [(1, 3), (7, 100), (160, 32), (64, 128)])
def test_the_kernels_equal_the_torch_path_in_float32_over_two_threads(kind, batch, hidden, monkeypatch):
    torch.manual_seed(0)
    m = getattr(recdrop, kind)(8, hidden, recurrent_dropout=0.25, scheme="gal+semeniuta").train()
    x = torch.randn(9, batch, 8, requires_grad=True)
    masks = m.draw_masks(9, batch)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)

    def run():
        m.zero_grad()
        x.grad = None
        y, _ = m(x, masks=masks)
        (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
        return [y, x.grad.clone()] + [p.grad.clone() for p in m.parameters()], m.last_route
    try:
        results, routes = _both_ways(monkeypatch, run)
    finally:
        torch.set_num_threads(threads)
    assert routes[0].cpp and not routes[1].cpp
    _assert_close(results, 1e-5)


@pytest.mark.parametrize("scheme", ["semeniuta", "gal+semeniuta", "moon"])
def test_a_packed_batch_through_the_kernels_equals_it_without(scheme, monkeypatch):
    """A packed batch keeps every step's c_t (each sequence's final state is taken at its own end): its
    gradient enters the backward at every step."""
    torch.manual_seed(0)
    m = recdrop.LSTM(3, 5, num_layers=2, bidirectional=True, recurrent_dropout=0.3, scheme=scheme).double().train()
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in (4, 7, 1, 5)]
    masks = m.draw_masks(7, 4, dtype=torch.float64)

    def run():
        m.zero_grad()
        leaves = [s.clone().requires_grad_() for s in seqs]
        out, (h, c) = m(pack_sequence(leaves, enforce_sorted=False), masks=masks)
        padded, _ = pad_packed_sequence(out)
        (padded.sum() + (h * 1.5).sum() + (c * c).sum()).backward()
        return [padded, h, c] + [s.grad for s in leaves] + [p.grad.clone() for p in m.parameters()], m.last_route
    results, routes = _both_ways(monkeypatch, run)
    assert [r.cpp for r in routes] == [True, False]
    _assert_close(results, 1e-10)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("dtype,hidden,tol", [(torch.float64, 6, 1e-10), (torch.float32, 70, 1e-5)],
                         ids=["float64", "float32 over two threads"])
def test_a_groups_stacked_runs_through_the_kernels_equal_them_without(kind, dtype, hidden, tol, monkeypatch):
    """A group's LSTM gx and gate gradients keep their runs apart (run-major): the kernels read and
    write each run's rows where they lie, and each run's products take its own weight (in float32 with
    the units of a run split into blocks over two threads, the LSTM loop's products on brgemm where it
    computes them: MKL's input projection keeps the group's gx run-major)."""
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "mkl")
    brgemm = dtype == torch.float32 and cpu_kernels.compiled().brgemm_works()
    monkeypatch.setattr(cpu_kernels, "brgemm_faster", lambda h0, w_hh: brgemm)
    products = _loop_products(monkeypatch)
    torch.manual_seed(0)
    ms = [getattr(recdrop, kind)(4, hidden, recurrent_dropout=p, scheme=s).to(dtype).train()
          for p, s in ((0.25, "semeniuta"), (0.5, "gal"), (0.3, "moon"))]
    for r, m in enumerate(ms):
        m.generator = torch.Generator().manual_seed(r)
    x = torch.randn(5, 3, 2, 4, dtype=dtype)
    state = tuple(torch.randn(3, 2, hidden, dtype=dtype) for _ in range(ms[0].n_states))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)

    def run():
        for r, m in enumerate(ms):
            m.zero_grad()
            m.generator.manual_seed(r)
        leaves = [t.clone().requires_grad_() for t in (x, *state)]
        y, finals = layers.run_group(ms, leaves[0], tuple(leaves[1:]))
        (y.sum() + sum((f * (i + 1)).sum() for i, f in enumerate(finals))).backward()
        return [y, *finals] + [t.grad for t in leaves] + [p.grad.clone() for m in ms for p in m.parameters()], \
            ms[0].last_route
    try:
        results, routes = _both_ways(monkeypatch, run)
    finally:
        torch.set_num_threads(threads)
    assert [(r.cpp, r.runs) for r in routes] == [(True, 3), (False, 3)]
    assert set(products) == ({brgemm} if kind == "LSTM" else set())
    _assert_close(results, tol)


def test_the_kernels_run_only_where_they_can(monkeypatch):
    x = torch.zeros(2, 3)
    assert cpu_kernels.usable(x) and cpu_kernels.usable(x.double())  # so that each refusal below is its cause's
    assert not cpu_kernels.usable(x.half()) and not cpu_kernels.usable(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not cpu_kernels.usable(x)  # autocast's products come in bfloat16
    lstm, rnn = recdrop.LSTM(3, 4, recurrent_dropout=0.25).train(), recdrop.RNN(3, 4, recurrent_dropout=0.25).train()
    xs = torch.randn(5, 2, 3)
    assert lstm.route(xs, lstm.layer_weights(0, False)).cpp
    assert not rnn.route(xs, rnn.layer_weights(0, False)).cpp  # it has no C++ kernels
    monkeypatch.setenv("RECDROP_CPU_KERNELS", "0")
    assert not cpu_kernels.usable(x)
    assert str(lstm.route(xs, lstm.layer_weights(0, False))) == "fused"


def test_where_the_kernels_cannot_be_built_the_torch_path_runs_and_says_so_once(monkeypatch, caplog):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension\nc++: command not found")
    monkeypatch.setattr(cpu_kernels, "_built", {})
    monkeypatch.setattr(torch.utils.cpp_extension, "load", no_compiler)
    m = recdrop.LSTM(3, 4, recurrent_dropout=0.25).train()
    with caplog.at_level(logging.WARNING, logger="recdrop.cpu_kernels"):
        for _ in range(2):
            y, _ = m(torch.randn(5, 2, 3))
            y.sum().backward()
    assert str(m.last_route) == "fused"
    assert [r.getMessage() for r in caplog.records] == [
        "recdrop: its CPU kernels could not be built (RuntimeError: c++: command not found); the fused path runs "
        "its torch ops instead"]


@pytest.mark.parametrize("library", ["onednn", "mkl"])
@pytest.mark.parametrize("threads", [2, 5])
def test_the_lstm_loops_products_run_on_the_library_chosen_and_equal_the_torch_path(library, threads, monkeypatch):
    """oneDNN's brgemm kernel or ATen's mm, as ``RECDROP_CPU_PRODUCTS`` chooses (and ``cpu_products`` by
    default), with the 70 units in blocks over the threads, the last partial: 48 and 22 on two threads,
    four of 16 and one of 6 on five."""
    if library == "onednn" and not cpu_kernels.compiled().brgemm_works():
        pytest.skip("this torch has no brgemm kernel for float32")
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", library)
    monkeypatch.setattr(cpu_products, "_chosen", {})
    products = _loop_products(monkeypatch)
    torch.manual_seed(0)
    m = recdrop.LSTM(8, 70, recurrent_dropout=0.25, scheme="gal+semeniuta").train()
    assert cpu_kernels.brgemm_faster(torch.zeros(5, 70), m.weight_hh_l0) == (library == "onednn")
    x = torch.randn(9, 5, 8, requires_grad=True)
    masks = m.draw_masks(9, 5)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)

    def run():
        m.zero_grad()
        x.grad = None
        y, (h, c) = m(x, masks=masks)
        ((y * torch.linspace(-1, 1, 70)).sum() + h.sum() + (c * c).sum()).backward()
        return [y, h, c, x.grad.clone()] + [p.grad.clone() for p in m.parameters()], m.last_route
    try:
        results, routes = _both_ways(monkeypatch, run)
    finally:
        torch.set_num_threads(before)
    assert routes[0].cpp and cpu_products.chosen() == library
    assert len(products) == 2 and set(products) == {library == "onednn"}  # forward and backward
    _assert_close(results, 1e-5)


@pytest.mark.parametrize("faster", ["onednn", "mkl"])
def test_the_lstm_loops_library_is_the_one_timed_faster_here(faster, monkeypatch):
    """By default the loop's products take the library ``cpu_products`` times the faster, for float32 only: both
    ways it times run the loop, forward and backward."""
    if not cpu_kernels.compiled().brgemm_works():
        pytest.skip("this torch has no brgemm kernel for float32")
    timed, products = [], _loop_products(monkeypatch)

    def kept(key, ways):
        timed.append(key)
        for way, brgemm in zip(ways(), (False, True)):  # (MKL's, oneDNN's), as cpu_products times them
            products.clear()
            way()
            assert products == [brgemm, brgemm]
        return faster
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "measure")
    monkeypatch.setattr(cpu_products, "_chosen", {})
    monkeypatch.setattr(cpu_products, "kept", kept)
    w = torch.randn(4 * 20, 20)
    assert cpu_kernels.brgemm_faster(torch.zeros(3, 2, 20), w.expand(3, -1, -1)) == (faster == "onednn")
    assert not cpu_kernels.brgemm_faster(torch.zeros(2, 20, dtype=torch.float64), w.double())
    assert [key[0] for key in timed] == ["an LSTM's steps in C++, forward and backward"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_transposing_copy_equals_atens_and_never_builds_the_kernels(dtype, monkeypatch):
    dense = torch.randn(70, 37, dtype=dtype)  # whole tiles of 16 and partial ones, both ways
    kernels, calls = cpu_kernels.compiled(), []
    monkeypatch.setattr(kernels, "transposed", lambda x, real=kernels.transposed: calls.append(x) or real(x))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for t in (dense, dense.t(), torch.randn(48, 64, dtype=dtype), dense[:, ::2], dense[::3]):  # any strides
            copied = cpu_kernels.transposed(t)
            assert copied.is_contiguous() and torch.equal(copied, t.t().contiguous())
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 5
    monkeypatch.setattr(cpu_kernels, "_built", {})  # a process whose layers never built them
    monkeypatch.setattr(cpu_kernels.cpp_extension, "load", lambda *a, **k: pytest.fail("a copy built the kernels"))
    assert torch.equal(cpu_kernels.transposed(dense), dense.t().contiguous()) and len(calls) == 5


def test_a_buffer_the_kernels_cannot_read_is_refused_with_a_clear_error():
    steps, c = 3, torch.zeros(2, 4)

    def lstm_buffers(state):
        return dict(gates_all=torch.zeros(steps, *state.shape[:-1], 16), c_all=torch.zeros(steps + 1, *state.shape),
                    tc_all=torch.zeros(steps, *state.shape), ys=torch.zeros(steps, *state.shape))

    def forward(**given):
        args = dict(gx=torch.zeros(steps, 2, 16), h0=c, w_hh=torch.zeros(16, 4), gal=None, sem=None, moon=None,
                    per_step=True, hin_all=None, relu=False, **lstm_buffers(c))
        cpu_kernels.lstm_forward_sequence(**{**args, **given})

    forward()  # buffers as they should be
    with pytest.raises(RuntimeError, match=r"h_t must be a contiguous CPU tensor \(3, \[R,\] B, 4\) of the state"):
        forward(ys=torch.zeros(steps, 4, 2).transpose(1, 2))
    with pytest.raises(RuntimeError, match=r"the gates must be a contiguous CPU tensor \(3, \[R,\] B, 16\)"):
        forward(gates_all=torch.zeros(steps, 2, 16, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="d\\(h_\\{t-1\\}\\) is kept where, and only where, Gal's factor acts"):
        forward(gal=torch.ones(steps, 2, 4))
    group = torch.zeros(3, 2, 4)  # a group's states, with gx of two runs only
    with pytest.raises(RuntimeError, match="each run's rows of gx must be contiguous"):
        forward(gx=torch.zeros(steps, 2, 2, 16), h0=group, w_hh=torch.zeros(3, 16, 4), **lstm_buffers(group))
    with pytest.raises(RuntimeError, match=r"the outputs' gradient must be a contiguous CPU tensor \(3, \[R,\] B, 4\)"):
        buffers = lstm_buffers(c)
        cpu_kernels.lstm_backward_sequence(torch.zeros(steps, 2, 5), c, c, None, torch.zeros(16, 4), None, None, None,
                                           True, buffers["gates_all"], buffers["c_all"], buffers["tc_all"],
                                           torch.zeros(steps, 2, 16), False)
    with pytest.raises(RuntimeError, match="oneDNN's brgemm computes float32 products only"):
        buffers = {k: v.double() for k, v in lstm_buffers(c).items()}
        cpu_kernels.compiled().lstm_forward_sequence(torch.zeros(steps, 2, 16).double(), c.double(),
                                                     torch.zeros(16, 4).double(), None, None, None, None, None, None,
                                                     False, *buffers.values(), None, False, True)
    with pytest.raises(RuntimeError, match=r"the gates must be \(\[R,\] B, 3H\)"):
        cpu_kernels.gru_forward_step(torch.zeros(2, 16), torch.zeros(2, 16), c, None, None, torch.zeros(2, 16),
                                     c.clone(), c.clone(), False)  # 4H, not 3H
    with pytest.raises(RuntimeError, match="a mask must be a contiguous CPU tensor of the state's shape"):
        buffers = lstm_buffers(c)
        cpu_kernels.compiled().lstm_forward_sequence(torch.zeros(steps, 2, 16), c, torch.zeros(16, 4), None, None,
                                                     torch.ones(2, 5), None, None, None, False, *buffers.values(),
                                                     None, False, False)  # past the wrapper's checks


@pytest.mark.parametrize("rate", [0.0, 0.5], ids=["torch.nn's forward", "recdrop's fused"])
def test_the_trainer_builds_the_kernels_before_a_runs_clock_and_only_where_its_layers_take_them(rate, tmp_path,
                                                                                                 monkeypatch):
    """The build's half minute on a machine's first run is not training time (the estimates read it), and a
    group whose layers run torch.nn's forward does not wait for a build it never uses."""
    from recdrop import train
    from recdrop.experiments.temporal_order import TemporalOrderConfig, TemporalOrderTask
    from recdrop.store import RunStore

    events = []
    monkeypatch.setattr(cpu_kernels, "compiled", lambda real=cpu_kernels.compiled: events.append("build") or real())
    started = train.GroupTraining.__init__
    monkeypatch.setattr(train.GroupTraining, "__init__",
                        lambda self, *a, **k: events.append("clock") or started(self, *a, **k))
    cfg = TemporalOrderConfig.at_scale("ci", recurrent_dropout=rate, epochs=1)
    train.train_run(TemporalOrderTask, cfg, store=RunStore(tmp_path), progress=False)
    assert events[:2] == (["build", "clock"] if rate else ["clock"])
