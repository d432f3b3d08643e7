"""C++ kernels for the fused LSTM and GRU on a CPU: the LSTM's whole loop, the GRU's pointwise work a step at a time.

The CPU's counterpart of :mod:`recdrop.triton_kernels`, with the same equations: for the LSTM, forward the
gate activations, Semeniuta's d(g_t) (Eq. 9), c_t with Moon's d(.) (Eq. 8), act(c_t) and h_t (Eq. 6), and
Gal's d(h_t) (Eq. 7) for the next step's product; backward the step's pre-activation gradients, with Gal's
d(.) on the incoming dh; for the GRU the same for its gates (torch.nn's form, Eq. 13 with Gal and Moon).
Pointwise work is one pass over a step's memory, vectorised with ATen's ``at::vec`` (the exp of ATen's own
CPU kernels; tanh as 2 sigmoid(2x) - 1, as the torch path computes g), where the torch path runs about nine
ops a step, each a pass and a dispatch of its own.

The LSTM's loop runs in C++ whole (``lstm_forward_sequence``, ``lstm_backward_sequence``): each step is one
parallel region in which every thread computes the step's product for its own block of units and then
those units' pointwise work, while the product's rows are still in its cache. The products run through
oneDNN's batch-reduce GEMM kernel (``at::native::cpublas::brgemm``, set up once per shape, where a oneDNN
product called from Python sets itself up at every call, a cost a step's small product feels) or through
ATen's mm (MKL's on x86), whichever is the faster on the machine
(``brgemm_faster``, chosen as ``cpu_products`` chooses), with the weight laid out once per sequence so
that each block's columns are dense. The GRU's products stay in Python, on oneDNN or MKL
(``cpu_products``), as do the LSTM's input projection and weight gradients.

The source (``csrc/cpu_kernels.cpp``) is compiled on first use by ``torch.utils.cpp_extension.load``
for the vector instructions ATen's kernels use on this CPU (``torch.backends.cpu.get_cpu_capability``),
and kept in torch's extension cache (``TORCH_EXTENSIONS_DIR``) for every later process. Where it cannot
be built (no C++ compiler or no ninja) the fused path keeps its torch ops, said once.
``RECDROP_CPU_KERNELS=0`` turns the kernels off.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch.utils import cpp_extension

from . import cpu_products, route

SOURCE = Path(__file__).with_name("csrc") / "cpu_kernels.cpp"

# The compiler flags of ATen's own vectorised kernels for each capability (as Inductor builds its CPU kernels).
ISA_FLAGS = {"AVX512": ("-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma"),
             "AVX2": ("-mavx2", "-mfma", "-mf16c")}

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_built: dict = {}  # capability -> the compiled module, or None where it could not be built


def _flags(capability: str) -> Tuple[str, ...]:
    """The compiler flags of the kernels for ``capability``: ATen's vector instructions and its macro
    (``at::vec`` selects its implementation by it), OpenMP for ``at::parallel_for``."""
    isa = ISA_FLAGS.get(capability, ())
    return ("-O3", "-fopenmp", *isa, *((f"-DCPU_CAPABILITY_{capability}",) if isa else ()))


@contextlib.contextmanager
def _scripts_on_path():
    """PATH with this Python's scripts folder first while the kernels build: the ninja that pip installed
    beside this Python (a virtual environment's, used without activating it) is found there."""
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), before])
    try:
        yield
    finally:
        os.environ["PATH"] = before


def _in_cache(name: str) -> bool:
    """Whether torch's extension cache holds a build of ``name`` (where torch's layout of it is as known)."""
    try:
        return any(Path(cpp_extension._get_build_directory(name, verbose=False)).glob("*.so"))
    except Exception:  # a private helper of torch's: a torch without it builds as before, unannounced
        return True


