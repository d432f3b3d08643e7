"""PyTorch's own module tests (``test/test_modules.py``), run against recdrop's layers and cells.

For each of the six recurrent ``ModuleInfo`` entries of ``torch.testing._internal.common_modules``
(``torch.nn.RNN``, ``GRU``, ``LSTM``, ``RNNCell``, ``GRUCell``, ``LSTMCell``) the recdrop twin
(``recdrop.RNN`` ...) is built from exactly the constructor ``args``/``kwargs`` and fed exactly the
forward inputs that the entry's ``module_inputs_func`` gives, and the tests of torch's
``TestModule`` are run on it. Where torch loops over an entry's samples inside one test, this file
makes every sample its own pytest case (ids ``LSTM-07-in=2,h=3,L=2,proj=2,...``), so that a
failure names the configuration; the device is always the CPU and the dtypes are torch's
(float32 and float64; float64 only for the gradient checks).

Which code runs. recdrop's layers and cells subclass torch.nn's and hand the forward over to
torch.nn's own kernels wherever no recurrent dropout acts (``recurrent_dropout=0``, recdrop's default and what
every ModuleInfo sample builds). A test of the module as built would then mostly test torch. So
the numerical tests also run along other paths (the last part of their ids):

- ``default``: the module as built (the port proper).
- ``own``: with ``m.torch_kernels = False``: recdrop's own recurrent code (the layers' fast
  path ``recdrop.fused``, or the reference loop where the fast path does not apply, e.g.
  ``proj_size``) computes the same configuration.
- ``rdrop``: the module built with ``recurrent_dropout=0.5`` (the default scheme): in train mode
  the masks act. The tests freeze the RNG around each forward, as torch's do for its dropout
  modules, so the masks are the same in every call of a gradcheck.

test_forward and test_torch_parity_backward run ``default`` and ``own`` (each compared with
torch.nn); test_grad all three (``own``/``rdrop`` in train mode only); test_non_contiguous_tensors
``default`` and ``rdrop`` (``rdrop`` runs the same recdrop code as ``own``, with masks);
test_gradgrad, the slowest, recdrop's own code only, along ``own`` (``default`` is torch.nn's
kernels, whose double backward torch tests; second-order
gradients with masks are tested in tests/test_fused.py). All for time.

Ported from torch's test_modules.py (same checks, written anew for pytest):

- test_forward: forward in train and eval mode; the entry's ``reference_fn`` (unbatched input ==
  batched input of one); ``.float()`` / ``.double()`` then forward, parameters' dtype checked.
  Added: the output equals ``torch.nn``'s (the same class built with the same arguments, given
  the recdrop module's ``state_dict``), in train and in eval mode (recdrop's default
  ``recurrent_dropout=0.0`` makes train mode equal to torch.nn's too).
- test_factory_kwargs: ``device=`` / ``dtype=`` reach every created parameter and buffer (with
  torch's mock of ``Parameter.__new__`` / ``register_buffer`` to see that some are created).
- test_multiple_device_transfer: forward after ``.to(device)``, ``.cpu()`` and back; on CUDA only,
  as torch's (on one device there is no transfer): skipped on a machine without a GPU.
- test_repr: ``repr()`` and ``str()`` do not raise.
- test_save_load (torch's newer name of test_pickle): ``torch.save`` / ``torch.load`` of the whole
  module gives the same output; the ``state_dict`` round-trips, with ``weights_only=True`` too.
  Added: the ``state_dict`` has torch.nn's keys and shapes and loads strictly both ways.
- test_non_contiguous_tensors: non-contiguous inputs, hx and grad_outputs give the same outputs
  and gradients as contiguous ones. In train mode only, for time (see below).
- test_grad / test_gradgrad: ``gradcheck`` / ``gradgradcheck`` (torch's testing wrappers: fast mode,
  batched-grad check) in float64, of the total derivative (inputs and all parameters), in train
  and eval mode (along the paths above). Deviations, for time (the file is to run in about a
  minute): torch also checks each parameter's partial derivative on its own (one more check per
  parameter: up to 17 per sample); here only with ``GRAD_PARTIALS = True`` (adds ~15 s to
  test_grad, minutes to test_gradgrad). test_gradgrad runs in train mode only (with recurrent
  dropout off, the samples' default, train and eval compute the same; test_grad covers both), and
  only on the samples that pass an initial state ``hx`` (for RNN/GRU/LSTM every configuration
  comes once with and once without hx; the hx sample has all the other's inputs and more) and,
  for the layers, are bidirectional (they run the forward direction and the reverse one): 27 of
  the 87 samples, each of the other configurations (bias, batch_first, nonlinearity, proj_size)
  still in.
- test_memory_format: the inputs are 2-D/3-D, so only ``contiguous_format`` / ``preserve_format``
  apply: same outputs and gradients, contiguous outputs.
- test_if_train_and_eval_modes_differ: forward without the ``training`` attribute; a module that
  reads it must be flagged as differing between train and eval. The flag is recdrop's, not the
  ModuleInfo's: see ``RECDROP_TRAIN_AND_EVAL_DIFFER``. Added: with ``recurrent_dropout=0.5`` the
  train and eval outputs do differ.
- test_device_ctx_init: a module built under ``torch.device("meta")`` has the same parameter
  metadata as one built on the CPU.
- test_errors: every ``module_error_inputs_func`` entry raises torch's error type with a message
  matching torch's regex (at construction or at forward, as the entry says).
- test_to (swap x set_grad) and test_to_empty (swap): ``Module.to`` / ``to_empty`` with and without
  ``torch.__future__.set_swap_module_params_on_conversion``; parameters stay ``Parameter``s, on
  the right device and dtype, swapped or ``.data``-set as torch expects.
- test_cpu_gpu_parity: CPU and CUDA outputs and gradients agree; skipped here without CUDA.
- test_module_load (added; not a test of the test_modules.py read, in the spirit of its swap
  tests): ``load_state_dict`` with ``assign=True`` and with swapping on (``Tensor.module_load``)
  loads a torch.nn module's weights and gives torch.nn's output; where torch.nn itself cannot
  (swapping into its RNN/GRU/LSTM: "Cannot swap t1 because it has weakref associated with it"),
  recdrop must fail with the same error type.
- test_torch_parity_backward (added): the gradients of input, hx and every parameter equal
  torch.nn's, in train and eval mode (float64; test_forward compares the outputs in float32 too).

Not ported:

- test_check_inplace: only for modules with an ``inplace`` argument; these have none.
- torch's CUDA-only machinery (``_do_cuda_memory_leak_check``, non-default streams, cuDNN
  expected failures in ``rnn_gru_lstm_module_info_decorators``, TF32 switches, cross-GPU
  transfer): nothing of it applies to a CPU run.
- MPS / XPU / HPU variants and dtypes (float16/bfloat16 on those backends): CPU only here.
- Lazy-module branches of the tests: none of these modules is lazy.

The tests use torch's own helpers (``gradcheck``, ``gradgradcheck``, ``freeze_rng_state``,
``mock_wrapper``, ``get_tensors_from`` from ``torch.testing._internal.common_utils``, which needs
torch's test dependency ``expecttest``, in recdrop's ``test`` extra). Importing common_utils also
calls ``torch.backends.disable_global_flags()`` (cuDNN/MKLDNN flags then change only through
their context managers) for the rest of the pytest session; nothing in recdrop sets them.

Failures are left failing on purpose (no xfail): they are the differences between recdrop and
torch.nn that these tests find.
"""
from __future__ import annotations

