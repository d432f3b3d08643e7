"""Memory loss, measured (paper Sec. 3, Eqs. 14-19): how much of its starting cell state an LSTM
still holds after t steps, at test time and in training.

With every gate at 1, Moon's test-time scaling multiplies the carried state by the keep
probability q = 1 - p at every step, so the part of c_t that comes from c_0 is q^t c_0 (Eq. 17,
``eq:drop_test_sum_1``; the paper writes p for q). With inverted scaling (Eq. 18) it is the
training state that grows, by q^-t on the kept units. Dropping only the update vector g_t
(Eq. 19, ``eq:drop_test_sum_2``) or h_{t-1} where it enters the gates (Gal) scales nothing that is
carried. ``memory_trace`` measures that part directly: the same inputs and masks from c_0 = 0 and
from c_0 = delta, and the norm of the difference of the two c_t, per unit of ||delta||.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from .layers import LSTM


def _check_layer(lstm) -> None:
    if not isinstance(lstm, LSTM):
        raise ValueError(f"lstm must be a recdrop.LSTM, got {type(lstm).__name__}")
    if lstm.num_layers != 1 or lstm.bidirectional or lstm.batch_first:
        raise ValueError("cell states are traced for a one-layer, unidirectional recdrop.LSTM with "
                         "batch_first=False")


def cell_states(lstm: LSTM, x: Tensor, hx: Optional[Tuple[Tensor, Tensor]] = None,
                masks: Optional[List[Dict[str, Tensor]]] = None) -> Tensor:
    """c_t of every step ``(T, B, H)`` of ``lstm`` on ``x`` ``(T, B, input)``, in the layer's own
    mode. In training the masks (``draw_masks`` layout) are drawn once for the whole sequence
    unless given, and fed a step at a time, so a per-sequence mask stays fixed over the sequence."""
    _check_layer(lstm)
    steps, batch = x.shape[0], x.shape[1]
    if hx is None:
        zero = x.new_zeros(1, batch, lstm.hidden_size)
        hx = (zero, zero)
    if masks is None and lstm.training and lstm.rdrop.targets:
        masks = lstm.draw_masks(steps, batch, x.device, x.dtype)
    state, out = hx, []
    for t in range(steps):
        step_masks = None if masks is None else [{k: m[t:t + 1] if m.dim() == 3 else m for k, m in masks[0].items()}]
        _, state = lstm(x[t:t + 1], state, masks=step_masks)
        out.append(state[1][0])
    return torch.stack(out)


def memory_trace(lstm: LSTM, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
    """``(T,)``: the mean over the batch of ||c_t(c_0 = delta) - c_t(c_0 = 0)|| / ||delta||, for a
    random unit-norm delta per sequence; the same inputs and (in training) the same masks in both
    runs. Eq. 17 predicts q^(t+1) at step index t for Moon at test with the `paper` scaling."""
    _check_layer(lstm)
    steps, batch = x.shape[0], x.shape[1]
    delta = torch.randn(batch, lstm.hidden_size, generator=generator).to(x)
    delta = delta / delta.norm(dim=-1, keepdim=True)
    masks = lstm.draw_masks(steps, batch, x.device, x.dtype) if lstm.training and lstm.rdrop.targets else None
    zero = x.new_zeros(1, batch, lstm.hidden_size)
    base = cell_states(lstm, x, (zero, zero), masks)
    moved = cell_states(lstm, x, (zero, delta[None]), masks)
    return (moved - base).norm(dim=-1).mean(dim=1)


def predicted_trace(steps: int, p: float, training: bool) -> Tensor:
    """What Eqs. 17-18 predict for Moon's memory trace with every gate at 1: q^(t+1) at test
    (`paper` scaling) and q^-(t+1) in training (`inverted` scaling, on the kept units), q = 1 - p."""
    q = 1.0 - p
    t = torch.arange(1, steps + 1, dtype=torch.float64)
    return q ** (-t if training else t)
