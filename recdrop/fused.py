"""The fast path: a whole LSTM sequence as one autograd node, with a hand-written backward loop.

The reference path (``recdrop.cells.lstm_step`` in a Python loop) lets autograd record ~15 nodes
per time step. Here the forward runs the same equations (Eqs. 4-9 with d(.) of Eq. 3/18) without
recording, keeping the gate activations, and the backward walks the steps in reverse computing
the gradients by hand; the recurrent weight's gradient is one matmul over all steps after the loop.
Same numbers as the reference path (tested to 1e-10 in float64), fewer kernels and no per-step
graph. Higher-order gradients (double backward) are not supported here and raise an error: set
``module.fused = False`` to run the reference loop for those.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from .cells import _mul
from .masks import StepFactors


def _at(factor, t: int, per_step: bool):
    if factor is None or not isinstance(factor, Tensor) or not per_step:
        return factor
    return factor[t]


def _first_order_only() -> None:
    """Grad mode is on inside a backward only under create_graph=True (higher-order gradients)."""
    if torch.is_grad_enabled():
        raise RuntimeError("recdrop's fast path does not support higher-order gradients (create_graph=True); "
                           "set module.fused = False to run the reference loop")


class _LSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, gal, sem, moon, per_step: bool,
                relu: bool, reverse: bool):
        steps, hidden = gx.shape[0], h0.shape[-1]
        act = torch.relu if relu else torch.tanh
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        ys = gx.new_empty(steps, *h0.shape)
        gates_all = gx.new_empty(gx.shape)  # i, f, g, o after their activations
        c_prev_all = gx.new_empty(steps, *h0.shape)
        tc_all = gx.new_empty(steps, *h0.shape)  # act(c_t)
        hin_all = gx.new_empty(steps, *h0.shape)  # d(h_{t-1}) as it entered the gates
        h, c = h0, c0
        for k, t in enumerate(order):
            hin = _mul(h, _at(gal, k, per_step))
            gates = torch.addmm(gx[t], hin, w_hh.t())
            g = act(gates[:, 2 * hidden:3 * hidden])
            gates = torch.sigmoid(gates)
            gates[:, 2 * hidden:3 * hidden] = g
            i, f, o = gates[:, :hidden], gates[:, hidden:2 * hidden], gates[:, 3 * hidden:]
            c_prev_all[t] = c
            c = _mul(torch.addcmul(f * c, i, _mul(g, _at(sem, k, per_step))), _at(moon, k, per_step))
            tc = act(c)
            h = o * tc
            ys[t], gates_all[t], tc_all[t], hin_all[t] = h, gates, tc, hin
        ctx.save_for_backward(w_hh, gates_all, c_prev_all, tc_all, hin_all, c)
        ctx.factors = (gal, sem, moon)
        ctx.flags = (per_step, relu, reverse)
        return ys, h, c

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn: Optional[Tensor], d_cn: Optional[Tensor]):
        _first_order_only()
        w_hh, gates_all, c_prev_all, tc_all, hin_all, c_last = ctx.saved_tensors
        gal, sem, moon = ctx.factors
        per_step, relu, reverse = ctx.flags
        steps, hidden = gates_all.shape[0], w_hh.shape[1]
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        d_gates_all = torch.empty_like(gates_all)
        dh = torch.zeros_like(c_last) if d_hn is None else d_hn.clone()
        dc = torch.zeros_like(c_last) if d_cn is None else d_cn.clone()
        for k, t in reversed(list(enumerate(order))):
            gates = gates_all[t]
            i, f, g, o = (gates[:, :hidden], gates[:, hidden:2 * hidden], gates[:, 2 * hidden:3 * hidden],
                          gates[:, 3 * hidden:])
            tc = tc_all[t]
            dh = dh + d_ys[t]
            d_act_c = (tc > 0).to(tc.dtype) if relu else 1 - tc * tc
            dc = torch.addcmul(dc, dh * o, d_act_c)  # through h_t = o * act(c_t)
            dc = _mul(dc, _at(moon, k, per_step))  # c_t = d(f * c_{t-1} + i * d(g_t))
            sem_t = _at(sem, k, per_step)
            d_g = _mul(dc * i, sem_t)
            d_pre_g = d_g * ((g > 0).to(g.dtype) if relu else 1 - g * g)
            d_gates = d_gates_all[t]
            d_gates[:, :hidden] = dc * _mul(g, sem_t) * i * (1 - i)
            d_gates[:, hidden:2 * hidden] = dc * c_prev_all[t] * f * (1 - f)
            d_gates[:, 2 * hidden:3 * hidden] = d_pre_g
            d_gates[:, 3 * hidden:] = dh * tc * o * (1 - o)
            dc = dc * f
            dh = _mul(d_gates @ w_hh, _at(gal, k, per_step))
        flat = d_gates_all.reshape(-1, d_gates_all.shape[-1])
        d_w_hh = flat.t() @ hin_all.reshape(-1, hidden)
        return d_gates_all, dh, dc, d_w_hh, None, None, None, None, None, None


def lstm_sequence(gx: Tensor, h0: Tensor, c0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], factors: StepFactors,
                  nonlinearity: str, reverse: bool) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
    """The LSTM over all steps of ``gx = W_ih x + b_ih`` ``(T, B, 4H)``: outputs ``(T, B, H)`` and (h_T, c_T).

    Computes what the reference loop over ``recdrop.cells.lstm_step`` computes."""
    if b_hh is not None:
        gx = gx + b_hh
    ys, h, c = _LSTMSequence.apply(gx, h0, c0, w_hh, factors.gal, factors.semeniuta, factors.moon,
                                   factors.per_step, nonlinearity == "relu", reverse)
    return ys, (h, c)


class _GRUSequence(torch.autograd.Function):
    """GRU in torch.nn's form (r, z, n; reset gate after the recurrent matmul), Eq. 13 and Gal/Moon."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], gal, sem, moon, per_step: bool,
                relu: bool, reverse: bool):
        steps, hidden = gx.shape[0], h0.shape[-1]
        act = torch.relu if relu else torch.tanh
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        ys = gx.new_empty(steps, *h0.shape)
        rzn_all = gx.new_empty(gx.shape)  # r, z, n after their activations (n before d(.))
        hn_all = gx.new_empty(steps, *h0.shape)  # W_hn d(h_{t-1}) + b_hn
        hin_all = gx.new_empty(steps, *h0.shape)
        h_prev_all = gx.new_empty(steps, *h0.shape)
        h = h0
        for k, t in enumerate(order):
            hin = _mul(h, _at(gal, k, per_step))
            gh = hin @ w_hh.t() if b_hh is None else torch.addmm(b_hh, hin, w_hh.t())
            rz = torch.sigmoid(gx[t, :, :2 * hidden] + gh[:, :2 * hidden])
            r, z = rz[:, :hidden], rz[:, hidden:]
            hn = gh[:, 2 * hidden:]
            n = act(torch.addcmul(gx[t, :, 2 * hidden:], r, hn))
            h_prev_all[t] = h
            h = _mul(torch.lerp(_mul(n, _at(sem, k, per_step)), h, z), _at(moon, k, per_step))  # (1-z) n + z h
            ys[t], hn_all[t], hin_all[t] = h, hn, hin
            rzn_all[t, :, :2 * hidden], rzn_all[t, :, 2 * hidden:] = rz, n
        ctx.save_for_backward(w_hh, rzn_all, hn_all, hin_all, h_prev_all, h)
        ctx.factors = (gal, sem, moon)
        ctx.flags = (per_step, relu, reverse, b_hh is not None)
        return ys, h

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn_out: Optional[Tensor]):
        _first_order_only()
        w_hh, rzn_all, hn_all, hin_all, h_prev_all, h_last = ctx.saved_tensors
        gal, sem, moon = ctx.factors
        per_step, relu, reverse, has_bias = ctx.flags
        steps, hidden = rzn_all.shape[0], w_hh.shape[1]
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        d_gx_all = torch.empty_like(rzn_all)
        d_gh_all = torch.empty_like(rzn_all)
        dh = torch.zeros_like(h_last) if d_hn_out is None else d_hn_out.clone()
        for k, t in reversed(list(enumerate(order))):
            rzn = rzn_all[t]
            r, z, n = rzn[:, :hidden], rzn[:, hidden:2 * hidden], rzn[:, 2 * hidden:]
            sem_t = _at(sem, k, per_step)
            dh = _mul(dh + d_ys[t], _at(moon, k, per_step))
            d_pre_n = _mul(dh * (1 - z), sem_t) * ((n > 0).to(n.dtype) if relu else 1 - n * n)
            d_pre_z = dh * (h_prev_all[t] - _mul(n, sem_t)) * z * (1 - z)
            d_pre_r = d_pre_n * hn_all[t] * r * (1 - r)
            d_gx, d_gh = d_gx_all[t], d_gh_all[t]
            d_gx[:, :hidden], d_gx[:, hidden:2 * hidden], d_gx[:, 2 * hidden:] = d_pre_r, d_pre_z, d_pre_n
            d_gh[:, :2 * hidden] = d_gx[:, :2 * hidden]
            d_gh[:, 2 * hidden:] = d_pre_n * r
            dh = dh * z + _mul(d_gh @ w_hh, _at(gal, k, per_step))
        flat = d_gh_all.reshape(-1, d_gh_all.shape[-1])
        d_w_hh = flat.t() @ hin_all.reshape(-1, hidden)
        d_b_hh = flat.sum(0) if has_bias else None
        return d_gx_all, dh, d_w_hh, d_b_hh, None, None, None, None, None, None


