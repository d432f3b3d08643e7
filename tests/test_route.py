"""Which path a layer's call runs, chosen in one place (``layers.RecurrentLayer.route``, issue 47), the
switches read in one place (``recdrop.route``), and the records that name both."""
import pytest
import torch

import recdrop
from recdrop import cpu_kernels, graphs, layers, route, step_graph, triton_kernels
from recdrop.data import data_root
from recdrop.route import Route
from recdrop.store import RunStore, environment


def test_a_call_runs_torch_nn_where_no_dropout_acts_else_the_fused_sequence_else_the_loop(monkeypatch):
    x = torch.randn(5, 2, 3)
    plain = recdrop.LSTM(3, 4)
    plain(x)
    assert plain.last_route == Route("torch.nn") and str(plain.last_route) == "torch.nn"
    dropped = recdrop.LSTM(3, 4, recurrent_dropout=0.25).train()
    dropped(x)
    # on a CPU: no Triton, no CUDA graphs; the LSTM's C++ kernels where they are built
    assert dropped.last_route == Route("fused", cpp=cpu_kernels.usable(x))
    dropped.eval()  # inverted scaling: nothing acts at test, torch.nn's forward
    dropped(x)
    assert dropped.last_route.body == "torch.nn"
    dropped.train()
    dropped.fused = False
    dropped(x)
    assert dropped.last_route == Route("loop")
    projected = recdrop.LSTM(3, 4, proj_size=2, recurrent_dropout=0.25).train()
    projected(x)
    assert projected.last_route.body == "loop"
    autocast = recdrop.GRU(3, 4, recurrent_dropout=0.25).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast(x)
    assert autocast.last_route.body == "fused"  # its products in bf16, as torch.nn's under autocast
    given = recdrop.LSTM(3, 4, recurrent_dropout=0.25).eval()  # given masks take recdrop's own code, even at test
    with pytest.warns(UserWarning, match="masks given in eval mode are not applied"):
        given(x, masks=given.draw_masks(5, 2))
    assert given.last_route.body == "fused"


@pytest.mark.parametrize("make", [lambda: recdrop.LSTM(3, 4, nonlinearity="relu"),
                                  lambda: recdrop.GRU(3, 4, nonlinearity="relu", recurrent_dropout=0.3).eval(),
                                  lambda: recdrop.LSTMCell(3, 4, nonlinearity="relu"),
                                  lambda: recdrop.GRUCell(3, 4, nonlinearity="relu", recurrent_dropout=0.3).eval()],
                         ids=["LSTM", "GRU in eval", "LSTMCell", "GRUCell in eval"])
def test_a_relu_lstm_or_gru_never_hands_over_to_torch_nn_which_has_only_tanh(make):
    """With no dropout acting, a relu LSTM or GRU (the NER and sentiment taggers') computes relu: torch.nn's
    forward would silently compute tanh."""
    torch.manual_seed(0)
    m = make()
    x = torch.randn(5, 2, 3) if isinstance(m, layers.RecurrentLayer) else torch.randn(2, 3)
    first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
    handed = first(m(x))
    m.torch_kernels = False  # recdrop's own code, relu
    own = first(m(x))
    m.nonlinearity = "tanh"
    assert not torch.allclose(first(m(x)), own)  # the test can tell the two apart
    torch.testing.assert_close(handed, own)


def test_a_groups_route_names_its_stacked_runs_and_each_member_ran_it(monkeypatch):
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    members = [recdrop.LSTM(3, 4, recurrent_dropout=p).train() for p in (0.0, 0.25, 0.5)]
    x = torch.randn(5, 3, 2, 3)
    layers.run_group(members, x, (torch.zeros(3, 2, 4),) * 2)
    path = "fused+cpp" if cpu_kernels.usable(x) else "fused"  # the CPU's kernels, where they are built
    assert {str(m.last_route) for m in members} == {f"{path}, 3 runs stacked"}


