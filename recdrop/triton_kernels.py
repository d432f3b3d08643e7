"""Triton kernels for the fused LSTM's and GRU's pointwise work: one kernel per step forward, one backward.

On a GPU the fused sequence of :mod:`recdrop.fused` spends most of a small layer's time launching
the ~9 pointwise kernels of a step (Eqs. 4-9 with d(.) of Eq. 3/18). Here each step's pointwise
work is one kernel: the gate activations, Semeniuta's d(g_t) (Eq. 9), c_t with Moon's d(.)
(Eq. 8), act(c_t) and h_t forward; and backward the recurrence-dependent part of the gradient,
with Gal's d(.) (Eq. 7) on the incoming dh. The GRU's kernels do the same for its gates
(torch.nn's form, Eq. 13 with Gal and Moon). The matmuls stay with cuBLAS. A group's Adam update
(``updates.Adam``) is one kernel a stacked parameter, each run at its own rate.

Used for float32/float64 states on CUDA when Triton is installed, for one run or a group's runs stacked
on a leading dimension (the kernels index the flat memory of ``([R,] B, H)``); ``RECDROP_TRITON=0``
turns it off. Under autocast the products and the gates' gradients may come in bfloat16 or float16: the
kernels read every operand in the state's dtype and compute there. With ``TRITON_INTERPRET=1`` set
before import, Triton runs the same kernels on CPU tensors, which is how the tests check them against
the PyTorch path.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import route

try:
    import triton
    import triton.language as tl
except ImportError:  # the PyTorch path is used
    triton = None

BLOCK = 256
NONE, SCALAR, TENSOR = 0, 1, 2  # how a factor of d(.) is given to a kernel


def _interpreting() -> bool:
    return triton is not None and bool(triton.knobs.runtime.interpret)


def usable(x: Tensor) -> bool:
    """Whether the kernels run for ``x``: Triton present, not switched off, float32/64, on CUDA
    (or on CPU under ``TRITON_INTERPRET=1``)."""
    if triton is None or not route.switched_on("RECDROP_TRITON"):
        return False
    if x.dtype not in (torch.float32, torch.float64):
        return False
    return x.is_cuda or (_interpreting() and x.device.type == "cpu")


def _check_contiguous(**tensors: Tensor) -> None:
    """The kernels index flat memory: a strided tensor would be read wrongly, so refuse it."""
    for name, t in tensors.items():
        if t is not None and not t.is_contiguous():
            raise ValueError(f"recdrop.triton_kernels: {name} must be contiguous (shape {tuple(t.shape)}, "
                             f"strides {t.stride()})")


def _runs(state: Tensor) -> int:
    """The runs of a state ``([R,] B, H)``: R, or 1 for one run's ``(B, H)``."""
    return state.shape[0] if state.dim() == 3 else 1


def _run_stride(t: Tensor, name: str) -> int:
    """How far apart the runs of ``t`` ``([R,] B, G)`` lie: each run's ``(B, G)`` must be contiguous, the
    runs may lie anywhere (a group's gx and gate gradients, kept run-major, give per step a view whose
    runs lie T steps apart)."""
    if t.stride(-1) != 1 or (t.shape[-2] > 1 and t.stride(-2) != t.shape[-1]):
        raise ValueError(f"recdrop.triton_kernels: each run's rows of {name} must be contiguous (shape "
                         f"{tuple(t.shape)}, strides {t.stride()})")
    return t.stride(0) if t.dim() == 3 else t.numel()


def _factor(f, like: Tensor):
    """(mode, tensor argument, scalar argument) for a factor that is None, a number or a tensor of
    ``like``'s shape, or one that broadcasts to it (a group's constants at test, ``(R, 1, 1)``)."""
    if f is None:
        return NONE, like, 1.0
    if isinstance(f, Tensor):
        return TENSOR, (f if f.shape == like.shape else f.expand_as(like)).contiguous(), 1.0
    if like.dtype == torch.float64:  # Triton passes a Python float as float32: keep float64's precision
        return TENSOR, torch.full_like(like, float(f)), 1.0
    return SCALAR, like, float(f)