class _RNNSequence(torch.autograd.Function):
    """Vanilla RNN, Eq. 2 (d(h_{t-1}) where it re-enters) and Moon's d(h_t)."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, w_hh: Tensor, drop_in, moon, per_step: bool, relu: bool,
                reverse: bool):
        steps = gx.shape[0]
        act = torch.relu if relu else torch.tanh
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        ys = gx.new_empty(steps, *h0.shape)
        a_all = gx.new_empty(steps, *h0.shape)  # act(pre-activation), before Moon's d(.)
        hin_all = gx.new_empty(steps, *h0.shape)
        h = h0
        for k, t in enumerate(order):
            hin = _mul(h, _at(drop_in, k, per_step))
            a = act(torch.addmm(gx[t], hin, w_hh.t()))
            h = _mul(a, _at(moon, k, per_step))
            ys[t], a_all[t], hin_all[t] = h, a, hin
        ctx.save_for_backward(w_hh, a_all, hin_all, h)
        ctx.factors = (drop_in, moon)
        ctx.flags = (per_step, relu, reverse)
        return ys, h

    @staticmethod
    def backward(ctx, d_ys: Tensor, d_hn_out: Optional[Tensor]):
        _first_order_only()
        w_hh, a_all, hin_all, h_last = ctx.saved_tensors
        drop_in, moon = ctx.factors
        per_step, relu, reverse = ctx.flags
        steps, hidden = a_all.shape[0], w_hh.shape[1]
        order = range(steps - 1, -1, -1) if reverse else range(steps)
        d_pre_all = torch.empty_like(a_all)
        dh = torch.zeros_like(h_last) if d_hn_out is None else d_hn_out.clone()
        for k, t in reversed(list(enumerate(order))):
            a = a_all[t]
            d_pre = _mul(dh + d_ys[t], _at(moon, k, per_step)) * ((a > 0).to(a.dtype) if relu else 1 - a * a)
            d_pre_all[t] = d_pre
            dh = _mul(d_pre @ w_hh, _at(drop_in, k, per_step))
        d_w_hh = d_pre_all.reshape(-1, hidden).t() @ hin_all.reshape(-1, hidden)
        return d_pre_all, dh, d_w_hh, None, None, None, None, None


def gru_sequence(gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], factors: StepFactors,
                 nonlinearity: str, reverse: bool) -> Tuple[Tensor, Tuple[Tensor]]:
    """The GRU over all steps of ``gx = W_ih x + b_ih`` ``(T, B, 3H)``, as the loop over ``gru_step``."""
    ys, h = _GRUSequence.apply(gx, h0, w_hh, b_hh, factors.gal, factors.semeniuta, factors.moon,
                               factors.per_step, nonlinearity == "relu", reverse)
    return ys, (h,)


def rnn_sequence(gx: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Optional[Tensor], factors: StepFactors,
                 nonlinearity: str, reverse: bool) -> Tuple[Tensor, Tuple[Tensor]]:
    """The vanilla RNN over all steps, as the loop over ``rnn_step``."""
    if b_hh is not None:
        gx = gx + b_hh
    drop_in = factors.gal if factors.semeniuta is None else factors.semeniuta
    ys, h = _RNNSequence.apply(gx, h0, w_hh, drop_in, factors.moon, factors.per_step, nonlinearity == "relu",
                               reverse)
    return ys, (h,)
