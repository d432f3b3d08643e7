"""CUDA graphs of the fast path's loops (issue 36, ``recdrop.graphs``): which path a call takes, the
fallbacks, and the static-buffer bookkeeping. Here, without a GPU, a stand-in capture replays a loop on
its static buffers as a graph would (it overwrites the same outputs at every replay); on a GPU the last
tests check real graphs against the plain loops."""
import pytest
import torch

import recdrop
from recdrop import graphs
from recdrop.experiments.word_lm import WordLMTask
from recdrop.store import RunStore
from recdrop.train import train_group
from test_fused_training import close, members

KINDS = {"LSTM": recdrop.LSTM, "GRU": recdrop.GRU, "RNN": recdrop.RNN}
T, B, D, H = 6, 3, 4, 5


class StandIn:
    """A capture that records ``loop`` and, at each replay, writes its results into the same static
    outputs, as a CUDA graph writes into its own memory."""

    def __init__(self, fail=False):
        self.captures, self.replays, self.fail = [], 0, fail

    def __call__(self, loop, static_inputs):
        self.captures.append(loop)
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        outputs = loop(*static_inputs)
        stand_in = self

        class Graph:
            def replay(self):
                stand_in.replays += 1
                for out, new in zip(outputs, loop(*static_inputs)):
                    if out is not None:
                        out.copy_(new)
        return Graph(), outputs


@pytest.fixture
def stand_in(monkeypatch):
    """Graphs on the CPU: every loop goes through a fresh cache that captures with ``StandIn`` at a
    signature's first call."""
    capture = StandIn()
    monkeypatch.setattr(graphs, "LOOPS", graphs.LoopGraphs(capture, capture_at=1))
    monkeypatch.setattr(graphs, "_on_one_cuda_device", lambda tensors: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)  # a CPU build has no CUDA to ask
    return capture


def layer(kind, scheme="semeniuta", sampling="per-step", **kw):
    torch.manual_seed(0)
    return KINDS[kind](D, H, recurrent_dropout=0.3, scheme=scheme, sampling=sampling, dtype=torch.float64, **kw)


def forward_backward(m, x, masks):
    """Outputs, final states and every gradient of one training step."""
    m.zero_grad()
    x = x.detach().requires_grad_()
    out, state = m(x, masks=masks)
    states = state if isinstance(state, tuple) else (state,)
    loss = (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view(out.shape)).sum()
    loss = loss + sum((s * s).sum() for s in states)
    loss.backward()
    return [out.detach(), *[s.detach() for s in states], x.grad, *[p.grad.clone() for p in m.parameters()]]


CASES = [(kind, scheme, sampling) for kind in KINDS for scheme in ("semeniuta", "gal", "moon")
         for sampling in ("per-step", "per-sequence") if not (kind == "RNN" and scheme == "gal")]


@pytest.mark.parametrize("kind,scheme,sampling", CASES)
@pytest.mark.parametrize("bidirectional", [False, True])
def test_graphed_loops_equal_the_plain_loops_over_calls_of_new_values(kind, scheme, sampling, bidirectional,
                                                                      stand_in, monkeypatch):
    m = layer(kind, scheme, sampling, num_layers=2, bidirectional=bidirectional)
    g = torch.Generator().manual_seed(1)
    calls = [(torch.randn(T, B, D, generator=g, dtype=torch.float64), m.draw_masks(T, B, dtype=torch.float64,
                                                                                   generator=g)) for _ in range(3)]
    graphed = [forward_backward(m, x, masks) for x, masks in calls]
    # One graph per loop and signature: the two layers' loops have the same shapes and share theirs, and a
    # layer's two directions are one loop (a group of two)
    assert len(stand_in.captures) == 2
    assert stand_in.replays == 3 * 2 * 2, "every loop of every call replays a graph"
    monkeypatch.setenv("RECDROP_CUDA_GRAPHS", "0")  # the switch: the plain loops
    plain = [forward_backward(m, x, masks) for x, masks in calls]
    assert stand_in.replays == 3 * 2 * 2
    for a, b in zip(graphed, plain):
        for ta, tb in zip(a, b):
            torch.testing.assert_close(ta, tb, rtol=0, atol=0)