if triton is not None:
    @triton.jit
    def _tanh(x):
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x >= 0, t, -t)

    @triton.jit
    def _apply(x, ptr, scalar, idx, m, MODE: tl.constexpr):
        if MODE == 1:
            x = x * scalar
        if MODE == 2:
            x = x * tl.load(ptr + idx, mask=m, other=0.0).to(x.dtype)
        return x

    @triton.jit
    def _read(ptr, offset, m, like):
        """A block of ``ptr`` in the dtype of the pointer ``like`` (the state's): a product or a
        gradient may come in autocast's dtype."""
        return tl.load(ptr + offset, mask=m, other=0.0).to(like.dtype.element_ty)

    @triton.jit
    def _pre(gates, addend, offset, add_offset, m, like, ADD: tl.constexpr):
        """A gate's pre-activation: the product (``gates``), plus gx where given apart (``ADD``)."""
        x = _read(gates, offset, m, like)
        if ADD:
            x = x + _read(addend, add_offset, m, like)
        return x

    @triton.jit
    def _gate_row(idx, per_run, run_stride, H):
        """Where the element ``idx`` of a state ``([R,] B, H)`` finds its input gate in a tensor
        ``([R,] B, 4H)`` whose runs lie ``run_stride`` apart (a group's gx and gate gradients are kept
        run-major for the products after the loop)."""
        within = idx % per_run
        return (idx // per_run) * run_stride + (within // H) * 4 * H + within % H

    @triton.jit
    def _lstm_fwd_kernel(gates, addend, gates_out, c_prev, sem, moon, gsem_out, c_out, tc_out, h_out, h_low,
                         sem_s, moon_s, n, H, per_run, add_run_stride, ADD: tl.constexpr, LOW: tl.constexpr,
                         GSEM: tl.constexpr, SEM: tl.constexpr, MOON: tl.constexpr, RELU: tl.constexpr,
                         BLOCK: tl.constexpr):
        """Equals ``cells.lstm_step`` after its recurrent matmul, step by step:
        c_t = d(f_t ⊙ c_{t-1} + i_t ⊙ d(g_t)) (Eqs. 8-9), h_t = o_t ⊙ f(c_t) (Eq. 6). With ``ADD`` the
        pre-activations are ``gates`` + ``addend`` (the product and gx); with ``LOW`` h_t is written to
        ``h_low`` too, in its dtype (the next product's operand); with ``GSEM`` d(g_t) to ``gsem_out``."""
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        row = (idx // H) * 4 * H + idx % H
        arow = _gate_row(idx, per_run, add_run_stride, H)
        i = tl.sigmoid(_pre(gates, addend, row, arow, m, c_prev, ADD))
        f = tl.sigmoid(_pre(gates, addend, row + H, arow + H, m, c_prev, ADD))
        g = _pre(gates, addend, row + 2 * H, arow + 2 * H, m, c_prev, ADD)
        if RELU:
            g = tl.maximum(g, 0.0)
        else:
            g = _tanh(g)
        o = tl.sigmoid(_pre(gates, addend, row + 3 * H, arow + 3 * H, m, c_prev, ADD))
        tl.store(gates_out + row, i, mask=m)
        tl.store(gates_out + row + H, f, mask=m)
        tl.store(gates_out + row + 2 * H, g, mask=m)
        tl.store(gates_out + row + 3 * H, o, mask=m)
        gs = _apply(g, sem, sem_s, idx, m, SEM)  # Eq. 9: d(g_t)
        if GSEM:
            tl.store(gsem_out + idx, gs, mask=m)
        c = f * tl.load(c_prev + idx, mask=m, other=0.0) + i * gs
        c = _apply(c, moon, moon_s, idx, m, MOON)  # Eq. 8: d(c_t)
        if RELU:
            tc = tl.maximum(c, 0.0)
        else:
            tc = _tanh(c)
        tl.store(c_out + idx, c, mask=m)
        tl.store(tc_out + idx, tc, mask=m)
        tl.store(h_out + idx, o * tc, mask=m)
        if LOW:
            tl.store(h_low + idx, o * tc, mask=m)

    @triton.jit
    def _lstm_bwd_kernel(dh_in, d_y, dc_in, gates, c_prev, tc, gal, moon, sem, d_gates, dc_out, gal_s, moon_s, sem_s,
                         n, H, per_run, d_run_stride, GAL: tl.constexpr, MOON: tl.constexpr, SEM: tl.constexpr,
                         RELU: tl.constexpr, BLOCK: tl.constexpr):
        """Equals one step of ``fused._lstm_backward_torch``, the gradient of ``cells.lstm_step``, with the
        step's local derivatives computed here from the forward's i, f, g, o, c_{t-1} and act(c_t) (the
        torch path computes them for all steps before its loop)."""
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        row = (idx // H) * 4 * H + idx % H
        i = tl.load(gates + row, mask=m, other=0.0)
        f = tl.load(gates + row + H, mask=m, other=0.0)
        g = tl.load(gates + row + 2 * H, mask=m, other=0.0)
        o = tl.load(gates + row + 3 * H, mask=m, other=0.0)
        a = tl.load(tc + idx, mask=m, other=0.0)
        if RELU:
            d_act_g = tl.where(g > 0, 1.0, 0.0)
            d_act_c = tl.where(a > 0, 1.0, 0.0)
        else:
            d_act_g = 1.0 - g * g
            d_act_c = 1.0 - a * a
        # dh reaching h_t: from the next step through d(h_t) of Eq. 7, and from the output
        dh = _apply(_read(dh_in, idx, m, dc_in), gal, gal_s, idx, m, GAL)
        dh = dh + tl.load(d_y + idx, mask=m, other=0.0)
        dc = tl.load(dc_in + idx, mask=m, other=0.0) + dh * o * d_act_c
        dc = _apply(dc, moon, moon_s, idx, m, MOON)  # Eq. 8
        drow = _gate_row(idx, per_run, d_run_stride, H)
        tl.store(d_gates + drow, dc * i * (1.0 - i) * _apply(g, sem, sem_s, idx, m, SEM), mask=m)  # Eq. 9: d(g_t)
        tl.store(d_gates + drow + H, dc * f * (1.0 - f) * tl.load(c_prev + idx, mask=m, other=0.0), mask=m)
        tl.store(d_gates + drow + 2 * H, _apply(dc * i * d_act_g, sem, sem_s, idx, m, SEM), mask=m)
        tl.store(d_gates + drow + 3 * H, dh * o * (1.0 - o) * a, mask=m)
        tl.store(dc_out + idx, dc * f, mask=m)

    @triton.jit
    def _gru_fwd_kernel(gx, gh, h_prev, sem, moon, rzn_out, hn_out, h_out, sem_s, moon_s, n, H,
                        SEM: tl.constexpr, MOON: tl.constexpr, RELU: tl.constexpr, BLOCK: tl.constexpr):
        """Equals ``cells.gru_step`` after its recurrent matmul, step by step:
        h_t = d((1 - z_t) ⊙ d(n_t) + z_t ⊙ h_{t-1}) (Eq. 13 in torch.nn's form, Moon's d outside)."""
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        row = (idx // H) * 3 * H + idx % H
        r = tl.sigmoid(tl.load(gx + row, mask=m, other=0.0) + _read(gh, row, m, h_prev))
        z = tl.sigmoid(tl.load(gx + row + H, mask=m, other=0.0) + _read(gh, row + H, m, h_prev))
        hn = _read(gh, row + 2 * H, m, h_prev)
        a = tl.load(gx + row + 2 * H, mask=m, other=0.0) + r * hn
        if RELU:
            cand = tl.maximum(a, 0.0)
        else:
            cand = _tanh(a)
        hp = tl.load(h_prev + idx, mask=m, other=0.0)
        h = (1.0 - z) * _apply(cand, sem, sem_s, idx, m, SEM) + z * hp  # Eq. 13: d(n_t)
        h = _apply(h, moon, moon_s, idx, m, MOON)
        tl.store(rzn_out + row, r, mask=m)
        tl.store(rzn_out + row + H, z, mask=m)
        tl.store(rzn_out + row + 2 * H, cand, mask=m)
        tl.store(hn_out + idx, hn, mask=m)
        tl.store(h_out + idx, h, mask=m)

    @triton.jit
    def _gru_bwd_kernel(dz_in, mm, d_y, gal, moon, sem, rzn, hn, h_prev, d_gx, d_gh, dz_out, gal_s, moon_s, sem_s,
                        n, H, GAL: tl.constexpr, MOON: tl.constexpr, SEM: tl.constexpr, RELU: tl.constexpr,
                        BLOCK: tl.constexpr):
        """Equals one step of ``fused._gru_backward_torch``: the gradient of ``cells.gru_step``."""
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        row = (idx // H) * 3 * H + idx % H
        # dh reaching h_t: through z * h_t of the next step, through d(h_t) into its matmul, and the output
        dh = tl.load(dz_in + idx, mask=m, other=0.0) + _apply(_read(mm, idx, m, dz_in), gal, gal_s, idx, m, GAL)
        dh = _apply(dh + tl.load(d_y + idx, mask=m, other=0.0), moon, moon_s, idx, m, MOON)
        r = tl.load(rzn + row, mask=m, other=0.0)
        z = tl.load(rzn + row + H, mask=m, other=0.0)
        cand = tl.load(rzn + row + 2 * H, mask=m, other=0.0)
        if RELU:
            dact = tl.where(cand > 0, 1.0, 0.0)
        else:
            dact = 1.0 - cand * cand
        d_n = _apply(dh * (1.0 - z), sem, sem_s, idx, m, SEM) * dact
        d_z = dh * (tl.load(h_prev + idx, mask=m, other=0.0) - _apply(cand, sem, sem_s, idx, m, SEM)) * z * (1.0 - z)
        d_r = d_n * tl.load(hn + idx, mask=m, other=0.0) * r * (1.0 - r)
        tl.store(d_gx + row, d_r, mask=m)
        tl.store(d_gx + row + H, d_z, mask=m)
        tl.store(d_gx + row + 2 * H, d_n, mask=m)
        tl.store(d_gh + row, d_r, mask=m)
        tl.store(d_gh + row + H, d_z, mask=m)
        tl.store(d_gh + row + 2 * H, d_n * r, mask=m)
        tl.store(dz_out + idx, dh * z, mask=m)

    @triton.jit
    def _adam_kernel(p, g, m, v, step_size, bias_correction2_sqrt, per_run, n, beta1, beta2, eps,
                     BLOCK: tl.constexpr):
        """One Adam step of a stacked parameter in one pass, torch.optim.Adam's update: m <- m + (1 - b1)(g - m),
        v <- b2 v + (1 - b2) g^2, p <- p - s_r m / (sqrt(v) / c_r + eps), with each run r's step size s_r and
        sqrt(1 - b2^t) c_r read from the device (a CUDA graph replays it with new values)."""
        idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = idx < n
        run = idx // per_run
        grad = tl.load(g + idx, mask=mask, other=0.0)
        m_new = tl.load(m + idx, mask=mask, other=0.0)
        m_new = m_new + (1.0 - beta1) * (grad - m_new)
        v_new = beta2 * tl.load(v + idx, mask=mask, other=0.0) + (1.0 - beta2) * grad * grad
        s = tl.load(step_size + run, mask=mask, other=0.0)
        c = tl.load(bias_correction2_sqrt + run, mask=mask, other=1.0)
        p_new = tl.load(p + idx, mask=mask, other=0.0) - s * m_new / (tl.sqrt(v_new) / c + eps)
        tl.store(m + idx, m_new, mask=mask)
        tl.store(v + idx, v_new, mask=mask)
        tl.store(p + idx, p_new, mask=mask)


def adam_step(p: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step_size: Tensor,
              bias_correction2_sqrt: Tensor, beta1: float, beta2: float, eps: float) -> None:
    """One Adam step of a group's stacked parameter ``p`` ``(R, ...)`` in place, its moments too, in one
    kernel; ``step_size`` (lr / (1 - b1^t)) and ``bias_correction2_sqrt`` (sqrt(1 - b2^t)) are ``(R,)``,
    one value a run (all contiguous)."""
    _check_contiguous(p=p, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, step_size=step_size,
                      bias_correction2_sqrt=bias_correction2_sqrt)
    n = p.numel()
    _adam_kernel[(triton.cdiv(n, BLOCK),)](p, grad, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt,
                                           n // p.shape[0], n, beta1, beta2, eps, BLOCK=BLOCK)


def lstm_forward_step(gates: Tensor, c_prev: Tensor, sem, moon, gsem_out: Optional[Tensor], c_out: Tensor,
                      tc_out: Tensor, h_out: Tensor, relu: bool, addend: Optional[Tensor] = None,
                      gates_out: Optional[Tensor] = None, h_low_out: Optional[Tensor] = None) -> None:
    """One step's pointwise forward: from the pre-activations ``gates`` ([R,] B, 4H) (plus ``addend``
    where given: the product and gx apart, under autocast), i, f, g, o are written to ``gates_out``
    (default: over ``gates``); d(g_t), c_t, act(c_t) and h_t to the ``*_out`` buffers, and h_t to
    ``h_low_out`` too where given, in its dtype (all contiguous but ``addend``, whose runs may lie apart:
    ``_run_stride``; ``gsem_out`` may be None)."""
    gates_out = gates if gates_out is None else gates_out
    _check_contiguous(gates=gates, gates_out=gates_out, c_prev=c_prev, gsem_out=gsem_out, c_out=c_out,
                      tc_out=tc_out, h_out=h_out, h_low_out=h_low_out)
    n, hidden = c_prev.numel(), c_prev.shape[-1]
    add_run_stride = 0 if addend is None else _run_stride(addend, "addend")
    sem_mode, sem_t, sem_s = _factor(sem, c_prev)
    moon_mode, moon_t, moon_s = _factor(moon, c_prev)
    _lstm_fwd_kernel[(triton.cdiv(n, BLOCK),)](
        gates, gates if addend is None else addend, gates_out, c_prev, sem_t, moon_t,
        c_prev if gsem_out is None else gsem_out, c_out, tc_out, h_out, h_out if h_low_out is None else h_low_out,
        sem_s, moon_s, n, hidden, n // _runs(c_prev), add_run_stride, ADD=addend is not None,
        LOW=h_low_out is not None, GSEM=gsem_out is not None, SEM=sem_mode, MOON=moon_mode, RELU=relu, BLOCK=BLOCK)


def lstm_backward_step(dh_in: Tensor, gal_next, d_y: Tensor, dc_in: Tensor, gates: Tensor, c_prev: Tensor,
                       tc: Tensor, sem, moon, d_gates: Tensor, dc_out: Tensor, relu: bool) -> None:
    """One step's pointwise backward: from the dh arriving at h_t before the next step's Gal
    factor ``gal_next``, the output's ``d_y`` and the carried ``dc``, and the forward's i, f, g, o
    (``gates``), c_{t-1} and act(c_t) (``tc``), write this step's pre-activation gradients ``d_gates``
    ([R,] B, 4H) (in its dtype; its runs may lie apart, ``_run_stride``) and dc_{t-1} (``dc_out`` may be
    ``dc_in``)."""
    _check_contiguous(dh_in=dh_in, d_y=d_y, dc_in=dc_in, gates=gates, c_prev=c_prev, tc=tc, dc_out=dc_out)
    n, hidden = dh_in.numel(), dh_in.shape[-1]
    d_run_stride = _run_stride(d_gates, "d_gates")
    gal_mode, gal_t, gal_s = _factor(gal_next, dc_in)
    moon_mode, moon_t, moon_s = _factor(moon, dc_in)
    sem_mode, sem_t, sem_s = _factor(sem, dc_in)
    _lstm_bwd_kernel[(triton.cdiv(n, BLOCK),)](
        dh_in, d_y, dc_in, gates, c_prev, tc, gal_t, moon_t, sem_t, d_gates, dc_out, gal_s, moon_s, sem_s, n, hidden,
        n // _runs(dh_in), d_run_stride, GAL=gal_mode, MOON=moon_mode, SEM=sem_mode, RELU=relu, BLOCK=BLOCK)


def gru_forward_step(gx: Tensor, gh: Tensor, h_prev: Tensor, sem, moon, rzn_out: Tensor, hn_out: Tensor,
                     h_out: Tensor, relu: bool) -> None:
    """One GRU step's pointwise forward from ``gx`` and ``gh = W_hh d(h_{t-1}) + b_hh`` (B, 3H):
    r, z and the candidate n to ``rzn_out``, W_hn h + b_hn to ``hn_out``, h_t to ``h_out``."""
    _check_contiguous(gx=gx, gh=gh, h_prev=h_prev, rzn_out=rzn_out, hn_out=hn_out, h_out=h_out)
    n, hidden = h_prev.numel(), h_prev.shape[-1]
    sem_mode, sem_t, sem_s = _factor(sem, h_prev)
    moon_mode, moon_t, moon_s = _factor(moon, h_prev)
    _gru_fwd_kernel[(triton.cdiv(n, BLOCK),)](
        gx, gh, h_prev, sem_t, moon_t, rzn_out, hn_out, h_out, sem_s, moon_s, n, hidden,
        SEM=sem_mode, MOON=moon_mode, RELU=relu, BLOCK=BLOCK)


def gru_backward_step(dz_in: Tensor, mm: Tensor, gal_next, d_y: Tensor, moon, sem, rzn: Tensor, hn: Tensor,
                      h_prev: Tensor, d_gx: Tensor, d_gh: Tensor, dz_out: Tensor, relu: bool) -> None:
    """One GRU step's pointwise backward. The dh reaching h_t is ``dz_in`` (through the next
    step's z * h) plus ``mm`` (the next step's d_gh @ W_hh) times its Gal factor, plus ``d_y``;
    writes the step's ``d_gx`` and ``d_gh`` (B, 3H) and ``dz_out`` = dh * z."""
    _check_contiguous(dz_in=dz_in, mm=mm, d_y=d_y, rzn=rzn, hn=hn, h_prev=h_prev, d_gx=d_gx, d_gh=d_gh,
                      dz_out=dz_out)
    n, hidden = dz_in.numel(), dz_in.shape[-1]
    gal_mode, gal_t, gal_s = _factor(gal_next, dz_in)
    moon_mode, moon_t, moon_s = _factor(moon, dz_in)
    sem_mode, sem_t, sem_s = _factor(sem, dz_in)
    _gru_bwd_kernel[(triton.cdiv(n, BLOCK),)](
        dz_in, mm, d_y, gal_t, moon_t, sem_t, rzn, hn, h_prev, d_gx, d_gh, dz_out, gal_s, moon_s, sem_s, n, hidden,
        GAL=gal_mode, MOON=moon_mode, SEM=sem_mode, RELU=relu, BLOCK=BLOCK)
