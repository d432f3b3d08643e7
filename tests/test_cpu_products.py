"""Which library computes a CPU's float32 products (``recdrop.cpu_products``): the faster one, measured once
per machine and class of product and kept for every later process, oneDNN only where it wins nearly every
round; or the switch's; and the libraries named in a record's path."""
import itertools
import platform

import pytest
import torch

from recdrop import cpu_kernels, cpu_products, fused, store
from recdrop.layers import LSTM
from recdrop.train import layer_paths

needs_onednn = pytest.mark.skipif(not fused._onednn_usable(torch.ones(1)), reason="this torch has no oneDNN")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="oneDNN's CPU path is x86's here")
def test_onednn_is_usable_on_an_x86_cpu():
    """On x86 (CI's machines and every CPU this project trains on) torch's CPU build has oneDNN: the tests
    marked ``needs_onednn`` must run there, not turn into skips where ``_onednn_usable`` breaks."""
    assert torch.backends.mkldnn.is_available()
    assert fused._onednn_usable(torch.ones(1), torch.ones(2, 2))
    assert not fused._onednn_usable(torch.ones(1, dtype=torch.float64))  # float32 only


@pytest.fixture(autouse=True)
def measured_afresh(monkeypatch, tmp_path):
    monkeypatch.delenv("RECDROP_CPU_PRODUCTS", raising=False)
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))  # no choice kept yet
    cpu_products.forget()
    yield
    cpu_products.forget()


def fake_ways(calls):
    """Two ways of a product, each giving its name, which the patched ``seconds`` reads; ``calls`` counts the times
    they are made."""
    def ways():
        calls.append(1)
        return (lambda: "mkl"), (lambda: "onednn")
    return ways


@pytest.mark.parametrize("mkl_s, onednn_s, chosen", [(1.0, 0.5, "onednn"), (1.0, 0.97, "onednn"), (1.0, 1.0, "mkl"),
                                                      (0.5, 1.0, "mkl")])
def test_the_faster_library_is_chosen_once_per_class(monkeypatch, mkl_s, onednn_s, chosen):
    monkeypatch.setattr(cpu_products, "seconds", lambda product: {"mkl": mkl_s, "onednn": onednn_s}[product()])
    calls = []
    assert cpu_products.library("product", (1000, 256, 1024), fake_ways(calls)) == chosen
    assert cpu_products.library("product", (1024, 200, 1000), fake_ways(calls)) == chosen  # same class
    assert len(calls) == 1  # timed once
    cpu_products.library("product", (1000, 256, 4096), fake_ways(calls))
    cpu_products.library("linear", (1000, 256, 1024), fake_ways(calls))
    assert len(calls) == 3  # another shape class, another kind: timed again
    assert cpu_products.chosen() == chosen
    cpu_products.forget()  # another process on this machine: it reads the choices kept, and times nothing
    monkeypatch.setattr(cpu_products, "seconds", lambda product: {"mkl": onednn_s, "onednn": mkl_s}[product()])
    assert cpu_products.library("product", (1000, 256, 1024), fake_ways(calls)) == chosen
    assert len(calls) == 3


def test_paired_rounds_choose_through_a_passing_load(monkeypatch, tmp_path):
    # oneDNN is 1.25x faster; a load slows oneDNN's timing in round 2, which it loses, and MKL's in round 3
    load = itertools.chain([1, 1, 1, 3, 3, 1], itertools.repeat(1))  # mkl, onednn, mkl, ...
    monkeypatch.setattr(cpu_products, "seconds", lambda product: {"mkl": 1.0, "onednn": 0.8}[product()] * next(load))
    assert cpu_products.library("product", (64, 64, 64), fake_ways([])) == "onednn"
    (kept,) = (tmp_path / "cache" / "cpu_products").glob("*.txt")
    assert kept.read_text().splitlines()[-1] == "oneDNN's time over MKL's: 0.800 (median), below 1 in 6 of 7 rounds"


@pytest.mark.parametrize("onednn_wins, chosen", [(7, "onednn"), (6, "onednn"), (5, "mkl"), (0, "mkl")])
def test_onednn_is_chosen_only_where_it_wins_nearly_every_round(monkeypatch, onednn_wins, chosen):
    # oneDNN 3% faster in its rounds, 3% slower in the others: the median alone would choose it at 4 wins
    onednn_s = itertools.chain([0.97] * onednn_wins, itertools.repeat(1.03))
    monkeypatch.setattr(cpu_products, "seconds", lambda product: 1.0 if product() == "mkl" else next(onednn_s))
    assert cpu_products.ROUNDS == 7
    assert cpu_products.library("product", (64, 64, 64), fake_ways([])) == chosen


def test_a_choice_kept_under_another_rule_is_timed_again(monkeypatch):
    monkeypatch.setattr(cpu_products, "seconds", lambda product: {"mkl": 1.0, "onednn": 0.5}[product()])
    calls = []
    assert cpu_products.library("product", (8, 8, 8), fake_ways(calls)) == "onednn"
    cpu_products.forget()
    monkeypatch.setattr(cpu_products, "RULE", "another rule")
    monkeypatch.setattr(cpu_products, "seconds", lambda product: {"mkl": 0.5, "onednn": 1.0}[product()])
    assert cpu_products.library("product", (8, 8, 8), fake_ways(calls)) == "mkl"
    assert len(calls) == 2