import copy
import pickle
import re
import tempfile
from itertools import product
from unittest.mock import patch

import pytest
import torch

from torch._subclasses.meta_utils import assert_metadata_eq
from torch.testing._internal.common_modules import ModuleErrorEnum, module_db
from torch.testing._internal.common_utils import (
    freeze_rng_state, get_tensors_from, gradcheck, gradgradcheck, mock_wrapper)
from torch.utils._pytree import tree_flatten, tree_unflatten

import recdrop

# torch.nn class -> its recdrop twin
TWINS = {
    torch.nn.RNN: recdrop.RNN,
    torch.nn.GRU: recdrop.GRU,
    torch.nn.LSTM: recdrop.LSTM,
    torch.nn.RNNCell: recdrop.RNNCell,
    torch.nn.GRUCell: recdrop.GRUCell,
    torch.nn.LSTMCell: recdrop.LSTMCell,
}
MODULE_INFOS = [mi for mi in module_db if mi.module_cls in TWINS]
assert len(MODULE_INFOS) == 6, [mi.name for mi in MODULE_INFOS]

# torch behaviour not wanted in recdrop, with reason. test_if_train_and_eval_modes_differ checks a
# module against its ModuleInfo's ``train_and_eval_differ`` flag, which describes torch.nn: torch's
# cells have no dropout, so theirs is False. recdrop's cells read ``self.training`` by design (their
# recurrent dropout acts only while training), so for recdrop the flag is True for all six.
RECDROP_TRAIN_AND_EVAL_DIFFER = {cls: True for cls in TWINS}

# torch's test_grad / test_gradgrad also check each parameter's partial derivative on its own; off
# to keep the file within about a minute (see the module docstring)
GRAD_PARTIALS = False

DEVICE = "cpu"
DTYPES = [torch.float32, torch.float64]
DTYPE_IDS = ["float32", "float64"]
TRAINING = [True, False]
TRAINING_IDS = ["train", "eval"]

# -- samples ------------------------------------------------------------------------------------

_SHORT = {"input_size": "in", "hidden_size": "h", "num_layers": "L", "proj_size": "proj",
          "batch_first": "bf", "bias": "bias", "bidirectional": "bidir", "nonlinearity": "nl"}