def compiled() -> Optional[ModuleType]:
    """The compiled kernels for this CPU, built on the first call of the process (or read from torch's
    extension cache); None where they cannot be built."""
    capability = torch.backends.cpu.get_cpu_capability()
    with _lock:
        if capability not in _built:
            try:
                with _scripts_on_path():
                    flags = _flags(capability)
                    # named by its source and flags: two checkouts of other sources each keep their own build
                    # (under one name, each would rebuild it over the other's at every process start)
                    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:12]
                    name = "recdrop_cpu_kernels_" + re.sub(r"\W", "_", capability.lower()) + "_" + digest  # "NO AVX"
                    if not _in_cache(name) and shutil.which(os.environ.get("CXX", "c++")):  # a half-minute pause, said
                        print(f"recdrop: compiling its CPU kernels for {capability}, once for this machine "
                              "(about 30 s)", file=sys.stderr, flush=True)
                    _built[capability] = cpp_extension.load(name, [str(SOURCE)], extra_cflags=list(flags))
            except Exception as e:  # no compiler, no ninja, a failed build: the torch path runs
                _log.warning("recdrop: its CPU kernels could not be built (%s: %s); the fused path runs "
                             "its torch ops instead", type(e).__name__, (str(e).strip().splitlines() or [""])[-1])
                _built[capability] = None
        return _built[capability]


def usable(x: Tensor) -> bool:
    """Whether the kernels run for ``x``: not switched off (``RECDROP_CPU_KERNELS``), a float32 or float64
    CPU tensor, outside autocast (whose products come in its dtype), and the kernels built."""
    return (route.switched_on("RECDROP_CPU_KERNELS") and x.device.type == "cpu"
            and x.dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled("cpu")
            and compiled() is not None)


def _factor(f, like: Tensor, steps: Optional[int] = None) -> Tuple[Optional[Tensor], Optional[float]]:
    """(mask, number) of a factor of d(.) that is None, a number or a tensor of ``like``'s shape (or one that
    broadcasts to it: a group's constants at test, ``(R, 1, 1)``); with ``steps``, a mask of every step,
    ``(steps, *like.shape)`` (per-step sampling over a sequence)."""
    if f is None:
        return None, None
    if isinstance(f, Tensor):  # in the state's dtype, as the torch path promotes it
        shape = like.shape if steps is None else (steps, *like.shape)
        return (f if f.shape == shape else f.expand(shape)).to(like.dtype).contiguous(), None
    return None, float(f)


def transposed(t: Tensor) -> Tensor:
    """``t.t().contiguous()`` for a matrix, copied on torch's intra-op threads (ATen's transposing copy runs on
    one) where the kernels are built already (a copy is not worth a build) and run (``usable``); ATen's own
    elsewhere, and where autograd would record the copy."""
    if (_built.get(torch.backends.cpu.get_cpu_capability()) is None or not usable(t)
            or (t.requires_grad and torch.is_grad_enabled())):
        return t.t().contiguous()
    return compiled().transposed(t)


def brgemm_faster(h0: Tensor, w_hh: Tensor) -> bool:
    """Whether the LSTM loop's per-step products run on oneDNN's brgemm kernel, not ATen's mm (MKL's on x86):
    where brgemm computes them (float32, ``brgemm_works``) and is the faster on this machine for the class of
    the layer's sizes (``cpu_products.library``: the loop forward and backward over a few steps of zeros, each
    way)."""
    if h0.dtype != torch.float32 or not compiled().brgemm_works():
        return False
    batch, hidden, runs = h0.shape[-2], h0.shape[-1], h0.shape[0] if h0.dim() == 3 else 1

    def ways():
        steps, w = 4, torch.zeros_like(w_hh, memory_format=torch.contiguous_format)
        state, gates = h0.new_zeros(h0.shape), h0.new_zeros(steps, *h0.shape[:-1], 4 * hidden)
        c_all, tc_all, ys = h0.new_zeros(steps + 1, *h0.shape), h0.new_zeros(steps, *h0.shape), \
            h0.new_zeros(steps, *h0.shape)
        no_factors = (None,) * 6

        def loop(brgemm: bool):
            def forward_and_backward():
                compiled().lstm_forward_sequence(gates.clone(), state, w, *no_factors, True, gates, c_all, tc_all, ys,
                                                 None, False, brgemm)
                compiled().lstm_backward_sequence(ys, state, state.clone(), None, w, *no_factors, True, gates, c_all,
                                                  tc_all, gates.clone(), False, brgemm)
            return forward_and_backward
        return loop(False), loop(True)
    library = cpu_products.library("an LSTM's steps in C++, forward and backward", (batch, hidden, runs), ways)
    return library == "onednn"


