"""The fast path: a whole LSTM, GRU or RNN sequence as one autograd node, with a hand-written backward loop.

The reference path (``recdrop.cells.lstm_step`` in a Python loop) lets autograd record ~15 nodes
per time step. Here the forward runs the same equations (Eqs. 4-9 with d(.) of Eq. 3/18) without
recording, keeping the gate activations, and the backward walks the steps in reverse computing
the gradients by hand; the recurrent weight's gradient is one matmul over all steps after the loop.
Same numbers as the reference path (to float64's rounding), fewer kernels and no per-step
graph. Higher-order gradients (``create_graph=True``: double backward, gradgradcheck) replay the
sequence through the reference steps and let autograd differentiate that, so the gradient is itself
differentiable; first-order backward never records anything. On a CUDA device a forward or backward
loop small enough to repay it runs as a CUDA graph (``recdrop.graphs.loop_graphed``). Where a layer's
route takes them, each LSTM or GRU step's pointwise part is one kernel: Triton's on a GPU
(``recdrop.triton_kernels``), C++ on a CPU (``recdrop.cpu_kernels``), where the LSTM's whole loop, its
products included, runs in C++.

Under autocast (``torch.autocast`` to bfloat16 or float16, as a mixed-precision trainer runs its
forward) the same Functions run with their products in autocast's dtype, as torch.nn's cuDNN path
does there: the input projection is autocast's own, each recurrent weight is cast once in the forward
and once in the backward, and the products accumulate in float32. The cell state, the gate activations
and every other pointwise value stay in the state's float32 (``product_dtype``).
"""
from __future__ import annotations

import contextlib
import functools
from types import ModuleType
from typing import Optional, Tuple

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor

from . import cpu_kernels, cpu_products, route, triton_kernels
from .graphs import run_loop, step_work
from .cells import ACTIVATIONS, gru_step, lstm_step, rnn_recurrent_factor, rnn_step, scaled
from .masks import StepFactors
from .masks import factor_at as _at


def transformed(*tensors: Optional[Tensor]) -> bool:
    """Whether a functorch transform (``torch.func.grad``, ``vmap``, ``jvp``) is active or a tensor
    carries a forward-mode tangent (dual tensors)."""
    if torch._C._are_functorch_transforms_active():
        return True
    return any(isinstance(t, Tensor) and fwAD.unpack_dual(t).tangent is not None for t in tensors)


def plain_ops_needed(*tensors: Optional[Tensor]) -> bool:
    """Whether a forward must run on plain torch ops, not the fast path (one autograd.Function with
    preallocated ``out=`` buffers): under ``torch.jit.trace``, ``torch.compile`` and ``torch.export``
    (which trace ops), and under functorch transforms and forward-mode AD (``transformed``), which an
    autograd.Function without those rules does not support. Autocast runs the fast path
    (``product_dtype``)."""
    return route.ops_recorded() or transformed(*tensors)


def autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type``; never for one autocast does not know ("meta")."""
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def product_dtype(state: Tensor) -> Optional[torch.dtype]:
    """The dtype of the fast path's products: autocast's (bfloat16 or float16) where autocast is on for
    the ``state``'s device and would cast it (float32, or already autocast's dtype, as for a bfloat16
    input), else None (the products in the state's own dtype). The state keeps its own dtype."""
    kind = state.device.type
    if not autocast_on(kind):
        return None
    dtype = torch.get_autocast_dtype(kind)
    return dtype if state.dtype in (torch.float32, dtype) else None


def _autocast_off(device_type: str):
    """A block in which autocast casts nothing on ``device_type``: the sequence Functions cast their
    operands themselves, and their ``out=`` buffers keep the state's dtype."""
    if not torch.amp.is_autocast_available(device_type):  # "meta": nothing to turn off
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def _onednn_usable(*tensors: Tensor) -> bool:
    """Whether oneDNN's linear (``torch.ops.mkldnn._linear_pointwise``, the op Inductor uses on CPUs) can
    compute products of ``tensors``: float32 CPU tensors, outside autocast (whose products are torch's
    own in autocast's dtype), and a torch that has it."""
    return (torch.backends.mkldnn.is_available() and torch._C._get_mkldnn_enabled()
            and not torch._C._is_any_autocast_enabled() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and all(t.device.type == "cpu" and t.dtype == torch.float32 and t.numel() > 0 for t in tensors))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b``, contiguous, for 2-D ``a`` and ``b`` of any strides. On a CPU in float32 through the faster
    of oneDNN and MKL's ``torch.mm`` for its class of product (``cpu_products.library``; equal to
    ``torch.mm`` to float32 rounding, another summation order); elsewhere it is ``torch.mm``."""
    if not _onednn_usable(a, b):
        return torch.mm(a, b)
    (m, k), n = a.shape, b.shape[1]
    kind = "product, left transposed" if a.t().is_contiguous() else "product"

    def ways():
        return (lambda: torch.mm(a, b)), (lambda: onednn_matmul(a, b))
    return torch.mm(a, b) if cpu_products.library(kind, (m, k, n), ways) == "mkl" else onednn_matmul(a, b)


def onednn_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` through oneDNN's linear, contiguous."""
    (m, k), n = a.shape, b.shape[1]
    if a.t().is_contiguous() and m * k > (k + m) * n:
        # A weight's gradient (m, k) @ (k, n) over k tokens, with a transposed: oneDNN copies its left
        # operand dense, so where that costs more than copying b and the result, a goes in as the
        # weight and the transposed result is copied (as autograd would copy it into .grad).
        transposed = cpu_kernels.transposed
        return transposed(torch.ops.mkldnn._linear_pointwise(transposed(b), a, None, "none", [], ""))
    return torch.ops.mkldnn._linear_pointwise(a, b.t(), None, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """``F.linear`` with its forward and backward products through ``matmul``'s oneDNN."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, b: Optional[Tensor]):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, w = ctx.saved_tensors
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
        if _differentiable_backward_needed(dy):  # double backward: plain ops that autograd records
            return dy @ w, dy2.t() @ x2, dy2.sum(0) if ctx.has_bias else None
        dx = matmul(dy2, w).view(x.shape) if ctx.needs_input_grad[0] else None
        dw = matmul(dy2.t(), x2) if ctx.needs_input_grad[1] else None
        db = dy2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


def group_linear(x: Tensor, w: Tensor, b: Optional[Tensor] = None) -> Tensor:
    """``x W^T + b`` for a group of runs, each with its own weight: ``x`` ``(T, R, B, I)``,
    ``w`` ``(R, G, I)``, ``b`` ``(R, G)`` -> ``(T, R, B, G)``, in one batched product (on a CPU where
    oneDNN is the faster library, one product per run through it, stacked time-major). Otherwise the
    result is a view of the product's own run-major memory ``(R, T, B, G)``: a copy to time-major would
    move the whole of a group's gx twice a step, forward and backward (the LSTM keeps its gradient
    run-major too)."""
    if x.dim() != 4 or x.shape[1] != w.shape[0]:
        raise ValueError(f"a group's weights {tuple(w.shape)} need inputs of shape (T, R, B, I) with R = {w.shape[0]}, "
                         f"got {tuple(x.shape)}")
    steps, runs, batch, _ = x.shape
    onednn_ok = _onednn_usable(x, w) and not plain_ops_needed(x, w, b)  # a CPU in float32, not traced
    if onednn_ok and onednn_linear_faster(x[:, 0], w[0], None if b is None else b[0]):
        # one product per run through oneDNN (``linear``) beats MKL's ``bmm`` where oneDNN is the faster
        return torch.stack([linear(x[:, r], w[r], None if b is None else b[r]) for r in range(runs)], 1)
    xr = x.transpose(0, 1).reshape(runs, steps * batch, x.shape[-1])
    y = _RunsLinearDenseGrad.apply(xr, w, b) if onednn_ok else _runs_linear(xr, w, b)
    return y.view(runs, steps, batch, w.shape[1]).transpose(0, 1)  # a batch of 0 has no size to infer


def _runs_linear(xr: Tensor, w: Tensor, b: Optional[Tensor]) -> Tensor:
    """``xr w^T + b`` for each run in one batched product: ``xr`` ``(R, N, I)``, ``w`` ``(R, G, I)``,
    ``b`` ``(R, G)``."""
    return torch.bmm(xr, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), xr, w.transpose(1, 2))


class _RunsLinearDenseGrad(torch.autograd.Function):
    """``_runs_linear`` with its own backward, one ``bmm`` each way: the weight's gradient computed in its
    own layout (autograd's ``bmm`` backward gives it transposed, and a module's gradients are dense, as
    torch.nn's)."""

    @staticmethod
    def forward(ctx, xr: Tensor, w: Tensor, b: Optional[Tensor]):
        ctx.save_for_backward(xr, w)
        ctx.has_bias = b is not None
        return _runs_linear(xr, w, b)

    @staticmethod
    def backward(ctx, dy: Tensor):
        xr, w = ctx.saved_tensors  # the ops below are differentiable: a higher-order gradient goes through them
        dx = torch.bmm(dy, w) if ctx.needs_input_grad[0] else None
        dw = torch.bmm(dy.transpose(1, 2), xr) if ctx.needs_input_grad[1] else None
        db = dy.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return dx, dw, db


# Logits held at once by ``group_decoder_nll`` (float32 elements, 256 MB): a chunk of steps of every run.
DECODER_CHUNK = 2**26


def group_decoder_nll(y: Tensor, w: Tensor, b: Tensor, targets: Tensor,
                      steps_per_chunk: Optional[int] = None) -> Tensor:
    """Each run's mean negative log-likelihood of ``targets`` ``(T, B)`` under its decoder, for a group's
    outputs ``y`` ``(T, R, B, H)``, weights ``w`` ``(R, V, H)`` and biases ``b`` ``(R, V)``: ``(R,)``, the
    mean over the tokens of logsumexp(l) - l[target], l = W_r y + b_r (``group_linear``, then each run's
    cross-entropy). Computed ``steps_per_chunk`` steps at a time (default: ``DECODER_CHUNK``
    logits), forward and backward (which computes each chunk's logits again), so that the group's
    logits are never held whole; under autocast the products are in its dtype, the softmax in float32."""
    steps, runs, batch, _ = y.shape
    if w.shape[0] != runs or targets.shape != (steps, batch):
        raise ValueError(f"a group's decoder of {tuple(w.shape)} needs outputs (T, R, B, H) with R = {w.shape[0]} "
                         f"and targets (T, B); got {tuple(y.shape)} and {tuple(targets.shape)}")
    chunk = steps_per_chunk or max(1, DECODER_CHUNK // (runs * batch * w.shape[1]))
    return _GroupDecoderNLL.apply(y, w, b, targets, chunk, product_dtype(y))


def _at_least_float32(dtype: torch.dtype) -> torch.dtype:
    """float32 for a lower precision's logits, float64 for float64's."""
    return torch.promote_types(dtype, torch.float32)


def _chunk_logits(y: Tensor, w_t: Tensor, b: Tensor, targets: Tensor, t0: int, t1: int):
    """The logits ``(R, n, V)`` (at least float32) of steps ``t0:t1`` of every run (``w_t`` its ``(R, H, V)`` weights,
    in the products' dtype), that chunk's outputs ``(R, n, H)`` in it, and its targets ``(R, n, 1)``."""
    runs = y.shape[1]
    yc = y[t0:t1].transpose(0, 1).reshape(runs, -1, y.shape[-1]).to(w_t.dtype)
    # the bias inside the product, in its dtype, as autocast's linear adds it
    logits = torch.baddbmm(b.unsqueeze(1).to(w_t.dtype), yc, w_t).to(_at_least_float32(y.dtype))
    return logits, yc, targets[t0:t1].reshape(1, -1, 1).expand(runs, -1, 1)


class _GroupDecoderNLL(torch.autograd.Function):
    """``group_decoder_nll``: d/dl of the mean NLL is (softmax(l) - onehot(target)) / N, a chunk at a time."""

    @staticmethod
    def forward(ctx, y: Tensor, w: Tensor, b: Tensor, targets: Tensor, chunk: int, dtype: Optional[torch.dtype]):
        ctx.save_for_backward(y, w, b, targets)
        ctx.chunk, ctx.dtype = chunk, dtype
        total = y.new_zeros(y.shape[1], dtype=_at_least_float32(y.dtype))
        with _autocast_off(y.device.type), torch.no_grad():
            w_t = w.transpose(1, 2).to(dtype or w.dtype)
            for t0 in range(0, y.shape[0], chunk):
                logits, _, picked = _chunk_logits(y, w_t, b, targets, t0, t0 + chunk)
                total += (torch.logsumexp(logits, -1) - logits.gather(-1, picked).squeeze(-1)).sum(1)
        return (total / targets.numel()).to(y.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        y, w, b, targets = ctx.saved_tensors
        if _differentiable_backward_needed(grad):
            raise RuntimeError("group_decoder_nll has no higher-order gradient")
        runs, steps, batch = w.shape[0], y.shape[0], y.shape[2]
        wide = _at_least_float32(y.dtype)
        dy, dw, db = torch.empty_like(y), torch.zeros_like(w, dtype=wide), torch.zeros_like(b)
        scale = (grad.to(wide) / targets.numel()).view(runs, 1, 1)
        with _autocast_off(y.device.type):
            low = ctx.dtype or w.dtype
            w_low = w.to(low)
            w_t = w_low.transpose(1, 2)
            for t0 in range(0, steps, ctx.chunk):
                logits, yc, picked = _chunk_logits(y, w_t, b, targets, t0, t0 + ctx.chunk)
                d = torch.softmax(logits, -1).scatter_add_(-1, picked, torch.full_like(picked, -1, dtype=logits.dtype))
                d.mul_(scale)
                d_low = d.to(low)
                db += d_low.sum(1).to(db.dtype)
                dw += torch.bmm(d_low.transpose(1, 2), yc).to(wide)
                n = min(ctx.chunk, steps - t0)
                dy[t0:t0 + n] = torch.bmm(d_low, w_low).view(runs, n, batch, -1).transpose(0, 1)
        return dy, dw.to(w.dtype), db, None, None, None


def linear(x: Tensor, w: Tensor, b: Optional[Tensor] = None) -> Tensor:
    """``F.linear(x, w, b)``; on a CPU in float32, where oneDNN is the faster library for its class of
    product (``cpu_products.library``), through oneDNN forward and backward (``matmul``). ``F.linear``
    itself where the fast path may not run (``plain_ops_needed``) or elsewhere; for a group's stacked
    weights ``(R, G, I)``, ``group_linear``."""
    if w.dim() == 3:
        return group_linear(x, w, b)
    if (x.dim() < 2 or plain_ops_needed(x, w, b) or not _onednn_usable(x, w, *([] if b is None else [b]))
            or not onednn_linear_faster(x, w, b)):
        return F.linear(x, w, b)
    return _OneDNNLinear.apply(x.contiguous(), w, None if b is None else b.contiguous())  # oneDNN reads them dense


def onednn_linear_faster(x: Tensor, w: Tensor, b: Optional[Tensor] = None) -> bool:
    """Whether oneDNN computes ``F.linear(x, w, b)`` faster than MKL on this machine, for its class of
    product (``cpu_products.library``, timed on dense copies of the operands)."""
    def ways():
        xd, bd = x.contiguous(), None if b is None else b.contiguous()
        return (lambda: F.linear(xd, w, bd)), (lambda: torch.ops.mkldnn._linear_pointwise(xd, w, bd, "none", [], ""))
    return cpu_products.library("linear", (x.numel() // x.shape[-1], x.shape[-1], w.shape[0]), ways) == "onednn"


def _packed_matmul_usable(w: Tensor) -> bool:
    """Whether ``_times_transposed`` can pack ``w`` for oneDNN: ``_onednn_usable``, and a torch with
    oneDNN's weight packing."""
    return _onednn_usable(w) and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def _packed_steps_faster(w: Tensor, bias: Optional[Tensor], batch: int, steps: int) -> bool:
    """Whether a sequence's ``steps`` per-step products ``x w^T`` of ``batch`` rows are faster through oneDNN,
    ``w`` packed once for them, than through MKL's ``addmm``, ``w`` made contiguous once for them
    (``cpu_products.library``, timed on zeros of the step's shape, each way's preparation of the weight
    included): the packing of some layouts costs as much as tens of products, which only a long
    sequence repays."""
    def ways():  # the operands of both ways, made only where the choice is timed
        x = w.new_zeros(batch, w.shape[1])
        b = w.new_zeros(w.shape[0]) if bias is None else bias.contiguous()

        def mkl():
            w_t = w.t().contiguous()
            for _ in range(steps):
                torch.addmm(b, x, w_t)

        def onednn():
            packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), batch)
            for _ in range(steps):
                torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], "")
        return mkl, onednn
    sizes = (batch, w.shape[1], w.shape[0], steps)
    return cpu_products.library("a sequence's steps, the weight prepared once", sizes, ways) == "onednn"


# Multiply-adds of a per-step product at or below which it runs on MKL's addmm, not oneDNN's packed call:
# each packed call has a fixed cost that only a large product repays, and below this size the fixed costs
# of both dominate (benchmarks/bench_matmul.py times the two on the products of the experiments).
SMALL_PRODUCT = 2**19


def _times_transposed(w: Tensor, batch: int, steps: int, bias: Optional[Tensor] = None,
                      dtype: Optional[torch.dtype] = None):
    """``(x, add=None, out=None) -> add + x @ w.T`` (``+ bias`` where given, without ``add``), for the
    ``steps`` per-step matmuls of one sequence. On a CPU in float32 the weight is packed once per sequence
    for oneDNN where the product is larger than ``SMALL_PRODUCT`` and the sequence's products, the packing
    included, are faster so (``_packed_steps_faster``); the others run on ``torch.addmm``. The results agree with
    ``torch.mm`` to float32 rounding (another summation order). For a group of runs, ``w``
    ``(R, G, H)`` and ``x`` ``(R, B, H)``: one batched product, each run with its own weight. With a
    product ``dtype`` (``product_dtype``), ``_times_in``. ``w`` may be a transposed view (the backward's
    ``d @ w_hh``): each way makes the one layout it needs from it, in one pass or none."""
    if dtype is not None and dtype != w.dtype:
        return _times_in(dtype, w, bias)
    if w.dim() == 3:
        w_t = w.transpose(1, 2).contiguous()

        def group_times(x, add=None, out=None):
            if add is not None:
                return torch.baddbmm(add, x, w_t, out=out)
            return torch.bmm(x, w_t) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, w_t)
        return group_times
    if (_packed_matmul_usable(w) and batch * w.shape[0] * w.shape[1] > SMALL_PRODUCT  # else MKL (below)
            and _packed_steps_faster(w, bias, batch, steps)):
        packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), batch)  # w may be a transposed view
        bias = None if bias is None else bias.contiguous()  # oneDNN reads it as dense

        def packed_times(x, add=None, out=None):
            y = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
            return y if add is None else torch.add(add, y, out=out)
        return packed_times
    w_t = w.t().contiguous()  # a contiguous right operand makes the per-step matmul faster on CPU

    def times(x, add=None, out=None):
        if add is not None:
            return torch.addmm(add, x, w_t, out=out)
        return torch.mm(x, w_t) if bias is None else torch.addmm(bias, x, w_t)
    return times