def _fmt(v) -> str:
    return {True: "T", False: "F"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _sample_id(mi, i, sample) -> str:
    c = sample.constructor_input
    parts = [_fmt(a) for a in c.args] + [f"{_SHORT.get(k, k)}={_fmt(v)}" for k, v in c.kwargs.items()]
    fwd = sample.forward_input
    state = "hx" if fwd is not None and len(fwd.args) > 1 else "nohx"
    return f"{mi.module_cls.__name__}-{i:02d}-{','.join(parts)},{state}"


def _samples(mi, dtype=torch.float32, requires_grad=False, training=True, device=DEVICE):
    return list(mi.module_inputs_func(mi, device=device, dtype=dtype, requires_grad=requires_grad,
                                      training=training))


SAMPLES = [(_mi, _i, _sample_id(_mi, _i, _s)) for _mi in MODULE_INFOS for _i, _s in enumerate(_samples(_mi))]
SAMPLE_PARAMS = [pytest.param(mi, i, id=sid) for mi, i, sid in SAMPLES]

# Which code computes the forward (see the module docstring): "default", the module as built;
# "own", a layer made to run recdrop's own recurrent code where it would hand over to torch.nn's
# kernels; "rdrop", the module built with recurrent_dropout=0.5 (masks act in train mode only).
LAYERS = (torch.nn.RNN, torch.nn.GRU, torch.nn.LSTM)


def _path_params(paths, where=lambda mi, i, sid: True):
    return [pytest.param(mi, i, path, id=f"{sid}-{path}") for mi, i, sid in SAMPLES for path in paths
            if where(mi, i, sid)]


ERROR_PARAMS = []
for _mi in MODULE_INFOS:
    _errs = _mi.module_error_inputs_func(_mi, device=DEVICE, dtype=torch.float32, requires_grad=False,
                                         training=True)
    for _j, _e in enumerate(_errs):
        _slug = re.sub(r"[^A-Za-z0-9]+", "_", _e.error_regex)[:40].strip("_")
        ERROR_PARAMS.append(pytest.param(_mi, _j, id=f"{_mi.module_cls.__name__}-err{_j:02d}-{_slug}"))

MI_PARAMS = [pytest.param(mi, id=mi.module_cls.__name__) for mi in MODULE_INFOS]


def _sample(mi, i, **kw):
    return _samples(mi, **kw)[i]


def _build(mi, sample, path="default", **extra):
    """The recdrop twin of ``mi.module_cls`` built with the sample's constructor arguments, set to
    compute along ``path``."""
    c = sample.constructor_input
    if path == "rdrop":
        extra = {"recurrent_dropout": 0.5, **extra}
    m = TWINS[mi.module_cls](*c.args, **c.kwargs, **extra)
    if path == "own":  # a recdrop module that would hand over to torch.nn's kernels
        assert hasattr(m, "torch_kernels"), (
            "recdrop's module has no `torch_kernels` switch: update _build's 'own' path to the new way "
            "of running recdrop's own recurrent code")
        m.torch_kernels = False
    return m


def _torch_twin(mi, sample, m):
    """torch.nn's module built with the same arguments, holding ``m``'s weights."""
    c = sample.constructor_input
    t = mi.module_cls(*c.args, **c.kwargs)
    p = next(m.parameters())
    t.to(device=p.device, dtype=p.dtype)
    t.load_state_dict(m.state_dict())
    t.train(m.training)
    return t


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def swap_conversion():
    """Restore torch's swap-on-conversion setting after a test that changes it."""
    before = torch.__future__.get_swap_module_params_on_conversion()
    yield torch.__future__.set_swap_module_params_on_conversion
    torch.__future__.set_swap_module_params_on_conversion(before)


# -- object helpers (as torch's _traverse_obj & co) --------------------------------------------

def _traverse(obj, func):
    if isinstance(obj, (tuple, list)):
        return type(obj)(_traverse(o, func) for o in obj)
    if isinstance(obj, dict):
        return {k: _traverse(o, func) for k, o in obj.items()}
    if isinstance(obj, torch.Tensor):
        return func(obj)
    return obj


def _retain_grad(obj):
    def f(t):
        if t.requires_grad:
            t.retain_grad()
    _traverse(obj, f)


def _get_grads(obj):
    return _traverse(obj, lambda t: t.grad if t.requires_grad else None)


def _zero_grad(obj):
    def f(t):
        t.grad = None
    _traverse(obj, f)


def _assert_params_and_buffers_are(m, device, dtype):
    device = torch.device(device)
    for kind, items in (("Parameter", m.named_parameters()), ("Buffer", m.named_buffers())):
        for name, t in items:
            assert t.device == device, f"{kind} {name} is on {t.device}, expected {device}"
            if t.dtype.is_floating_point:
                assert t.dtype == dtype, f"{kind} {name} is {t.dtype}, expected {dtype}"


def _close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, **kw)


def _assert_ran_along(m, path):
    """That a layer's last call took ``path``'s kernels: torch.nn's as built (``default``, where no
    recurrent dropout acts), recdrop's own otherwise; the comparison with torch.nn is a test of the
    hand-over on the first and of recdrop's code on the others. (A cell keeps no route.)"""
    if getattr(m, "last_route", None) is not None:
        assert (m.last_route.body == "torch.nn") == (path == "default"), (path, m.last_route)


# -- test_forward -------------------------------------------------------------------------------