def test_a_result_is_not_overwritten_by_the_next_replay(stand_in):
    m = layer("LSTM")
    x1, x2 = torch.randn(2, T, B, D, dtype=torch.float64)
    out1, _ = m(x1)
    kept = out1.clone()
    out2, _ = m(x2)
    assert stand_in.replays == 2
    torch.testing.assert_close(out1, kept, rtol=0, atol=0)
    assert not torch.equal(out1, out2)


def test_a_signature_is_captured_at_its_second_call_and_inference_mode_is_part_of_it():
    capture = StandIn()
    cache = graphs.LoopGraphs(capture)

    def loop(a):
        return (a * 2,)
    x = torch.ones(3)
    assert torch.equal(cache.run(loop, (x,))[0], 2 * x) and not capture.captures  # met once: plainly
    assert torch.equal(cache.run(loop, (x,))[0], 2 * x) and len(capture.captures) == 1 and capture.replays == 1
    with torch.inference_mode():
        for _ in range(2):
            assert torch.equal(cache.run(loop, (torch.ones(3),))[0], 2 * x)
    assert len(capture.captures) == 2  # its own graph, whose static buffers are inference tensors
    assert torch.equal(cache.run(loop, (x + 1,))[0], 2 * (x + 1))  # the first graph's buffers still take copies
    assert capture.replays == 3


def test_graphs_are_kept_per_signature_and_the_least_recently_used_go_first(monkeypatch):
    capture = StandIn()
    cache = graphs.LoopGraphs(capture, size=2, capture_at=1)

    def loop(a, scale):
        return (a * scale, None)
    for n in (1, 2, 1, 3, 2):  # shapes 1 and 2 captured, 1 reused, 3 evicts 2, 2 captured again
        out = cache.run(loop, (torch.ones(n),), (2.0,))
        assert torch.equal(out[0], torch.full((n,), 2.0)) and out[1] is None
    assert [c.args[1] for c in capture.captures] == [(2.0,)] * 4
    assert len(cache.graphs) == 2 and capture.replays == 5
    cache.run(loop, (torch.ones(1),), (3.0,))  # another flag: another graph
    assert len(capture.captures) == 5


def test_a_failed_capture_runs_plainly_and_is_not_tried_again(monkeypatch):
    capture = StandIn(fail=True)
    cache = graphs.LoopGraphs(capture, capture_at=1)

    def loop(a):
        return (a + 1,)
    for _ in range(3):
        out, = cache.run(loop, (torch.zeros(2),))
        assert torch.equal(out, torch.ones(2))
    assert len(capture.captures) == 1 and not cache.graphs and len(cache.failed) == 1


