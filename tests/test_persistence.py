"""Saving and loading: every layer and cell, in every scheme and sampling, and an experiment's model,
through ``torch.save`` / ``torch.load(weights_only=True)`` with only recdrop's public classes
allowlisted, through pickle and deepcopy, and through state_dict to and from torch.nn; and the
trainer's checkpoints, which hold only tensors and plain values."""
import copy
import io
import pickle
import random

import numpy as np
import pytest
import torch

import recdrop
from recdrop.cells import CELL_SCHEMES
from recdrop.models import Dropout, LanguageModel
from recdrop.store import CorruptCheckpointError, load_checkpoint, save_checkpoint
from recdrop.train import _rng_state, _set_rng_state

PUBLIC = [getattr(recdrop, name) for name in recdrop.__all__ if isinstance(getattr(recdrop, name), type)]
SETTINGS = [(kind, scheme, sampling) for kind in ("LSTM", "GRU", "RNN") for scheme in CELL_SCHEMES[kind]
            for sampling in ("per-step", "per-sequence")]


def build(kind, scheme, sampling, cell):
    torch.manual_seed(0)
    cls = getattr(recdrop, kind + ("Cell" if cell else ""))
    extra = {} if cell else {"num_layers": 2, "bidirectional": True}
    return cls(3, 5, recurrent_dropout=0.3, scheme=scheme, sampling=sampling, nonlinearity="relu", **extra)


def outputs(m, train: bool, seed: int = 7):
    """The module's output on a fixed input: in eval mode, or in train mode from ``seed`` (same masks)."""
    m.train(train)
    g = torch.Generator().manual_seed(1)
    x, h0, c0 = torch.randn(6, 4, 3, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
    torch.manual_seed(seed)
    if isinstance(m, recdrop.layers.RecurrentLayer):
        return m(x)[0]
    m.reset_masks()
    return m(x[0], (h0, c0))[0] if isinstance(m, recdrop.LSTMCell) else m(x[0], h0)


def round_trips(m):
    buf = io.BytesIO()
    torch.save(m, buf)
    with torch.serialization.safe_globals(PUBLIC):
        loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    return {"torch.load(weights_only=True)": loaded, "pickle": pickle.loads(pickle.dumps(m)),
            "deepcopy": copy.deepcopy(m)}


@pytest.mark.parametrize("cell", [False, True], ids=["layer", "cell"])
@pytest.mark.parametrize("kind,scheme,sampling", SETTINGS)
def test_every_module_round_trips_with_only_recdrops_classes_allowlisted(kind, scheme, sampling, cell):
    m = build(kind, scheme, sampling, cell)
    for how, loaded in round_trips(m).items():
        assert type(loaded) is type(m), how
        assert repr(loaded) == repr(m), how
        torch.testing.assert_close(outputs(loaded, False), outputs(m, False), rtol=0, atol=0, msg=how)
        torch.testing.assert_close(outputs(loaded, True), outputs(m, True), rtol=0, atol=0, msg=how)
        assert not torch.equal(outputs(m, True, seed=7), outputs(m, True, seed=8)), "masks must depend on the seed"


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_layer_pickled_before_recdrop_subclassed_torch_nn_still_loads(kind):
    m = build(kind, "moon", "per-step", cell=False)
    old = {k: v for k, v in m.__getstate__().items() if k not in ("mode", "_all_weights", "_flat_weights")}
    loaded = object.__new__(type(m))
    loaded.__setstate__(old)  # what unpickling a module saved by recdrop 0.1 does
    assert loaded.mode == m.mode and loaded._all_weights == m._all_weights
    assert [w is v for w, v in zip(loaded._flat_weights, loaded.parameters())] == [True] * len(m._flat_weights)
    torch.testing.assert_close(outputs(loaded, False), outputs(m, False), rtol=0, atol=0)
    torch.testing.assert_close(outputs(loaded, True), outputs(m, True), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
def test_a_cells_state_dict_goes_to_and_from_the_torch_nn_twin(kind):
    ours = getattr(recdrop, kind)(3, 5, recurrent_dropout=0.3)
    twin = getattr(torch.nn, kind)(3, 5)
    twin.load_state_dict(ours.state_dict())
    back = getattr(recdrop, kind)(3, 5, recurrent_dropout=0.3)
    back.load_state_dict(twin.state_dict())
    assert ours.state_dict().keys() == back.state_dict().keys()
    for key, value in ours.state_dict().items():  # each weight back where it came from, not only the keys
        assert torch.equal(back.state_dict()[key], value), key
    x, h = torch.randn(4, 3), torch.randn(4, 5)
    state = (h, h) if kind == "LSTMCell" else h
    ours.torch_kernels = False  # in eval no dropout acts: our own cell, not torch.nn's forward, against the twin
    torch.testing.assert_close(ours.eval()(x, state), twin(x, state))


def test_an_experiment_model_saved_whole_loads_with_its_classes_allowlisted():
    torch.manual_seed(0)
    model = LanguageModel(11, 4, 5, Dropout(0.25, "semeniuta", "per-sequence", "paper", 0.2, 0.5), init_scale=0.1)
    buf = io.BytesIO()
    torch.save(model, buf)
    allow = PUBLIC + [LanguageModel, torch.nn.Embedding, recdrop.models.ForwardDropout, recdrop.models.Linear]
    with torch.serialization.safe_globals(allow):
        loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    tokens = torch.randint(11, (7, 2))
    for train in (False, True):
        torch.manual_seed(3)
        a = model.train(train)(tokens, None)[0]
        torch.manual_seed(3)
        b = loaded.train(train)(tokens, None)[0]
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(pickle.UnpicklingError):  # without the allowlist nothing of it loads
        torch.load(io.BytesIO(buf.getvalue()), weights_only=True)


def test_checkpoints_hold_only_what_weights_only_reads(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"rng": _rng_state(), "torch": str(torch.__version__), "curves": [{"loss": 1.0}]})
    assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    _set_rng_state(load_checkpoint(path)["rng"])  # the RNGs continue exactly where they were saved
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_a_checkpoint_of_a_machine_with_more_gpus_resumes_on_one_with_fewer(monkeypatch):
    """Each GPU's RNG state is saved; a machine with fewer GPUs restores those it has (torch would index
    past its generators)."""
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.extend(states))
    two_gpus = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
                "cuda": [torch.get_rng_state(), torch.get_rng_state()]}
    _set_rng_state(two_gpus)
    assert len(restored) == 1 and torch.equal(restored[0], two_gpus["cuda"][0])