def test_a_kept_choice_that_names_no_library_says_where_it_is(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_products, "seconds", lambda product: 1.0)
    cpu_products.library("product", (8, 8, 8), fake_ways([]))
    (kept,) = (tmp_path / "cache" / "cpu_products").glob("*.txt")
    kept.write_text("openblas\n")
    cpu_products.forget()
    with pytest.raises(ValueError, match=f"{kept} does not name a library \\(onednn, mkl\\): delete it to time again"):
        cpu_products.library("product", (8, 8, 8), fake_ways([]))


def test_the_switch_chooses_for_every_product_and_refuses_a_value_it_does_not_know(monkeypatch):
    calls = []
    for library in ("onednn", "mkl"):
        cpu_products.forget()  # ``chosen`` names every library chosen in the process
        monkeypatch.setenv("RECDROP_CPU_PRODUCTS", library)
        assert cpu_products.library("product", (8, 8, 8), fake_ways(calls)) == library
        assert cpu_products.chosen() == library
    assert not calls  # nothing timed
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "openblas")
    with pytest.raises(ValueError, match="RECDROP_CPU_PRODUCTS='openblas' is not valid; allowed values: 'measure', "
                                         "'onednn', 'mkl'"):
        cpu_products.library("product", (8, 8, 8), fake_ways(calls))


def test_the_cpu_model_tells_generations_of_one_name_apart(tmp_path):
    def model(family, flags):
        info = tmp_path / f"cpuinfo-{family}"
        info.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\ncpu family\t: {family}\nmodel\t\t: 1\n"
                        f"flags\t\t: fpu sse avx avx2 fma {flags}\n\nprocessor\t: 1\nmodel name\t: other\n")
        return cpu_products.cpu_model(info)
    assert model(23, "") == "AMD EPYC family 23 model 1 avx+avx2+fma"
    assert model(25, "avx512f avx512_bf16") == "AMD EPYC family 25 model 1 avx+avx2+fma+avx512f+avx512_bf16"
    assert cpu_products.cpu_model(tmp_path / "none") == ""
    (tmp_path / "plain").write_text("processor\t: 0\nflags\t\t: fpu avx2\n")  # no name nor family given
    assert cpu_products.cpu_model(tmp_path / "plain") == "avx2"


def test_a_records_hardware_tells_generations_of_one_name_apart(monkeypatch):
    for family, model in ((23, 1), (25, 17)):
        monkeypatch.setattr(store, "cpu_fields", lambda: {"model name": "AMD EPYC", "cpu family": str(family),
                                                         "model": str(model)})
        assert store.hardware("cpu", 2) == f"AMD EPYC family {family} model {model} (2 threads)"
    assert store.hardware("cpu", 1) == "AMD EPYC family 25 model 17 (1 thread)"
    monkeypatch.setattr(store, "cpu_fields", lambda: {})  # a system that says nothing: the platform's name
    assert store.hardware("cpu", 1).endswith(" (1 thread)") and "family" not in store.hardware("cpu", 1)


def test_a_shape_class_rounds_each_size_up_to_a_power_of_two():
    assert cpu_products.shape_class(1120, 256, 10000) == (2048, 256, 16384)
    assert cpu_products.shape_class(0, 1, 3) == (1, 1, 4)


@needs_onednn
@pytest.mark.parametrize("library", ["mkl", "onednn", "measure"])
def test_products_through_either_library_equal_torch_to_float32_rounding(monkeypatch, library):
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", library)
    torch.manual_seed(0)
    a, b, w = torch.randn(300, 200).t(), torch.randn(300, 64), torch.randn(64, 200)
    got = fused.matmul(a, b)
    assert got.is_contiguous()
    if library == "mkl":
        assert torch.equal(got, torch.mm(a, b))  # torch's own product, bit for bit
    torch.testing.assert_close(got, torch.mm(a, b), rtol=1e-5, atol=1e-4)
    x = torch.randn(7, 200, requires_grad=True)
    y = fused.linear(x, w)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w), rtol=1e-5, atol=1e-4)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(7, 64) @ w, rtol=1e-5, atol=1e-4)


def test_a_record_path_names_the_libraries_of_a_cpu_run(monkeypatch):
    monkeypatch.setenv("RECDROP_CPU_PRODUCTS", "mkl")
    lstm = LSTM(32, 32, recurrent_dropout=0.25)
    assert layer_paths(lstm) is None  # nothing ran yet
    x = torch.randn(5, 3, 32)
    lstm(x)
    assert layer_paths(lstm) == f"fused{'+cpp' if cpu_kernels.usable(x) else ''}; CPU products: mkl"


@needs_onednn
def test_a_sequences_products_are_timed_with_the_packing_of_their_weight(monkeypatch):
    """oneDNN packs the weight once a sequence; a short sequence does not repay a costly packing. Costs here
    are counted, not timed: a packing 100, a oneDNN product 1, an MKL product 2."""
    cost, real_pack, real_linear, real_addmm = [0], torch.ops.mkldnn._reorder_linear_weight, \
        torch.ops.mkldnn._linear_pointwise, torch.addmm

    def counted(price, op):
        return lambda *a, **k: cost.__setitem__(0, cost[0] + price) or op(*a, **k)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", counted(100, real_pack))
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", counted(1, real_linear))
    monkeypatch.setattr(torch, "addmm", counted(2, real_addmm))

    def seconds(product):
        cost[0] = 0
        product()
        return float(cost[0])
    monkeypatch.setattr(cpu_products, "seconds", seconds)
    w = torch.randn(64, 16)
    assert not fused._packed_steps_faster(w, None, 4, 10)  # 100 + 10 against 20
    assert fused._packed_steps_faster(w, None, 4, 1000)  # 100 + 1000 against 2000
    assert fused._packed_steps_faster(w.t(), None, 4, 1000)  # a transposed view: packed from a dense copy