def _times_in(dtype: torch.dtype, w: Tensor, bias: Optional[Tensor] = None):
    """``_times_transposed`` with the products in ``dtype`` (autocast's), accumulated in float32 by the
    matmul: ``w`` is cast once, here, and each ``x`` at its call; the product comes back in ``dtype``, and
    ``bias`` and ``add`` (in the state's dtype) promote it where given."""
    w_t = w.transpose(-2, -1).to(dtype, memory_format=torch.contiguous_format)  # one pass: cast and layout
    mm = torch.bmm if w.dim() == 3 else torch.mm
    bias = None if bias is None else bias.unsqueeze(-2) if w.dim() == 3 else bias

    def low_precision_times(x, add=None, out=None):
        y = mm(x.to(dtype), w_t)
        if bias is not None:
            y = y + bias
        return y if add is None else torch.add(add, y, out=out)
    return low_precision_times


def _weight_grad(d_pre: Tensor, inputs: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """The gradient of a recurrent weight, the sum over every step and example of d_pre^T inputs: one
    run's ``(T, B, G)`` and ``(T, B, H)`` give ``(G, H)`` (``matmul``); a group's ``(T, R, B, G)`` and
    ``(T, R, B, H)`` give each run's own, ``(R, G, H)``. With a product ``dtype`` (autocast's, whose
    weights are float32), the product in it, and the gradient in float32."""
    if dtype is not None:  # the products' dtype is autocast's, for float32 weights
        return _weight_grad(d_pre.to(dtype), inputs.to(dtype)).float()
    if d_pre.dim() == 3:
        return matmul(d_pre.reshape(-1, d_pre.shape[-1]).t(), inputs.reshape(-1, inputs.shape[-1]))
    runs = d_pre.shape[1]
    a = d_pre.transpose(0, 1).reshape(runs, -1, d_pre.shape[-1])
    return torch.bmm(a.transpose(1, 2), inputs.transpose(0, 1).reshape(runs, -1, inputs.shape[-1]))


def _bias_grad(d_pre: Tensor) -> Tensor:
    """The gradient of a recurrent bias: ``d_pre`` summed over steps and examples, per run in a group."""
    return d_pre.sum((0, 1)) if d_pre.dim() == 3 else d_pre.sum((0, 2))


def _steps(factor, steps: int, per_step: bool) -> list:
    """The factor of every processing step: a per-step mask's slices, else the factor repeated (with
    ``per_step``, a (T, ...) buffer's per-step views, or Nones where there is none)."""
    if per_step and isinstance(factor, Tensor):
        return list(factor.unbind(0))
    return [factor] * steps


def _order(steps: int, reverse: bool) -> range:
    """The time steps in processing order: last to first for a reverse direction."""
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _activation_grad(y: Tensor, relu: bool) -> Tensor:
    """The derivative of the activation at its output ``y``: relu's step, or tanh's 1 - y^2."""
    return (y > 0).to(y.dtype) if relu else 1 - y * y


def _differentiable_backward_needed(*grads: Optional[Tensor]) -> bool:
    """Grad mode is on inside a backward only under create_graph=True (higher-order gradients); a
    vmap over the backward (batched gradients, jacobians) brings batched gradients, on which the
    backward loop's ``out=`` buffers do not work either."""
    if torch.is_grad_enabled() or torch._C._are_functorch_transforms_active():
        return True
    wrapped = (torch._C._functorch.is_legacy_batchedtensor, torch._C._functorch.is_functorch_wrapped_tensor)
    return any(g is not None and any(w(g) for w in wrapped) for g in grads)


def _replay_backward(ctx, step, inputs: tuple, n_states: int, grads: tuple) -> tuple:
    """The gradients of one sequence Function, differentiable: the forward is run again from its saved
    ``inputs`` (gx, the initial states, w_hh[, b_hh]) through ``step`` (a ``recdrop.cells`` step)
    under autograd, and ``torch.autograd.grad(..., create_graph=True)`` gives the input gradients
    of ``grads`` (the gradients of its outputs: ys and the final states)."""
    gal, sem, moon = ctx.factors
    per_step, relu, reverse = ctx.flags[:3]  # every Function's flags begin so
    act = ACTIVATIONS["relu" if relu else "tanh"]
    gx, states, weights = inputs[0], inputs[1:1 + n_states], inputs[1 + n_states:]
    steps = gx.shape[0]
    order = _order(steps, reverse)
    with torch.enable_grad():
        outs, cs = [None] * steps, [None] * steps
        for k, t in enumerate(order):
            states = step(gx[t], states, *weights, _at(gal, k, per_step), _at(sem, k, per_step),
                          _at(moon, k, per_step), act)
            outs[t], cs[t] = states[0], states[-1]
        outputs = (torch.stack(outs), *states, *((torch.stack(cs),) if len(grads) > 1 + n_states else ()))
    wanted = [i for i, need in enumerate(ctx.needs_input_grad[:len(inputs)]) if need]
    pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
    found = torch.autograd.grad([o for o, _ in pairs], [inputs[i] for i in wanted], [g for _, g in pairs],
                                create_graph=True, allow_unused=True)
    out = [None] * len(ctx.needs_input_grad)
    for i, g in zip(wanted, found):
        out[i] = g
    return tuple(out)


def _lstm_replay_step(gx, states, w_hh, gal, sem, moon, act):
    return lstm_step(gx, *states, w_hh, None, gal, sem, moon, act)


def _gru_replay_step(gx, states, w_hh, b_hh, gal, sem, moon, act):
    return (gru_step(gx, *states, w_hh, b_hh, gal, sem, moon, act),)


def _rnn_replay_step(gx, states, w_hh, drop_in, _unused, moon, act):
    return (rnn_step(gx, *states, w_hh, None, drop_in, None, moon, act),)


class _LSTMSequence(torch.autograd.Function):
    """Eqs. 4-9 over all steps; equals ``cells.lstm_step``, step by step.

    Everything is stored in processing order k (a reverse direction flips its input once), written
    in place into preallocated buffers (about 8 kernels a step forward, 5 backward), and the local
    derivatives that do not depend on the recurrence are computed for all steps at once before the
    backward loop."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, gal, sem, moon, per_step: bool,
                relu: bool, reverse: bool, cells: bool = False, kernels: Optional[ModuleType] = None,
                dtype: Optional[torch.dtype] = None):
        with _autocast_off(gx.device.type):
            saved = run_loop(_lstm_forward, (gx, h0, c0, w_hh, gal, sem, moon),
                             (per_step, relu, reverse, kernels, dtype), step_work(h0, w_hh))
        gates_all, c_all, tc_all, ys, hin_all, gsem_all = saved  # in processing order
        ctx.save_for_backward(w_hh, h0, *saved, gx, c0)  # gx and c0 for a higher-order backward (its replay)
        ctx.factors = (gal, sem, moon)
        # what the backward needs besides tensors; per_step, relu and reverse first in every Function's flags
        # (``_replay_backward``)
        ctx.flags = (per_step, relu, reverse, kernels, cells)
        ctx.dtype = dtype
        cs = c_all[1:].clone() if cells else gx.new_empty(0)  # with ``cells``: c_t of every step, as the ys
        h, c = ys[-1].clone(), c_all[-1].clone()
        return (ys.flip(0) if reverse else ys), h, c, (cs.flip(0) if reverse and cells else cs)

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn: Optional[Tensor], d_cn: Optional[Tensor], d_cs: Optional[Tensor]):
        w_hh, h0, gates_all, c_all, tc_all, ys, hin_all, gsem_all, gx, c0 = ctx.saved_tensors
        per_step, relu, reverse, kernels, cells = ctx.flags
        d_cs = d_cs if cells else None
        if _differentiable_backward_needed(d_ys, d_hn, d_cn, d_cs):
            return _replay_backward(ctx, _lstm_replay_step, (gx, h0, c0, w_hh), 2, (d_ys, d_hn, d_cn, d_cs))
        run_major = gx.dim() == 4 and not gx.is_contiguous() and gx.transpose(0, 1).is_contiguous()
        with _autocast_off(h0.device.type):
            grads = run_loop(_lstm_backward, (d_ys, d_hn, d_cn, d_cs, w_hh, h0, gates_all, c_all, tc_all, ys,
                                              hin_all, gsem_all, *ctx.factors),
                             (per_step, relu, reverse, kernels, ctx.dtype, run_major), step_work(h0, w_hh))
        return (*grads, None, None, None, None, None, None, None, None, None)


def _lstm_forward(gx, h0, c0, w_hh, gal, sem, moon, per_step, relu, reverse, kernels, dtype):
    """The LSTM's forward loop (``_LSTMSequence``): every buffer the backward reads, in processing order:
    the gates after their activations, c_0 .. c_T, act(c_t), h_t, d(h_{t-1}) (Gal; with a product
    ``dtype``, every step's product operand in it) and d(g_t) (Semeniuta), or None where no factor makes
    them differ from the others; with ``kernels`` each step's pointwise part in one ``lstm_forward_step``
    (Triton's), or with ``cpu_kernels`` the whole loop in its ``lstm_forward_sequence``."""
    if reverse:
        gx = gx.flip(0)
    steps, hidden = gx.shape[0], h0.shape[-1]
    # tanh(x) = 2 sigmoid(2x) - 1: with g's pre-activation doubled (exactly, a power of two), one
    # sigmoid over each step's whole gates row replaces three activations on strided slices of it.
    one_sigmoid = kernels is None and not relu
    gates_all = _gates_buffer(gx, h0.dtype, kernels is None, one_sigmoid)  # i, f, g, o after their activations
    minus_one = h0.new_full((), -1.0) if one_sigmoid else None
    c_all, tc_all, ys, hin_all, gsem_all = _lstm_state_buffers(h0, c0, steps, gal is not None,
                                                               sem is not None and kernels is None, dtype)
    buffers = gates_all, c_all, tc_all, ys, hin_all, gsem_all
    if kernels is cpu_kernels:  # the whole loop in C++
        kernels.lstm_forward_sequence(gx, h0, w_hh, gal, sem, moon, per_step, *buffers[:5], relu)
        return buffers
    times_w = _times_transposed(_g_rows_doubled(w_hh) if one_sigmoid else w_hh, h0.shape[-2], steps, dtype=dtype)
    if kernels is not None:
        return _lstm_forward_kernels(kernels, times_w, h0, gx, buffers, (gal, sem, moon), per_step, relu, dtype)
    # Per-step views made once (unbind), not indexed inside the loop: on small layers the
    # loop's Python and dispatch overhead is a good part of the time.
    gals, sems, moons = (_steps(f, steps, per_step) for f in (gal, sem, moon))
    gates_k, c_k, tc_k, ys_k, hin_k, gsem_k = _step_views(buffers, steps)
    h = h0
    if_k, g_k, o_k = (gates_all[..., a * hidden:b * hidden].unbind(0) for a, b in ((0, 2), (2, 3), (3, 4)))
    i_k, f_k = (gates_all[..., a * hidden:(a + 1) * hidden].unbind(0) for a in (0, 1))
    for k in range(steps):
        if gal is not None:
            h = torch.mul(h, gals[k], out=hin_k[k])  # Eq. 7
        elif dtype is not None:
            h = hin_k[k].copy_(h)
        times_w(h, add=gates_k[k], out=gates_k[k])  # gx + h W_hh^T, in place
        if one_sigmoid:
            torch.sigmoid_(gates_k[k])
            g = torch.add(minus_one, g_k[k], alpha=2.0, out=g_k[k])  # 2 sigmoid(2x) - 1
        else:  # g = relu(x)
            torch.sigmoid_(if_k[k])
            g = torch.relu_(g_k[k])
            torch.sigmoid_(o_k[k])
        if sem is not None:
            g = torch.mul(g, sems[k], out=gsem_k[k])  # Eq. 9
        c = torch.mul(f_k[k], c_k[k], out=c_k[k + 1])
        c.addcmul_(i_k[k], g)
        if moon is not None:
            c.mul_(moons[k])  # Eq. 8
        tc = torch.clamp_min(c, 0.0, out=tc_k[k]) if relu else torch.tanh(c, out=tc_k[k])
        h = torch.mul(o_k[k], tc, out=ys_k[k])
    return buffers


def _step_views(buffers, steps: int) -> list:
    """Each of an LSTM forward's ``buffers`` as its steps' views (c_0 .. c_T for ``c_all``), or Nones where a
    buffer is not kept."""
    return [_steps(t, steps, True) for t in buffers]


def _lstm_forward_kernels(kernels, times_w, h0, gx, buffers, factors, per_step, relu, dtype):
    """``_lstm_forward``'s loop with each step's pointwise part, the sum with gx included, in one
    ``lstm_forward_step`` of ``kernels`` (Triton's), h_t written in the products' ``dtype`` too."""
    steps, gal = gx.shape[0], factors[0]
    gals, sems, moons = (_steps(f, steps, per_step) for f in factors)
    gates_k, c_k, tc_k, ys_k, hin_k, gsem_k = _step_views(buffers, steps)
    gx_k = gx.unbind(0)
    h = h0
    for k in range(steps):
        if gal is not None:
            h = torch.mul(h, gals[k], out=hin_k[k])  # Eq. 7
        elif dtype is not None:  # h_0 cast here; each later h the kernel wrote in it
            h = hin_k[k].copy_(h) if k == 0 else hin_k[k]
        low = hin_k[k + 1] if dtype is not None and gal is None and k + 1 < steps else None
        kernels.lstm_forward_step(times_w(h), c_k[k], sems[k], moons[k], gsem_k[k], c_k[k + 1], tc_k[k], ys_k[k],
                                  relu, addend=gx_k[k], gates_out=gates_k[k], h_low_out=low)
        h = ys_k[k]
    return buffers


def _lstm_state_buffers(h0: Tensor, c0: Tensor, steps: int, gal: bool, sem: bool, dtype: Optional[torch.dtype]):
    """The LSTM forward's buffers besides its gates: c_0 .. c_T (c_0 in place), act(c_t), h_t, then
    d(h_{t-1}) entering the gates (with a product ``dtype``, in it, for the weight's gradient too; else
    only with ``gal``) and d(g_t) (with ``sem``), None where not kept."""
    c_all = h0.new_empty(steps + 1, *h0.shape)
    c_all[0] = c0
    tc_all, ys = h0.new_empty(steps, *h0.shape), h0.new_empty(steps, *h0.shape)
    if dtype is not None:
        hin_all = h0.new_empty(steps, *h0.shape, dtype=dtype)
    else:
        hin_all = torch.empty_like(ys) if gal else None
    return c_all, tc_all, ys, hin_all, h0.new_empty(steps, *h0.shape) if sem else None


def _g_rows_doubled(w_hh: Tensor) -> Tensor:
    """``w_hh`` (``(4H, H)``, or a group's ``(R, 4H, H)``) with the rows of g times two, a new tensor."""
    scale = w_hh.new_ones(4, 1, 1)
    scale[2] = 2.0
    return (w_hh.unflatten(-2, (4, -1)) * scale).flatten(-3, -2)


def _gates_buffer(gx: Tensor, dtype: torch.dtype, add_gx: bool, double_g: bool) -> Tensor:
    """The buffer of a sequence's gates, like ``gx``: with ``add_gx``, gx in it, each step's product
    then added in place; with ``double_g``, g's columns of it times two (``_lstm_forward``'s one sigmoid)."""
    gates_all = gx.new_empty(gx.shape, dtype=dtype)
    if add_gx:
        gates_all.copy_(gx)
    if double_g:
        hidden = gx.shape[-1] // 4
        gates_all[..., 2 * hidden:3 * hidden].mul_(2.0)
    return gates_all


def _lstm_backward(d_ys, d_hn, d_cn, d_cs, w_hh, h0, gates_all, c_all, tc_all, ys, hin_all, gsem_all, gal, sem, moon,
                   per_step, relu, reverse, kernels, dtype, run_major=False):
    """The LSTM's backward (``_LSTMSequence``) from the gradients of its outputs and ``_lstm_forward``'s
    buffers: the gradients of gx, h_0, c_0 and w_hh; with ``kernels`` each step's pointwise part in one call of
    its ``lstm_backward_step`` (``_lstm_backward_kernels``, Triton's), or with ``cpu_kernels`` the whole loop in
    its ``lstm_backward_sequence``. With a product ``dtype``, the gates' gradients are
    kept in it, the operand of every product after the loop as of the recurrent one in it. With
    ``run_major`` (a group's gx in its runs' order, ``group_linear``) the gates' gradients are kept so
    too: the products after the loop then read them without a copy."""
    if reverse:
        d_ys = d_ys.flip(0)
        d_cs = None if d_cs is None else d_cs.flip(0)
    if run_major:
        d_gates = gates_all.new_empty(gates_all.transpose(0, 1).shape, dtype=dtype).transpose(0, 1)
    else:
        d_gates = torch.empty_like(gates_all, dtype=dtype)
    dh = torch.zeros_like(h0) if d_hn is None else d_hn
    dc = torch.zeros_like(h0) if d_cn is None else d_cn
    hin = hin_all if hin_all is not None else torch.cat([h0.unsqueeze(0), ys[:-1]])
    times_w = None if kernels is cpu_kernels else \
        _times_transposed(w_hh.transpose(-2, -1), h0.shape[-2], d_ys.shape[0], dtype=dtype)  # d_gates @ w_hh
    if kernels is cpu_kernels:  # the whole loop in C++
        dh, dc = kernels.lstm_backward_sequence(d_ys, dh, dc, d_cs, w_hh, gal, sem, moon, per_step, gates_all, c_all,
                                                tc_all, d_gates, relu)
    elif kernels is not None:  # the kernel computes each step's local derivatives
        dh, dc = _lstm_backward_kernels(kernels, dh, dc, d_ys, gates_all, c_all, tc_all, d_gates, times_w, gal, sem,
                                        moon, per_step, relu, d_cs)
    else:
        o_dtc, local = _lstm_local_derivatives(gates_all, c_all, tc_all, gsem_all, sem, relu)
        dh, dc = _lstm_backward_torch(dh, dc, d_ys, o_dtc, local, gates_all, d_gates, times_w, gal, moon, per_step,
                                      d_cs)
    return (d_gates.flip(0) if reverse else d_gates), dh.to(h0.dtype), dc, _weight_grad(d_gates, hin, dtype)


def _lstm_local_derivatives(gates_all, c_all, tc_all, gsem_all, sem, relu):
    """The LSTM's local derivatives for all steps at once: ``o act'(c_t)`` (d h_t / d c_t) and, per gate, the
    factor with which d c_t (d h_t for the output gate) gives its pre-activation's gradient, Eqs. 4-9 with
    Eq. 18's d(g): ``gsem_all`` holds d(g) of each step where dropout acts (else g itself is read), and
    ``sem`` is its mask, on g's own derivative."""
    i, f, g, o = gates_all.chunk(4, dim=-1)  # after their activations
    local = torch.addcmul(gates_all, gates_all, gates_all, value=-1.0)  # s (1 - s) for the sigmoid gates
    l_i, l_f, l_g, l_o = local.chunk(4, dim=-1)
    l_i.mul_(g if gsem_all is None else gsem_all)
    l_f.mul_(c_all[:-1])
    l_o.mul_(tc_all)
    if relu:
        torch.mul(i, (g > 0).to(g.dtype), out=l_g)
        o_dtc = o * (tc_all > 0).to(tc_all.dtype)
    else:  # i (1 - g^2) and o (1 - act(c)^2), each in two passes
        torch.addcmul(i, i * g, g, value=-1.0, out=l_g)
        o_dtc = torch.addcmul(o, o * tc_all, tc_all, value=-1.0)
    if sem is not None:
        l_g.mul_(sem)
    return o_dtc, local


def _lstm_backward_torch(dh, dc, d_ys, o_dtc, local, gates_all, d_gates, times_w, gal, moon, per_step, d_cs=None):
    """The backward loop over the steps, 5 kernels a step, 6 with Gal's factor (the gradient of
    ``cells.lstm_step``, step by step; ``d_cs``, where given, the gradient of every step's c_t;
    ``times_w``, d_gates @ w_hh); fills ``d_gates``, returns (dh_0, dc_0)."""
    steps, hidden = gates_all.shape[0], gates_all.shape[-1] // 4
    gals, moons = _steps(gal, steps, per_step), _steps(moon, steps, per_step)
    f_k = gates_all[..., hidden:2 * hidden].unbind(0)
    by_gate = (*gates_all.shape[:-1], 4, hidden)  # (T, [R,] B, 4, H)
    local_ifg_k = local.view(by_gate)[..., :3, :].unbind(0)
    d_ifg_k = d_gates.view(by_gate)[..., :3, :].unbind(0)
    local_o_k, d_o_k = local[..., 3 * hidden:].unbind(0), d_gates[..., 3 * hidden:].unbind(0)
    d_ys_k, o_dtc_k, d_gates_k = d_ys.unbind(0), o_dtc.unbind(0), d_gates.unbind(0)
    d_cs_k = None if d_cs is None else d_cs.unbind(0)
    if steps:
        dh = dh + d_ys_k[-1]  # each earlier step's is added by the product that reaches it
    for k in range(steps - 1, -1, -1):
        if d_cs_k is not None:
            dc = dc + d_cs_k[k]
        dc = torch.addcmul(dc, dh, o_dtc_k[k])  # through h_t = o * act(c_t)
        if moon is not None:
            dc = dc * moons[k]  # c_t = d(f * c_{t-1} + i * d(g_t))
        torch.mul(dc.unsqueeze(-2), local_ifg_k[k], out=d_ifg_k[k])
        torch.mul(dh, local_o_k[k], out=d_o_k[k])
        dc = dc * f_k[k]
        if k == 0:  # dh_0, out of the layer
            dh = times_w(d_gates_k[k]) if gal is None else times_w(d_gates_k[k]) * gals[k]
        elif gal is None:  # with the gradient of the output h_{k-1}, in the product's own sum
            dh = times_w(d_gates_k[k], add=d_ys_k[k - 1])
        elif isinstance(gals[k], Tensor):
            dh = torch.addcmul(d_ys_k[k - 1], times_w(d_gates_k[k]), gals[k])
        else:  # a constant factor (the test phase's 1 - p)
            dh = torch.add(d_ys_k[k - 1], times_w(d_gates_k[k]), alpha=gals[k])
    return dh, dc


def _lstm_backward_kernels(kernels, dh, dc, d_ys, gates_all, c_all, tc_all, d_gates, times_w, gal, sem, moon, per_step,
                           relu, d_cs=None):
    """The same loop with each step's pointwise part, its local derivatives included, in one kernel of
    ``kernels`` (``triton_kernels``); ``d_cs``, where given, the gradient of every step's c_t, added to the
    carried dc before its step."""
    # The kernels read flat memory: every tensor they touch must be contiguous (a gradient of
    # h_n.sum(), or of a permuted h_n, is not).
    d_ys, dh = d_ys.contiguous(), dh.contiguous()
    dc = dc.clone(memory_format=torch.contiguous_format)  # updated in place by the kernel
    gal_next = None  # the final state's gradient enters without a Gal factor
    d_ys_k, gates_k, c_k, tc_k, d_gates_k = (t.unbind(0) for t in (d_ys, gates_all, c_all, tc_all, d_gates))
    d_cs_k = _steps(d_cs, d_ys.shape[0], True)
    for k in range(d_ys.shape[0] - 1, -1, -1):
        if d_cs_k[k] is not None:
            dc.add_(d_cs_k[k])
        kernels.lstm_backward_step(dh, gal_next, d_ys_k[k], dc, gates_k[k], c_k[k], tc_k[k], _at(sem, k, per_step),
                                   _at(moon, k, per_step), d_gates_k[k], dc, relu)
        dh = times_w(d_gates_k[k])
        gal_next = _at(gal, k, per_step)
    return scaled(dh, gal_next), dc


# The kernels of a step's pointwise part (on a CPU the LSTM's whole loop), by the name a layer's route gives them
# (``route.Route``).
STEP_KERNELS = {"triton": triton_kernels, "cpp": cpu_kernels}


def lstm_sequence(gx: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, factors: StepFactors,
                  nonlinearity: str, reverse: bool, cells: bool = False, kernels: Optional[str] = None):
    """The LSTM over all steps of ``gx = W_ih x + b_ih + b_hh`` ``(T, B, 4H)``: outputs ``(T, B, H)`` and (h_T, c_T),
    and with ``cells`` the cell state c_t of every step ``(T, B, H)`` too; with ``kernels`` ("triton" or "cpp",
    the layer's ``route``) each step's pointwise part in one kernel of ``STEP_KERNELS`` ("cpp": the whole loop
    in C++); under autocast its products in autocast's dtype (``product_dtype``).

    Computes what the reference loop over ``recdrop.cells.lstm_step`` computes."""
    ys, h, c, cs = _LSTMSequence.apply(gx, h0, c0, w_hh, factors.gal, factors.semeniuta, factors.moon,
                                       factors.per_step, nonlinearity == "relu", reverse, cells,
                                       STEP_KERNELS[kernels] if kernels else None, product_dtype(h0))
    return (ys, (h, c), cs) if cells else (ys, (h, c))


class _GRUSequence(torch.autograd.Function):
    """GRU in torch.nn's form (r, z, n; reset gate after the recurrent matmul), Eqs. 10-13 and Gal/Moon;
    equals ``cells.gru_step``, step by step."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], gal, sem, moon, per_step: bool,
                relu: bool, reverse: bool, kernels: Optional[ModuleType] = None, dtype: Optional[torch.dtype] = None):
        ctx.flags = (per_step, relu, reverse, kernels, dtype)
        with _autocast_off(gx.device.type):
            saved = run_loop(_gru_forward, (gx, h0, w_hh, b_hh, gal, sem, moon), ctx.flags, step_work(h0, w_hh))
        ys, buffers = saved[0], saved[1:]
        ctx.save_for_backward(w_hh, *buffers, gx, h0, b_hh)
        ctx.factors = (gal, sem, moon)
        return ys, ys[0 if reverse else -1].clone()

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn_out: Optional[Tensor]):
        w_hh, rzn_all, hn_all, hin_all, h_prev_all, gx, h0, b_hh = ctx.saved_tensors
        if _differentiable_backward_needed(d_ys, d_hn_out):
            return _replay_backward(ctx, _gru_replay_step, (gx, h0, w_hh, b_hh), 1, (d_ys, d_hn_out))
        with _autocast_off(h0.device.type):
            grads = run_loop(_gru_backward, (d_ys, d_hn_out, h0, rzn_all, hn_all, hin_all, h_prev_all, w_hh, b_hh,
                                             *ctx.factors), ctx.flags, step_work(h0, w_hh))
        return (*grads, None, None, None, None, None, None, None, None)


def _gru_forward(gx, h0, w_hh, b_hh, gal, sem, moon, per_step, relu, reverse, kernels, dtype):
    """The GRU's forward loop (``_GRUSequence``): h_t of every step, and the buffers the backward reads
    (r, z, n after their activations, n before d(.); W_hn d(h_{t-1}) + b_hn; d(h_{t-1}); h_{t-1}), in time order.
    With a product ``dtype``, the recurrent products in it, everything else in the state's dtype; with
    ``kernels`` each step's pointwise part in one ``gru_forward_step``."""
    gx = gx.to(h0.dtype)
    steps, hidden = gx.shape[0], h0.shape[-1]
    act = ACTIVATIONS["relu" if relu else "tanh"]
    order = _order(steps, reverse)
    ys = gx.new_empty(steps, *h0.shape)
    rzn_all = gx.new_empty(gx.shape)  # r, z, n after their activations (n before d(.))
    hn_all = gx.new_empty(steps, *h0.shape)  # W_hn d(h_{t-1}) + b_hn
    hin_all = gx.new_empty(steps, *h0.shape)
    h_prev_all = gx.new_empty(steps, *h0.shape)
    times_w = _times_transposed(w_hh, h0.shape[-2], steps, b_hh, dtype)  # hin @ w_hh.T + b_hh
    h = h0
    for k, t in enumerate(order):
        hin = scaled(h, _at(gal, k, per_step))
        gh = times_w(hin).to(h0.dtype)  # with a product dtype, back in the state's
        h_prev_all[t] = h
        hin_all[t] = hin
        if kernels is not None:  # the rest of the step in one kernel
            kernels.gru_forward_step(gx[t].contiguous(), gh, h_prev_all[t], _at(sem, k, per_step),
                                     _at(moon, k, per_step), rzn_all[t], hn_all[t], ys[t], relu)
            h = ys[t]
            continue
        rz = torch.sigmoid(gx[t, ..., :2 * hidden] + gh[..., :2 * hidden])
        r, z = rz[..., :hidden], rz[..., hidden:]
        hn = gh[..., 2 * hidden:]
        n = act(torch.addcmul(gx[t, ..., 2 * hidden:], r, hn))
        h = scaled(torch.lerp(scaled(n, _at(sem, k, per_step)), h, z), _at(moon, k, per_step))  # (1-z) n + z h
        ys[t], hn_all[t] = h, hn
        rzn_all[t, ..., :2 * hidden], rzn_all[t, ..., 2 * hidden:] = rz, n
    return ys, rzn_all, hn_all, hin_all, h_prev_all


def _gru_backward(d_ys, d_hn_out, h0, rzn_all, hn_all, hin_all, h_prev_all, w_hh, b_hh, gal, sem, moon, per_step, relu,
                  reverse, kernels, dtype):
    """The GRU's backward (``_GRUSequence``) from the gradients of its outputs and ``_gru_forward``'s buffers:
    the gradients of gx, h_0, w_hh and b_hh; with ``kernels`` each step's pointwise part in one call
    (``_gru_backward_kernels``)."""
    steps = rzn_all.shape[0]
    order = _order(steps, reverse)
    d_gx_all = torch.empty_like(rzn_all)
    d_gh_all = torch.empty_like(rzn_all)
    dh = torch.zeros_like(h0) if d_hn_out is None else d_hn_out.clone()
    times_w = _times_transposed(w_hh.transpose(-2, -1), dh.shape[-2], steps, dtype=dtype)  # d_gh @ w_hh
    loop = _gru_backward_torch if kernels is None else functools.partial(_gru_backward_kernels, kernels)
    dh = loop(dh, d_ys, order, rzn_all, hn_all, h_prev_all, d_gx_all, d_gh_all, times_w, gal, sem, moon, per_step,
              relu)
    d_b_hh = None if b_hh is None else _bias_grad(d_gh_all)
    return d_gx_all, dh, _weight_grad(d_gh_all, hin_all, dtype), d_b_hh


def _gru_backward_torch(dh, d_ys, order, rzn_all, hn_all, h_prev_all, d_gx_all, d_gh_all, times_w, gal, sem, moon,
                        per_step, relu):
    """The GRU's backward loop over the steps (the gradient of ``cells.gru_step``, step by step;
    ``times_w``, d_gh @ w_hh); fills ``d_gx_all`` and ``d_gh_all``, returns dh_0."""
    hidden = dh.shape[-1]
    for k, t in reversed(list(enumerate(order))):
        rzn = rzn_all[t]
        r, z, n = rzn[..., :hidden], rzn[..., hidden:2 * hidden], rzn[..., 2 * hidden:]
        sem_t = _at(sem, k, per_step)
        dh = scaled(dh + d_ys[t], _at(moon, k, per_step))
        d_pre_n = scaled(dh * (1 - z), sem_t) * _activation_grad(n, relu)
        d_pre_z = dh * (h_prev_all[t] - scaled(n, sem_t)) * z * (1 - z)
        d_pre_r = d_pre_n * hn_all[t] * r * (1 - r)
        d_gx, d_gh = d_gx_all[t], d_gh_all[t]
        d_gx[..., :hidden], d_gx[..., hidden:2 * hidden], d_gx[..., 2 * hidden:] = d_pre_r, d_pre_z, d_pre_n
        d_gh[..., :2 * hidden] = d_gx[..., :2 * hidden]
        d_gh[..., 2 * hidden:] = d_pre_n * r
        dh = dh * z + scaled(times_w(d_gh), _at(gal, k, per_step))
    return dh


def _gru_backward_kernels(kernels, dh, d_ys, order, rzn_all, hn_all, h_prev_all, d_gx_all, d_gh_all, times_w, gal,
                          sem, moon, per_step, relu):
    """The same loop with each step's pointwise part in one kernel of ``kernels`` (``triton_kernels`` or
    ``cpu_kernels``)."""
    d_ys = d_ys.contiguous()  # the kernels read flat memory
    dz, mm, gal_next = dh.clone(memory_format=torch.contiguous_format), torch.zeros_like(dh), None
    for k, t in reversed(list(enumerate(order))):
        kernels.gru_backward_step(dz, mm, gal_next, d_ys[t], _at(moon, k, per_step), _at(sem, k, per_step),
                                  rzn_all[t], hn_all[t], h_prev_all[t], d_gx_all[t], d_gh_all[t], dz, relu)
        mm, gal_next = times_w(d_gh_all[t]), _at(gal, k, per_step)
    return dz + scaled(mm, gal_next)


class _RNNSequence(torch.autograd.Function):
    """Vanilla RNN, Eq. 1 with Eq. 2 (d(h_{t-1}) where it re-enters) and Moon's d(h_t); equals
    ``cells.rnn_step``, step by step."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, w_hh: Tensor, drop_in, moon, per_step: bool, relu: bool,
                reverse: bool, dtype: Optional[torch.dtype] = None):
        ctx.flags = (per_step, relu, reverse, dtype)
        with _autocast_off(gx.device.type):
            ys, a_all, hin_all = run_loop(_rnn_forward, (gx, h0, w_hh, drop_in, moon), ctx.flags, step_work(h0, w_hh))
        ctx.save_for_backward(w_hh, a_all, hin_all, gx, h0)
        ctx.factors = (drop_in, None, moon)
        return ys, ys[0 if reverse else -1].clone()

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn_out: Optional[Tensor]):
        w_hh, a_all, hin_all, gx, h0 = ctx.saved_tensors
        if _differentiable_backward_needed(d_ys, d_hn_out):
            return _replay_backward(ctx, _rnn_replay_step, (gx, h0, w_hh), 1, (d_ys, d_hn_out))
        drop_in, _, moon = ctx.factors
        with _autocast_off(h0.device.type):
            grads = run_loop(_rnn_backward, (d_ys, d_hn_out, h0, a_all, hin_all, w_hh, drop_in, moon), ctx.flags,
                             step_work(h0, w_hh))
        return (*grads, None, None, None, None, None, None)


def _rnn_forward(gx, h0, w_hh, drop_in, moon, per_step, relu, reverse, dtype):
    """The vanilla RNN's forward loop (``_RNNSequence``): h_t of every step, act(pre-activation) before
    Moon's d(.), and d(h_{t-1}), in time order; with a product ``dtype``, the recurrent products in it."""
    gx = gx.to(h0.dtype)
    steps = gx.shape[0]
    act = ACTIVATIONS["relu" if relu else "tanh"]
    order = _order(steps, reverse)
    ys = gx.new_empty(steps, *h0.shape)
    a_all = gx.new_empty(steps, *h0.shape)  # act(pre-activation), before Moon's d(.)
    hin_all = gx.new_empty(steps, *h0.shape)
    times_w = _times_transposed(w_hh, h0.shape[-2], steps, dtype=dtype)  # hin @ w_hh.T
    h = h0
    for k, t in enumerate(order):
        hin = scaled(h, _at(drop_in, k, per_step))
        a = act(times_w(hin, add=gx[t]))
        h = scaled(a, _at(moon, k, per_step))
        ys[t], a_all[t], hin_all[t] = h, a, hin
    return ys, a_all, hin_all


def _rnn_backward(d_ys, d_hn_out, h0, a_all, hin_all, w_hh, drop_in, moon, per_step, relu, reverse, dtype):
    """The vanilla RNN's backward (``_RNNSequence``): the gradients of gx, h_0 and w_hh."""
    steps = a_all.shape[0]
    order = _order(steps, reverse)
    d_pre_all = torch.empty_like(a_all)
    dh = torch.zeros_like(h0) if d_hn_out is None else d_hn_out.clone()
    times_w = _times_transposed(w_hh.transpose(-2, -1), dh.shape[-2], steps, dtype=dtype)  # d_pre @ w_hh
    for k, t in reversed(list(enumerate(order))):
        a = a_all[t]
        d_pre = scaled(dh + d_ys[t], _at(moon, k, per_step)) * _activation_grad(a, relu)
        d_pre_all[t] = d_pre
        dh = scaled(times_w(d_pre), _at(drop_in, k, per_step)).to(h0.dtype)
    return d_pre_all, dh, _weight_grad(d_pre_all, hin_all, dtype)


def gru_sequence(gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], factors: StepFactors,
                 nonlinearity: str, reverse: bool, kernels: Optional[str] = None) -> Tuple[Tensor, Tuple[Tensor]]:
    """The GRU over all steps of ``gx = W_ih x + b_ih`` ``(T, B, 3H)``, as the loop over ``gru_step``; with
    ``kernels`` ("triton" or "cpp", the layer's ``route``) each step's pointwise part in one kernel of
    ``STEP_KERNELS``."""
    ys, h = _GRUSequence.apply(gx, h0, w_hh, b_hh, factors.gal, factors.semeniuta, factors.moon,
                               factors.per_step, nonlinearity == "relu", reverse,
                               STEP_KERNELS[kernels] if kernels else None, product_dtype(h0))
    return ys, (h,)


def rnn_sequence(gx: Tensor, h0: Tensor, w_hh: Tensor, factors: StepFactors,
                 nonlinearity: str, reverse: bool) -> Tuple[Tensor, Tuple[Tensor]]:
    """The vanilla RNN over all steps of ``gx = W_ih x + b_ih + b_hh``, as the loop over ``rnn_step``."""
    drop_in = rnn_recurrent_factor(factors.gal, factors.semeniuta)
    ys, h = _RNNSequence.apply(gx, h0, w_hh, drop_in, factors.moon, factors.per_step, nonlinearity == "relu",
                               reverse, product_dtype(h0))
    return ys, (h,)