def test_a_checkpoint_of_the_previous_format_still_loads(tmp_path):
    np.random.seed(5)
    legacy = {"rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
              "segments": [{"torch": torch.__version__}]}  # NumPy's own tuple, torch's version object
    path = tmp_path / "old.pt"
    save_checkpoint(path, legacy)
    want = np.random.rand()
    np.random.seed(6)
    _set_rng_state(load_checkpoint(path)["rng"])
    assert np.random.rand() == want


class Payload:
    def __reduce__(self):
        return (print, ("this ran while loading",))


def test_a_checkpoint_that_holds_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    save_checkpoint(path, {"model": {}, "extra": Payload()})
    with pytest.raises(CorruptCheckpointError, match="evil.pt holds more than tensors and plain values .*Unsupported "
                       "global: GLOBAL print.* could run code: delete it"):
        load_checkpoint(path)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype", [torch.long, torch.float64])
def test_an_input_of_another_dtype_is_the_error_torch_nn_gives(kind, train, dtype):
    x = torch.ones(5, 2, 3, dtype=dtype)
    messages = []
    # the paper's scaling acts in eval too: recdrop's own code runs in both modes, not torch.nn's
    for m in (getattr(torch.nn, kind)(3, 4), getattr(recdrop, kind)(3, 4, recurrent_dropout=0.25, scaling="paper")):
        with pytest.raises(ValueError) as err:
            m.train(train)(x)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and str(dtype) in messages[1]


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype", [torch.long, torch.float64])
def test_a_cells_input_of_another_dtype_is_the_error_torch_nn_gives(kind, train, dtype):
    x = torch.ones(2, 3, dtype=dtype)
    errors = []
    for m in (getattr(torch.nn, kind)(3, 4), getattr(recdrop, kind)(3, 4, recurrent_dropout=0.25, scaling="paper")):
        with pytest.raises(Exception) as err:  # recdrop's own code in both modes, as above
            m.train(train)(x)
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("kind", ["LSTM", "LSTMCell"])
def test_a_modules_generator_is_a_runs_not_the_modules_and_is_left_out_of_a_copy(kind):
    """A generator set on a module would make ``torch.load(weights_only=True)`` refuse it, and a deep copy
    draw its original's masks: pickle, deepcopy and torch.save leave it out (the README says so)."""
    m = getattr(recdrop, kind)(3, 5, recurrent_dropout=0.3)
    m.generator = torch.Generator().manual_seed(0)
    assert copy.deepcopy(m).generator is None and pickle.loads(pickle.dumps(m)).generator is None
    buf = io.BytesIO()
    torch.save(m, buf)
    with torch.serialization.safe_globals(PUBLIC):
        loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert loaded.generator is None and m.generator is not None  # the original keeps its own
    for a, b in zip(loaded.state_dict().values(), m.state_dict().values()):
        assert torch.equal(a, b)