def test_triton_and_graphs_enter_a_route_only_where_they_run(monkeypatch):
    m, x = recdrop.LSTM(3, 4, recurrent_dropout=0.25).train(), torch.randn(5, 2, 3)
    rnn = recdrop.RNN(3, 4, recurrent_dropout=0.25).train()
    monkeypatch.setattr(triton_kernels, "usable", lambda t: True)
    monkeypatch.setattr(graphs, "graphs_usable", lambda tensors: True)
    assert m.route(x) is None  # without a direction's weights: recdrop's own code, its body chosen per direction
    weights = m.layer_weights(0, False)
    assert m.route(x, weights) == Route("fused", triton=True, graphs=True)
    assert rnn.route(x, rnn.layer_weights(0, False)).triton is False  # it has no kernels
    monkeypatch.setattr(graphs, "MAX_STEP_WORK", 2 * 4 * 16 - 1)  # one step's product: batch 2 x 4 units x 16 gates
    assert m.route(x, weights).graphs is False


def test_the_switches_are_read_in_one_place_and_recorded_where_set(monkeypatch):
    for name in route.SWITCHES:
        monkeypatch.delenv(name, raising=False)
    assert route.switches() == {} and "switches" not in environment("cpu")
    assert route.switched_on("RECDROP_TRITON") and not graphs.switched_off()
    # where each could run (Triton's interpreter; a torch whose graphs register generators), so that each
    # "not" below is the switch's doing
    monkeypatch.setattr(triton_kernels, "_interpreting", lambda: True)
    monkeypatch.setattr(torch.cuda.CUDAGraph, "register_generator_state", lambda *a: None, raising=False)
    assert step_graph.capturable("cuda") and not step_graph.capturable("cpu")
    assert triton_kernels.usable(torch.zeros(1)) == (triton_kernels.triton is not None)
    monkeypatch.setenv("RECDROP_STEP_GRAPH", "0")
    assert not step_graph.capturable("cuda")  # the step's graph alone
    monkeypatch.delenv("RECDROP_STEP_GRAPH")
    monkeypatch.setenv("RECDROP_CUDA_GRAPHS", "0")
    monkeypatch.setenv("RECDROP_TRITON", "0")
    assert graphs.switched_off() and not triton_kernels.usable(torch.zeros(1))
    assert not step_graph.capturable("cuda")  # every graph
    assert environment("cpu")["switches"] == {"RECDROP_CUDA_GRAPHS": "0", "RECDROP_TRITON": "0"}
    with pytest.raises(ValueError, match="not one of recdrop's switches"):
        route.switched_on("RECDROP_GRAPHS")


@pytest.mark.skipif(not (data_root() / "ptb").exists(), reason="PTB not available")
def test_each_record_and_each_stretch_names_the_path_its_training_took(tmp_path, monkeypatch):
    from recdrop.experiments.word_lm import WordLMConfig, WordLMTask
    from recdrop.train import BudgetExhausted, train_group, train_run

    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RECDROP_TRITON", "0")
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "mkl")
    base = WordLMConfig.at_scale("ci")
    alone = train_run(WordLMTask, base, store=RunStore(tmp_path / "a"), progress=False)
    assert alone.path == "torch.nn; CPU products: mkl"
    assert alone.switches == {"RECDROP_TRITON": "0", "RECDROP_CPU_PRODUCTS": "mkl"}
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    runs = [(base, 0), (base.replace(recurrent_dropout=0.25), 0)]

    def stop_after_the_first_epoch(event, epoch, batch):
        if event == "epoch" and epoch == 0:
            raise BudgetExhausted("a test's stop")
    with pytest.raises(BudgetExhausted):
        train_group(WordLMTask, runs, store=RunStore(tmp_path / "g"), progress=False,
                    callback=stop_after_the_first_epoch)
    group = train_group(WordLMTask, runs, store=RunStore(tmp_path / "g"), progress=False)
    path = f"fused{'+cpp' if cpu_kernels.usable(torch.zeros(1)) else ''}, 2 runs stacked; CPU products: mkl"
    for record in group:
        assert record.path == path
        assert [s["path"] for s in record.segments] == [path] * 2