def lstm_forward_sequence(gx: Tensor, h0: Tensor, w_hh: Tensor, gal, sem, moon, per_step: bool, gates_all: Tensor,
                          c_all: Tensor, tc_all: Tensor, ys: Tensor, hin_all: Optional[Tensor], relu: bool) -> None:
    """An LSTM sequence's forward in processing order, from gx ``(T, [R,] B, 4H)`` (each run's rows contiguous),
    h_0 and c_0 (in ``c_all[0]``): each step's product d(h_{t-1}) W_hh^T and its pointwise work (the gates' activations,
    d(g_t) of Eq. 9, c_t with Moon's d(.) of Eq. 8, act(c_t), h_t of Eq. 6, and the next step's d(h_t) of Eq. 7
    into ``hin_all`` where Gal's factor acts) in one parallel region, each thread on its own units. Fills the
    gates after their activations, c_1 .. c_T, act(c_t) and h_t."""
    steps = gx.shape[0] if per_step else None
    compiled().lstm_forward_sequence(gx, h0.contiguous(), w_hh.contiguous(), *_factor(gal, h0, steps),
                                     *_factor(sem, h0, steps), *_factor(moon, h0, steps), per_step, gates_all, c_all,
                                     tc_all, ys, hin_all, relu, brgemm_faster(h0, w_hh))


def lstm_backward_sequence(d_ys: Tensor, dh: Tensor, dc: Tensor, d_cs: Optional[Tensor], w_hh: Tensor, gal, sem,
                           moon, per_step: bool, gates_all: Tensor, c_all: Tensor, tc_all: Tensor,
                           d_gates: Tensor, relu: bool) -> Tuple[Tensor, Tensor]:
    """The backward loop of ``lstm_forward_sequence``, last step first, from the gradients of the outputs
    ``d_ys``, of the final states ``dh`` and ``dc`` and (or None) of every c_t ``d_cs``: each step's product
    (the next step's gate gradients times ``w_hh``) and its pointwise work in one parallel region. Fills
    ``d_gates`` (its runs may lie apart) and returns the gradients of h_0 and c_0."""
    dc = dc.clone(memory_format=torch.contiguous_format)  # updated in place
    steps = d_ys.shape[0] if per_step else None
    dh0 = compiled().lstm_backward_sequence(d_ys.contiguous(), dh.contiguous(), dc,
                                            None if d_cs is None else d_cs.contiguous(), w_hh.contiguous(),
                                            *_factor(gal, dc, steps), *_factor(sem, dc, steps),
                                            *_factor(moon, dc, steps), per_step, gates_all, c_all, tc_all, d_gates,
                                            relu, brgemm_faster(dc, w_hh))
    return dh0, dc


def gru_forward_step(gx: Tensor, gh: Tensor, h_prev: Tensor, sem, moon, rzn_out: Tensor, hn_out: Tensor,
                     h_out: Tensor, relu: bool) -> None:
    """``triton_kernels.gru_forward_step`` on a CPU: from ``gx`` and ``gh = W_hh d(h_{t-1}) + b_hh``
    ([R,] B, 3H), r, z and the candidate n to ``rzn_out``, W_hn h + b_hn to ``hn_out``, h_t to ``h_out``."""
    compiled().gru_forward_step(gx, gh, h_prev, *_factor(sem, h_prev), *_factor(moon, h_prev), rzn_out, hn_out,
                                h_out, relu)


def gru_backward_step(dz_in: Tensor, mm: Tensor, gal_next, d_y: Tensor, moon, sem, rzn: Tensor, hn: Tensor,
                      h_prev: Tensor, d_gx: Tensor, d_gh: Tensor, dz_out: Tensor, relu: bool) -> None:
    """``triton_kernels.gru_backward_step`` on a CPU: the dh reaching h_t is ``dz_in`` (through the next step's
    z * h) plus ``mm`` (the next step's d_gh @ W_hh) times its Gal factor, plus ``d_y``; writes the step's
    ``d_gx`` and ``d_gh`` ([R,] B, 3H) and ``dz_out`` = dh * z (``dz_out`` may be ``dz_in``)."""
    compiled().gru_backward_step(dz_in, mm, *_factor(gal_next, dz_in), d_y, *_factor(moon, dz_in),
                                 *_factor(sem, dz_in), rzn, hn, h_prev, d_gx, d_gh, dz_out, relu)