@pytest.mark.parametrize("training", TRAINING, ids=TRAINING_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mi,i,path", _path_params(["default", "own"]))
def test_forward(mi, i, path, dtype, training):
    sample = _sample(mi, i, dtype=dtype, training=training)
    with freeze_rng_state():
        m = _build(mi, sample, path)
        m.to(DEVICE).to(dtype)
        m.train(training)
        args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
        outputs = m(*args, **kwargs)
        _assert_ran_along(m, path)

        # the ModuleInfo's reference: unbatched input == a batch of one
        if sample.reference_fn is not None:
            _close(outputs, sample.reference_fn(m, *args, **kwargs))

        # torch.nn with the same arguments and weights (recurrent dropout is off by default)
        twin = _torch_twin(mi, sample, m)
        _close(outputs, twin(*copy.deepcopy(args), **copy.deepcopy(kwargs)))

        # .float() / .double(), then forward
        {torch.float32: m.float, torch.float64: m.double}[dtype]()
        m(*args, **kwargs)
        _assert_params_and_buffers_are(m, DEVICE, dtype)


# -- test_factory_kwargs ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_factory_kwargs(mi, i, dtype):
    sample = _sample(mi, i, dtype=dtype)
    args, kwargs = sample.constructor_input.args, dict(sample.constructor_input.kwargs)

    creates = False
    parameter_new = mock_wrapper(torch.nn.Parameter.__new__)
    with patch.object(torch.nn.Parameter, "__new__", parameter_new):
        register_buffer = mock_wrapper(torch.nn.Module.register_buffer)
        with patch.object(torch.nn.Module, "register_buffer", register_buffer):
            TWINS[mi.module_cls](*args, **kwargs)
            constructor_tensors = get_tensors_from(args, kwargs)
            for mock in (parameter_new.mock, register_buffer.mock):
                for call_args, call_kwargs in mock.call_args_list:
                    tensors = get_tensors_from(call_args, call_kwargs)
                    if tensors and not constructor_tensors.intersection(tensors):
                        creates = True
    assert creates, "the module created no parameter or buffer"

    kwargs.update(device=DEVICE, dtype=dtype)
    m = TWINS[mi.module_cls](*args, **kwargs)
    _assert_params_and_buffers_are(m, DEVICE, dtype)


# -- test_multiple_device_transfer --------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA: on one device there is no transfer (torch's test is onlyCUDA too)")
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_multiple_device_transfer(mi, i):  # pragma: no cover - CUDA only
    dtype = torch.float32
    device = "cuda"
    on_device = _sample(mi, i, dtype=dtype, device=device)
    on_cpu = _sample(mi, i, dtype=dtype, device="cpu")
    with freeze_rng_state():
        m = _build(mi, on_device)
        m.to(device).to(dtype)
        m(*on_device.forward_input.args, **on_device.forward_input.kwargs)
        _assert_params_and_buffers_are(m, device, dtype)

        m.cpu()
        m(*on_cpu.forward_input.args, **on_cpu.forward_input.kwargs)
        _assert_params_and_buffers_are(m, "cpu", dtype)

        m.to(device)
        m(*on_device.forward_input.args, **on_device.forward_input.kwargs)
        _assert_params_and_buffers_are(m, device, dtype)


# -- test_repr ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_repr(mi, i):
    sample = _sample(mi, i)
    for training in TRAINING:
        m = _build(mi, sample)
        m.to(DEVICE).to(torch.float32)
        m.train(training)
        assert repr(m).startswith(mi.module_cls.__name__ + "(")
        str(m)


# -- test_save_load (torch's test_pickle, renamed) ----------------------------------------------

RECDROP_CLASSES = [getattr(recdrop, name) for name in recdrop.__all__ if isinstance(getattr(recdrop, name), type)]

@pytest.mark.parametrize("training", TRAINING, ids=TRAINING_IDS)
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_save_load(mi, i, training):
    sample = _sample(mi, i, training=training)
    with freeze_rng_state():
        m = _build(mi, sample)
        m.to(DEVICE).to(torch.float32)
        m.train(training)
        sd = m.state_dict()
        args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
        output = m(*args, **kwargs)

        with tempfile.TemporaryFile() as f:  # the whole module
            torch.save(m, f)
            f.seek(0)
            with torch.serialization.safe_globals(RECDROP_CLASSES):  # recdrop's public classes, nothing else
                m_copy = torch.load(f, weights_only=True)
            _close(m_copy(*args, **kwargs), output)
        _close(pickle.loads(pickle.dumps(m))(*args, **kwargs), output)

        with tempfile.TemporaryFile() as f:  # its state_dict
            torch.save(sd, f)
            f.seek(0)
            _close(torch.load(f, weights_only=True), sd)

    # the state_dict is torch.nn's: same keys and shapes, loads strictly both ways
    c = sample.constructor_input
    t = mi.module_cls(*c.args, **c.kwargs)
    t_sd = t.state_dict()
    assert list(sd) == list(t_sd)
    assert {k: v.shape for k, v in sd.items()} == {k: v.shape for k, v in t_sd.items()}
    t.load_state_dict(sd)
    fresh = _build(mi, sample)
    fresh.load_state_dict(t_sd)
    _close(fresh.state_dict(), t_sd)


# -- test_non_contiguous_tensors ----------------------------------------------------------------

def _make_non_contiguous(obj):
    def f(t):
        if t.dim() == 0:
            return t
        out = torch.repeat_interleave(t, 2, dim=-1)[..., ::2].detach()
        out.requires_grad = t.requires_grad
        return out
    return _traverse(obj, f)


def _backward_each(outputs, grads):
    flat_out, _ = tree_flatten(outputs)
    flat_g, _ = tree_flatten(grads)
    for o, g in zip(flat_out, flat_g):
        if o.requires_grad:
            o.backward(g, retain_graph=True)


@pytest.mark.parametrize("training", [True], ids=["train"])  # train only: see the module docstring
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mi,i,path", _path_params(["default", "rdrop"]))
def test_non_contiguous_tensors(mi, i, path, dtype, training):
    sample = _sample(mi, i, dtype=dtype, requires_grad=True, training=training)
    input_args, input_kwargs = sample.forward_input.args, sample.forward_input.kwargs
    m = _build(mi, sample, path)
    m.to(DEVICE).to(dtype)
    m.train(training)
    _retain_grad((input_args, input_kwargs))

    with freeze_rng_state():
        default_output = m(*input_args, **input_kwargs)
        grad_output = _traverse(default_output, lambda o: o.clone().detach_().normal_())
        _backward_each(default_output, grad_output)
    default_in_grads = copy.deepcopy(_get_grads((input_args, input_kwargs)))
    default_param_grads = copy.deepcopy([p.grad for p in m.parameters()])

    nc_args, nc_kwargs = _make_non_contiguous((input_args, input_kwargs))
    assert any(not t.is_contiguous() for t in tree_flatten((nc_args, nc_kwargs))[0]
               if isinstance(t, torch.Tensor))
    nc_grad_output = _make_non_contiguous(grad_output)

    for (in_args, in_kwargs), g_out in product([(input_args, input_kwargs), (nc_args, nc_kwargs)],
                                               [grad_output, nc_grad_output]):
        g_out = copy.deepcopy(g_out)
        _zero_grad((in_args, in_kwargs))
        _zero_grad(list(m.parameters()))
        with freeze_rng_state():
            out = m(*in_args, **in_kwargs)
            _backward_each(out, g_out)
        _close(out, default_output)
        _close(_get_grads((in_args, in_kwargs)), default_in_grads, atol=1e-4, rtol=0)
        _close([p.grad for p in m.parameters()], default_param_grads)


# -- test_grad / test_gradgrad ------------------------------------------------------------------

def _gradients_helper(mi, i, path, training, check, partials):
    dtype = torch.float64
    sample = _sample(mi, i, dtype=dtype, requires_grad=True, training=training)
    m = _build(mi, sample, path)
    m.to(DEVICE).to(dtype)
    m.train(training)
    params = tuple(m.parameters())
    input_args, input_kwargs = sample.forward_input.args, sample.forward_input.kwargs

    kwarg_tensors = [(name, obj) for name, obj in input_kwargs.items() if isinstance(obj, torch.Tensor)]
    other_kwargs = {name: obj for name, obj in input_kwargs.items() if not isinstance(obj, torch.Tensor)}

    def fn(*flat):
        values = tree_unflatten(flat, spec)
        new_args = values[:len(input_args)]
        new_kwargs = {name: obj for (name, _), obj in zip(kwarg_tensors, values[len(values) - len(kwarg_tensors):])}
        with freeze_rng_state():
            return tree_flatten(m(*new_args, **new_kwargs, **other_kwargs))[0]

    def run():
        nonlocal spec
        flat, spec = tree_flatten(input_args + params + tuple(obj for _, obj in kwarg_tensors))
        assert check(fn, flat, nondet_tol=0.0)

    spec = None
    run()  # the total derivative
    if not partials:
        return

    # the partial derivatives, one parameter at a time (the inputs keep requires_grad)
    old = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad = False
    for p, was in zip(params, old):
        p.requires_grad = was
        run()
        p.requires_grad = False
    for p, was in zip(params, old):
        p.requires_grad = was


# train and eval for the module as built, as torch; train only on the other paths (see the module
# docstring): "own" computes the same in both modes, "rdrop" drops nothing in eval
GRAD_PARAMS = [pytest.param(*p.values, training, id=f"{p.id}-{mode}")
               for p in _path_params(["default", "own", "rdrop"])
               for training, mode in zip(TRAINING, TRAINING_IDS) if training or p.values[2] == "default"]


@pytest.mark.parametrize("mi,i,path,training", GRAD_PARAMS)
def test_grad(mi, i, path, training):
    _gradients_helper(mi, i, path, training, gradcheck, partials=GRAD_PARTIALS)


def _gradgrad_sample(mi, i, sid):
    """The samples test_gradgrad runs, for time: those given hx; of the layers', the bidirectional."""
    return mi.supports_gradgrad and sid.endswith(",hx") and (mi.module_cls not in LAYERS or "bidir=T" in sid)


# recdrop's own code only (see the module docstring): along "own"
GRADGRAD_PARAMS = _path_params(["own"], _gradgrad_sample)


@pytest.mark.parametrize("training", [True], ids=["train"])  # train only: see the module docstring
@pytest.mark.parametrize("mi,i,path", GRADGRAD_PARAMS)
def test_gradgrad(mi, i, path, training):
    _gradients_helper(mi, i, path, training, gradgradcheck, partials=GRAD_PARTIALS)


# -- test_cpu_gpu_parity ------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch runs it on CUDA only)")
@pytest.mark.parametrize("training", TRAINING, ids=TRAINING_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mi", MI_PARAMS)
def test_cpu_gpu_parity(mi, dtype, training):  # pragma: no cover - CUDA only
    tol = {torch.float32: dict(atol=5e-2, rtol=0), torch.float64: dict(atol=4e-4, rtol=0)}[dtype]

    def to_gpu(obj):
        if isinstance(obj, torch.Tensor):
            res = obj.detach().to("cuda")
            res.requires_grad = obj.requires_grad
            return res
        if isinstance(obj, tuple):
            return tuple(to_gpu(o) for o in obj)
        if isinstance(obj, dict):
            return {k: to_gpu(o) for k, o in obj.items()}
        return copy.deepcopy(obj)

    for sample in _samples(mi, dtype=dtype, requires_grad=True, training=training):
        cpu_args, cpu_kwargs = sample.forward_input.args, sample.forward_input.kwargs
        gpu_args, gpu_kwargs = to_gpu((cpu_args, cpu_kwargs))
        _retain_grad((cpu_args, cpu_kwargs, gpu_args, gpu_kwargs))
        cpu_m = _build(mi, sample).to(dtype).to("cpu").train(training)
        gpu_m = _build(mi, sample).to(dtype).to("cuda").train(training)
        for cp, gp in zip(cpu_m.parameters(), gpu_m.parameters()):
            gp.data.copy_(cp)
        cpu_out = cpu_m(*cpu_args, **cpu_kwargs)
        gpu_out = gpu_m(*gpu_args, **gpu_kwargs)
        _close(gpu_out, to_gpu(cpu_out), **tol)
        for _ in range(5):
            for co, go in zip(tree_flatten(cpu_out)[0], tree_flatten(gpu_out)[0]):
                if not co.requires_grad:
                    continue
                g = co.clone().normal_()
                co.backward(g, retain_graph=True)
                go.backward(g.to("cuda"), retain_graph=True)
                _close(tuple(t.cpu() for t in tree_flatten(_get_grads(gpu_args))[0] if t is not None),
                       tuple(t for t in tree_flatten(_get_grads(cpu_args))[0] if t is not None), **tol)
                for cp, gp in zip(cpu_m.parameters(), gpu_m.parameters()):
                    _close(gp.grad.cpu(), cp.grad, **tol)


# -- test_memory_format -------------------------------------------------------------------------

@pytest.mark.parametrize("training", TRAINING, ids=TRAINING_IDS)
@pytest.mark.parametrize("mi,i,path", _path_params(["own"]))  # (changed) recdrop's own code, not torch.nn's kernels
def test_memory_format(mi, i, path, training):
    dtype = torch.float32
    sample = _sample(mi, i, dtype=dtype, requires_grad=True, training=training)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    dims = {t.dim() for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)}
    assert not dims & {4, 5}, "channels_last formats would apply: extend this port"
    # No 4-D or 5-D tensors, so no channels-last formats: beside the contiguous input, the same values
    # held with their dimensions' order in memory reversed (a transposed view's strides, as batch_first
    # and sliced inputs bring).
    def reversed_strides(t):
        order = list(reversed(range(t.dim())))
        return t.permute(order).contiguous().permute(order)
    input_layouts = {"contiguous": lambda t: t.clone().to(memory_format=torch.contiguous_format),
                     "reversed strides": reversed_strides}
    module_formats = [torch.preserve_format, torch.contiguous_format]

    def req_grad(t):
        return isinstance(t, torch.Tensor) and t.requires_grad

    with freeze_rng_state():
        m = _build(mi, sample, path)
        m.to(DEVICE).to(dtype)
        m.train(training)
        desired = m(*args, **kwargs)
        ref_outs = tuple(t for t in tree_flatten(desired)[0] if req_grad(t))
        params = tuple(m.parameters())
        if training and ref_outs:
            ref_ins = tuple(t for t in tree_flatten((args, kwargs, params))[0] if req_grad(t))
            ref_g_outs = tuple(torch.rand_like(t) for t in ref_outs)
            ref_g_ins = torch.autograd.grad(ref_outs, ref_ins, grad_outputs=ref_g_outs)

        for layout, held in input_layouts.items():
            d_args = _traverse(args, lambda t: held(t).detach().requires_grad_(t.requires_grad))
            d_kwargs = _traverse(kwargs, lambda t: held(t).detach().requires_grad_(t.requires_grad))
            matrices = [t for t in tree_flatten((d_args, d_kwargs))[0]
                        if isinstance(t, torch.Tensor) and t.dim() > 1 and min(t.shape) > 1]
            assert all(t.is_contiguous() == (layout == "contiguous") for t in matrices)
            for mod_fmt in module_formats:
                m.to(memory_format=mod_fmt)
                outputs = m(*d_args, **d_kwargs)
                _close(outputs, desired)
                for o in tree_flatten(outputs)[0]:
                    assert o.is_contiguous(), f"output of shape {tuple(o.shape)} is not contiguous"
                outs = tuple(t for t in tree_flatten(outputs)[0] if req_grad(t))
                if training and outs:
                    ins = tuple(t for t in tree_flatten((d_args, d_kwargs, params))[0] if req_grad(t))
                    g_ins = torch.autograd.grad(outs, ins, grad_outputs=ref_g_outs)
                    _close(g_ins, ref_g_ins)
                    for g, leaf in zip(g_ins, ins):  # contiguous, or in its input's own layout
                        assert g.is_contiguous() or g.stride() == leaf.stride(), \
                            f"gradient of shape {tuple(g.shape)} has strides {g.stride()}, its input {leaf.stride()}"


# -- test_if_train_and_eval_modes_differ --------------------------------------------------------

@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_if_train_and_eval_modes_differ(mi, i):
    sample = _sample(mi, i, training=True)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    m = _build(mi, sample)
    m.to(DEVICE).to(torch.float32)
    m.train(True)
    delattr(m, "training")
    if RECDROP_TRAIN_AND_EVAL_DIFFER[mi.module_cls]:  # (added) the flag says forward reads `training`: it must
        with pytest.raises(AttributeError, match="'training'"):
            m(*args, **kwargs)
    else:
        m(*args, **kwargs)

    # added: with recurrent dropout on, eval is torch.nn's output and training changes it. Some
    # initialisations give an output that no mask can change (relu without bias: all zeros), so a
    # few are tried.
    if RECDROP_TRAIN_AND_EVAL_DIFFER[mi.module_cls]:
        differ = False
        for seed in range(10):
            torch.manual_seed(seed)
            m = _build(mi, sample, recurrent_dropout=0.5)
            with torch.no_grad():
                m.eval()
                ev = tree_flatten(m(*args, **kwargs))[0]
                twin = _torch_twin(mi, sample, m).eval()
                _close(ev, tree_flatten(twin(*args, **kwargs))[0])
                m.train()
                tr = tree_flatten(m(*args, **kwargs))[0]
            differ = differ or any(not torch.allclose(a, b) for a, b in zip(tr, ev))
            if differ:
                break
        assert differ, "train and eval outputs are equal under recurrent_dropout=0.5 for 10 initialisations"


# -- test_device_ctx_init -----------------------------------------------------------------------

@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_device_ctx_init(mi, i):
    sample = _sample(mi, i)
    with torch.device("meta"):
        sample_meta = _sample(mi, i, device=None)
    m_cpu = _build(mi, sample)
    with torch.device("meta"):
        m = _build(mi, sample_meta)
    pairs = list(zip(m.parameters(), m_cpu.parameters())) + list(zip(m.buffers(), m_cpu.buffers()))
    assert len(pairs) == len(list(m_cpu.parameters())) + len(list(m_cpu.buffers()))
    for p_meta, p_cpu in pairs:
        assert p_meta.is_meta
        assert_metadata_eq(_assert_equal, p_meta, p_cpu)


def _assert_equal(a, b, *_, **__):
    assert a == b, f"{a!r} != {b!r}"


# -- test_errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("mi,j", ERROR_PARAMS)
def test_errors(mi, j):
    error = mi.module_error_inputs_func(mi, device=DEVICE, dtype=torch.float32, requires_grad=False,
                                        training=True)[j]
    module_input = error.module_error_input
    c = module_input.constructor_input
    cls = TWINS[mi.module_cls]
    what = f"{cls.__name__}(*{c.args!r}, **{c.kwargs!r})"
    if error.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
        def act():
            cls(*c.args, **c.kwargs)
    elif error.error_on == ModuleErrorEnum.FORWARD_ERROR:
        m = cls(*c.args, **c.kwargs)
        f = module_input.forward_input
        what += " forward(" + ", ".join(str(tuple(t.shape)) if isinstance(t, torch.Tensor) else
                                        str(tuple(tuple(u.shape) for u in t)) for t in f.args) + ")"

        def act():
            m(*f.args, **f.kwargs)
    else:
        raise NotImplementedError(error.error_on)

    try:
        act()
    except Exception as e:  # noqa: BLE001 - compared below with torch's expectation
        raised = e
    else:
        pytest.fail(f"{what}: raised nothing; torch raises {error.error_type.__name__}"
                    f"({error.error_regex!r})")
    assert isinstance(raised, error.error_type), (
        f"{what}: raised {type(raised).__name__}({raised}); torch raises "
        f"{error.error_type.__name__} matching {error.error_regex!r}")
    assert re.search(error.error_regex, str(raised)), (
        f"{what}: message {str(raised)!r} does not match torch's {error.error_regex!r}")


# -- test_to / test_to_empty --------------------------------------------------------------------

@pytest.mark.parametrize("set_grad", [True, False], ids=["set_grad", "no_grad"])
@pytest.mark.parametrize("swap", [True, False], ids=["swap", "noswap"])
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_to(mi, i, swap, set_grad, swap_conversion):
    dtype, device = torch.float32, DEVICE
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    sample = _sample(mi, i, dtype=dtype)
    swap_conversion(swap)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    m = _build(mi, sample)

    def _to(mod):  # not Module.to: that is what is tested
        for c in mod.children():
            _to(c)
        for n, p in mod.named_parameters(recurse=False):
            new_p = torch.nn.Parameter(p.detach().clone().to(device, dtype))
            setattr(mod, n, new_p)
            if set_grad:
                new_p.grad = torch.randn_like(new_p)
        for n, b in mod.named_buffers(recurse=False):
            setattr(mod, n, b.detach().clone().to(device, dtype))
    _to(m)

    if swap and not set_grad:  # .to() works after a forward and backward with swap on
        out = m(*args, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        out.sum().backward()
        m.to(dtype=torch.half)
        m.to(dtype=torch.float32)

    prev = (device, dtype)
    for device_, dtype_ in product(devices, mi.dtypes):
        g_no_swap = (device_, dtype_) == prev
        prev = (device_, dtype_)
        p_ids = [id(p) for p in m.parameters()]
        p_cdatas = [p._cdata for p in m.parameters()]
        if set_grad:
            g_ids = [id(p.grad) for p in m.parameters()]
            g_cdatas = [p.grad._cdata for p in m.parameters()]

        m.to(device=device_, dtype=dtype_)

        assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
        assert all(p.device.type == device_ for p in m.parameters())
        assert all(p.dtype == dtype_ for p in m.parameters())
        p_ids_after = [id(p) for p in m.parameters()]
        p_cdatas_after = [p._cdata for p in m.parameters()]
        if set_grad:
            assert all(p.grad.device.type == device_ and p.grad.dtype == dtype_ for p in m.parameters())
            g_ids_after = [id(p.grad) for p in m.parameters()]
            g_cdatas_after = [p.grad._cdata for p in m.parameters()]
        if swap:  # same Python object, swapped storage
            assert p_ids == p_ids_after
            assert all(a != b for a, b in zip(p_cdatas, p_cdatas_after))
            if set_grad:
                assert all((a == b) if g_no_swap else (a != b) for a, b in zip(g_cdatas, g_cdatas_after))
        else:  # .data set in place
            assert p_cdatas == p_cdatas_after and p_ids == p_ids_after
            if set_grad:
                assert g_cdatas == g_cdatas_after and g_ids == g_ids_after
        # and it still runs
        fwd = _sample(mi, i, dtype=dtype_, device=device_).forward_input
        m(*fwd.args, **fwd.kwargs)


@pytest.mark.parametrize("swap", [True, False], ids=["swap", "noswap"])
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_to_empty(mi, i, swap, swap_conversion):
    dtype = torch.float32
    with torch.device("meta"):
        sample = _sample(mi, i, device=None, dtype=dtype)
    swap_conversion(swap)
    device = torch.device(DEVICE)
    with torch.device("meta"):
        m = _build(mi, sample)
    p_ids = [id(p) for p in m.parameters()]
    p_cdatas = [p._cdata for p in m.parameters()]
    m.to_empty(device=device)
    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
    assert all(p.device == device for p in m.parameters())
    assert all(p.dtype == dtype for p in m.parameters())
    p_ids_after = [id(p) for p in m.parameters()]
    p_cdatas_after = [p._cdata for p in m.parameters()]
    if swap:
        assert p_ids == p_ids_after
        assert all(a != b for a, b in zip(p_cdatas, p_cdatas_after))
    else:
        assert all(a != b for a, b in zip(p_ids, p_ids_after))
        assert all(a != b for a, b in zip(p_cdatas, p_cdatas_after))


# -- test_module_load (added) -------------------------------------------------------------------

@pytest.mark.parametrize("how", ["swap", "assign"])
@pytest.mark.parametrize("mi,i", SAMPLE_PARAMS)
def test_module_load(mi, i, how, swap_conversion):
    sample = _sample(mi, i)
    c = sample.constructor_input
    source = mi.module_cls(*c.args, **c.kwargs).eval()
    swap_conversion(how == "swap")
    kw = {"assign": how == "assign"}

    # what torch.nn does with the same load: its RNN/GRU/LSTM cannot swap (their weakrefs to the
    # flat weights), and a drop-in replacement then fails the same way
    t = mi.module_cls(*c.args, **c.kwargs).eval()
    try:
        t.load_state_dict({k: v.clone() for k, v in source.state_dict().items()}, **kw)
    except Exception as e:  # noqa: BLE001
        torch_error = e
    else:
        torch_error = None

    m = _build(mi, sample).eval()
    ids = [id(p) for p in m.parameters()]
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    if torch_error is not None:
        with pytest.raises(type(torch_error)):
            m.load_state_dict(sd, **kw)
        return
    m.load_state_dict(sd, **kw)
    assert all(isinstance(p, torch.nn.Parameter) for p in m.parameters())
    if how == "swap":
        assert [id(p) for p in m.parameters()] == ids
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    with torch.no_grad():
        _close(m(*args, **kwargs), source(*args, **kwargs))


# -- test_torch_parity_backward (added) ---------------------------------------------------------

@pytest.mark.parametrize("training", TRAINING, ids=TRAINING_IDS)
@pytest.mark.parametrize("dtype", [torch.float64], ids=["float64"])  # test_forward compares float32 too
@pytest.mark.parametrize("mi,i,path", _path_params(["default", "own"]))
def test_torch_parity_backward(mi, i, path, dtype, training):
    sample = _sample(mi, i, dtype=dtype, requires_grad=True, training=training)
    m = _build(mi, sample, path).to(dtype).train(training)
    t = _torch_twin(mi, sample, m)
    args, kwargs = sample.forward_input.args, sample.forward_input.kwargs
    t_args, t_kwargs = _traverse((args, kwargs), lambda x: x.detach().clone().requires_grad_(x.requires_grad))

    out, t_out = tree_flatten(m(*args, **kwargs))[0], tree_flatten(t(*t_args, **t_kwargs))[0]
    _assert_ran_along(m, path)
    _close(out, t_out)
    g = [torch.randn_like(o) for o in out]
    torch.autograd.backward(out, g)
    torch.autograd.backward(t_out, g)
    _close(tree_flatten(_get_grads((args, kwargs)))[0], tree_flatten(_get_grads((t_args, t_kwargs)))[0])
    grads = {n: p.grad for n, p in m.named_parameters()}
    t_grads = {n: p.grad for n, p in t.named_parameters()}
    _close(grads, t_grads)