def test_which_calls_may_run_as_graphs(monkeypatch):
    x = torch.zeros(2)
    assert not graphs.graphs_usable((x, None, 0.5)), "CPU tensors run plainly"
    assert not graphs.graphs_usable((None, 1.0)), "a call without tensors runs plainly"
    monkeypatch.setattr(graphs, "_on_one_cuda_device", lambda tensors: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert graphs.graphs_usable((x,))
    with monkeypatch.context() as m:
        m.setenv("RECDROP_CUDA_GRAPHS", "0")
        assert not graphs.graphs_usable((x,)), "the switch"
    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
        assert not graphs.graphs_usable((x,)), "the caller's own capture records the plain loop"
    with monkeypatch.context() as m:
        m.setattr(torch.compiler, "is_compiling", lambda: True)
        assert not graphs.graphs_usable((x,)), "torch.compile traces the plain loop"


def test_a_compute_bound_loop_runs_plainly(stand_in, monkeypatch):
    m = layer("LSTM")
    x = torch.randn(T, B, D, dtype=torch.float64)
    monkeypatch.setattr(graphs, "MAX_STEP_WORK", B * 4 * H * H - 1)  # one step's product: B x 4H x H
    m(x)[0].sum().backward()
    assert not stand_in.captures and stand_in.replays == 0
    monkeypatch.setattr(graphs, "MAX_STEP_WORK", B * 4 * H * H)
    m(x)[0].sum().backward()
    assert len(stand_in.captures) == 2 and stand_in.replays == 2


def test_graphs_need_one_cuda_device():
    assert not graphs._on_one_cuda_device([torch.zeros(1)])
    assert not graphs._on_one_cuda_device([torch.zeros(1, device="meta")])


@pytest.mark.parametrize("kind", list(KINDS))
def test_higher_order_gradients_and_transforms_never_reach_a_graph(kind, stand_in):
    m = layer(kind)
    x = torch.randn(T, B, D, dtype=torch.float64, requires_grad=True)
    masks = m.draw_masks(T, B, dtype=torch.float64)
    out, _ = m(x, masks=masks)
    (gx,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)  # the backward replays the reference steps
    assert [c.args[0].__name__ for c in stand_in.captures] == [f"_{kind.lower()}_forward"]
    assert stand_in.replays == 1
    before = (len(stand_in.captures), stand_in.replays)
    torch.func.vmap(lambda xi: m(xi.unsqueeze(1), masks=[{k: v[:, :1] for k, v in d.items()} for d in masks])[0])(
        x.detach().transpose(0, 1))  # functorch runs the plain ops: no loop at all
    assert (len(stand_in.captures), stand_in.replays) == before


def test_a_fused_group_trained_through_graphs_has_the_plain_loops_records_and_frees_its_graphs(stand_in, tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")  # a GPU's path: the runs' weights stacked
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    runs = members("word_lm")
    graphed = train_group(WordLMTask, runs, store=RunStore(tmp_path / "graphed"), progress=False)
    assert stand_in.replays > len(stand_in.captures) > 0 and not graphs.LOOPS.graphs
    monkeypatch.setenv("RECDROP_CUDA_GRAPHS", "0")
    plain = train_group(WordLMTask, runs, store=RunStore(tmp_path / "plain"), progress=False)
    assert len(graphed) == len(plain) == len(runs) > 1
    for g, p in zip(graphed, plain):
        assert close(g, p, rtol=0.0), (g.metrics, p.metrics)


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("kind,scheme,sampling", CASES)
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_on_cuda_graphed_equals_not_graphed(kind, scheme, sampling, nonlinearity, monkeypatch):
    graphs.clear()
    m = layer(kind, scheme, sampling, num_layers=2, bidirectional=True, nonlinearity=nonlinearity).cuda().float()
    g = torch.Generator(device="cuda").manual_seed(1)
    calls = [(torch.randn(T, B, D, generator=g, device="cuda"), m.draw_masks(T, B, "cuda", torch.float32, g))
             for _ in range(3)]
    graphed = [forward_backward(m, x, masks) for x, masks in calls]
    assert graphs.cached_graphs() == 4  # forward and backward of each direction; the layers share them
    monkeypatch.setenv("RECDROP_CUDA_GRAPHS", "0")
    plain = [forward_backward(m, x, masks) for x, masks in calls]
    for a, b in zip(graphed, plain):
        for ta, tb in zip(a, b):
            torch.testing.assert_close(ta, tb, rtol=1e-6, atol=1e-6)


@needs_cuda
def test_on_cuda_a_group_and_a_callers_own_capture(monkeypatch):
    graphs.clear()
    torch.manual_seed(0)
    layers = [recdrop.LSTM(D, H, recurrent_dropout=p, device="cuda") for p in (0.0, 0.25, 0.5)]
    for r, m in enumerate(layers):
        m.generator = torch.Generator(device="cuda").manual_seed(r)
    x = torch.randn(T, 3, B, D, device="cuda")
    hx = (torch.zeros(3, B, H, device="cuda"), torch.zeros(3, B, H, device="cuda"))
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    monkeypatch.setattr(graphs.LOOPS, "capture_at", 1)
    graphed, _ = recdrop.layers.run_group(layers, x, hx)
    assert graphs.cached_graphs() >= 1
    for r, m in enumerate(layers):
        m.generator.manual_seed(r)
    monkeypatch.setenv("RECDROP_CUDA_GRAPHS", "0")
    plain, _ = recdrop.layers.run_group(layers, x, hx)
    torch.testing.assert_close(graphed, plain, rtol=1e-6, atol=1e-6)
    monkeypatch.delenv("RECDROP_CUDA_GRAPHS")
    m = layers[1].eval()  # the caller captures a forward: the loop inside is recorded plainly
    m.torch_kernels = False  # else no dropout acts in eval and torch.nn's forward (cuDNN) runs
    static_x = torch.randn(T, B, D, device="cuda")
    with torch.no_grad():
        m(static_x)  # warm up outside the capture (this call is graphed by recdrop)
        n = graphs.cached_graphs()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out, _ = m(static_x)
        assert graphs.cached_graphs() == n
        static_x.copy_(torch.randn(T, B, D, device="cuda"))
        g.replay()
        torch.testing.assert_close(static_out, m(static_x)[0], rtol=1e-6, atol=1e-6)
