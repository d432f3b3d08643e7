"""Multi-layer RNN, LSTM and GRU with recurrent dropout, drop-in for torch.nn (paper Section 3).

Same constructor arguments, forward signature, shapes, return values and parameter names as
``torch.nn.LSTM`` / ``GRU`` / ``RNN``; the keyword-only arguments ``recurrent_dropout``, ``scheme``,
``sampling`` and ``scaling`` add the paper's recurrent dropout (see ``recdrop.masks``). Every layer
and direction draws its own masks. With ``recurrent_dropout=0``, or in ``eval()`` with inverted
scaling, the modules compute exactly what torch.nn computes.

Speed: the input projections W_ih x_t of all time steps are one matmul before the time loop (as
cuDNN does); only the recurrent matmul and the elementwise gate math run per step.
"""
from __future__ import annotations

import functools
import itertools
import warnings
from typing import Dict, List, Optional, Tuple

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .cells import (ACTIVATIONS, CELL_SCHEMES, GATES, _check_sizes, check_activation, check_input, check_states,
                    gru_step, init_uniform_, lstm_step, rnn_step)
from .fused import gru_sequence, lstm_sequence, rnn_sequence
from .masks import RecurrentDropout, StepFactors, check_rate

Masks = List[Dict[str, Tensor]]


def plain_ops_needed(*tensors: Optional[Tensor]) -> bool:
    """Whether a forward must run on plain torch ops, not the fast path (one autograd.Function with
    preallocated ``out=`` buffers): under ``torch.jit.trace``, ``torch.compile`` and ``torch.export``
    (which trace ops), functorch transforms (``torch.func.grad``, ``vmap``, ``jvp``) and forward-mode
    AD (dual tensors), which an autograd.Function without those rules does not support."""
    if torch.jit.is_tracing() or torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return True
    return any(t is not None and fwAD.unpack_dual(t).tangent is not None for t in tensors)


def _input_projection_with_both_biases(x: Tensor, w_ih: Tensor, b_ih: Optional[Tensor],
                                        b_hh: Optional[Tensor]) -> Tensor:
    """W_ih x + b_ih + b_hh for all steps in one matmul (LSTM, RNN: b_hh sits outside any gate product)."""
    return F.linear(x, w_ih, b_ih if b_hh is None else b_ih + b_hh)


class _RecurrentLayer(nn.Module):
    """The layers' shared body; each subclass says how one direction runs (``_step`` on the
    reference path, ``_sequence`` on the fast path) and how many states it carries."""

    kind = ""
    n_states = 1  # h_t; the LSTM carries (h_t, c_t)
    fused = True  # the fast path of recdrop.fused where it can run (plain_ops_needed); False: always the loop

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, nonlinearity: str = "tanh",
                 recurrent_dropout: float = 0.0, scheme: str = "semeniuta", sampling: str = "per-step",
                 scaling: str = "inverted"):
        super().__init__()
        _check_sizes(input_size, hidden_size)
        if not isinstance(bias, bool):
            raise TypeError(f"bias should be of type bool, got: {type(bias).__name__}")  # torch.nn's words
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.bidirectional = bias, batch_first, bidirectional
        self.dropout = check_rate("dropout", dropout)
        self.proj_size = proj_size  # LSTM only: h_t = W_hr (o_t * f(c_t)), of this size
        if self.dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero "
                          f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}")
        check_activation(nonlinearity)
        self.nonlinearity = nonlinearity  # its name: a module holds no function, so that it loads weights_only
        self.rdrop = RecurrentDropout(recurrent_dropout, scheme, sampling, scaling, CELL_SCHEMES[self.kind])
        self.num_directions = 2 if bidirectional else 1
        gate_size = GATES[self.kind] * hidden_size
        kw = {"device": device, "dtype": dtype}
        self._flat_weights_names: List[str] = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else self.output_size * self.num_directions
            for suffix in ("", "_reverse")[: self.num_directions]:
                shapes = {f"weight_ih_l{layer}{suffix}": (gate_size, layer_input),
                          f"weight_hh_l{layer}{suffix}": (gate_size, self.output_size)}
                if bias:
                    shapes[f"bias_ih_l{layer}{suffix}"] = (gate_size,)
                    shapes[f"bias_hh_l{layer}{suffix}"] = (gate_size,)
                if proj_size:
                    shapes[f"weight_hr_l{layer}{suffix}"] = (proj_size, hidden_size)
                for name, shape in shapes.items():
                    setattr(self, name, nn.Parameter(torch.empty(shape, **kw)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    @property
    def output_size(self) -> int:
        """The size of h_t: ``proj_size`` where the LSTM projects it, else ``hidden_size``."""
        return self.proj_size or self.hidden_size

    # -- torch.nn compatibility -------------------------------------------------------------------
    def reset_parameters(self) -> None:
        init_uniform_(self.parameters(), self.hidden_size)

    def flatten_parameters(self) -> None:
        """No-op, kept so code written for torch.nn (which calls it for cuDNN) runs unchanged."""

    @property
    def all_weights(self) -> List[List[nn.Parameter]]:
        per = (4 if self.bias else 2) + (1 if self.proj_size else 0)
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i:i + per]] for i in range(0, len(names), per)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        for name, default in (("num_layers", 1), ("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0), ("nonlinearity", "tanh")):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)!r}"
        return s + self.rdrop.describe()

    # -- masks ------------------------------------------------------------------------------------
    def draw_masks(self, seq_len: int, batch_size: int, device=None, dtype=None,
                   generator: Optional[torch.Generator] = None) -> Masks:
        """Raw 0/1 masks for one forward call: a list over layers x directions (torch's order,
        ``l0, l0_reverse, l1, ...``) of dicts target -> tensor ``(T, B, H)`` or ``(B, H)`` (for
        "gal", H is ``proj_size`` where there is a projection: it drops h_{t-1})."""
        shapes = self._mask_shapes(seq_len, batch_size)
        return [self.rdrop.draw(shapes, device, dtype, generator)
                for _ in range(self.num_layers * self.num_directions)]

    def _mask_shapes(self, steps: int, batch: int) -> Dict[str, Tuple[int, ...]]:
        return {t: self.rdrop.mask_shape(steps, batch, self.output_size if t == "gal" else self.hidden_size)
                for t in self.rdrop.targets}

    def _state_shapes(self, batch: int) -> Tuple[Tuple[int, ...], ...]:
        """h_0's shape (L * D, B, proj_size or hidden_size), and c_0's (L * D, B, hidden_size)."""
        n = self.num_layers * self.num_directions
        return ((n, batch, self.output_size), (n, batch, self.hidden_size))[: self.n_states]

    # -- forward ----------------------------------------------------------------------------------
    def forward(self, input: Tensor, hx=None, *, masks: Optional[Masks] = None):
        """Same as torch.nn's forward. ``masks`` (keyword-only) replaces the random masks with
        given raw 0/1 masks, in the layout of ``draw_masks``; used when training only."""
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx, masks)
        x, hx, batched = self._check_input(input, hx)
        masks = self._masks_for(x, masks)
        x, state = self._run_layers(x, hx, masks, self._run_direction)
        output = x.transpose(0, 1) if self.batch_first and batched else x  # unbatched input has no batch dim
        if not batched:
            output = output.squeeze(1)
            state = tuple(s.squeeze(1) for s in state)
        return output, (state if self.n_states == 2 else state[0])

    def _masks_for(self, x: Tensor, masks: Optional[Masks]) -> Optional[Masks]:
        """The masks of a forward call over ``x`` (T, B, ...): the given ones, checked, or fresh ones
        drawn when training with recurrent dropout; None otherwise."""
        steps, batch = x.shape[0], x.shape[1]
        if masks is None and self.training and self.rdrop.targets:
            masks = self.draw_masks(steps, batch, x.device, x.dtype)
        if masks is not None:
            self._check_masks(masks, steps, batch)
        return masks

    def _run_layers(self, x: Tensor, hx: Tuple[Tensor, ...], masks: Optional[Masks], run_direction):
        """Every layer and direction over ``x`` (time-major) with ``run_direction(x, state, layer,
        reverse, masks)``, dropout between layers; the last layer's output and (h_n[, c_n])."""
        finals: List[List[Tensor]] = [[] for _ in range(self.n_states)]  # h_n (and c_n) per layer and direction
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                out, state = run_direction(x, tuple(s[k] for s in hx), layer, d == 1, None if masks is None else masks[k])
                outs.append(out)
                for final, s in zip(finals, state):
                    final.append(s)
            x = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, tuple(torch.stack(final) for final in finals)

    # -- packed sequences -------------------------------------------------------------------------
    def _forward_packed(self, packed: PackedSequence, hx, masks: Optional[Masks]):
        """A PackedSequence in and out, as torch.nn. Sequences are run in the pack's order (longest
        first); each step runs only the sequences still going, so padding takes no part: no mask
        acts on it, the reverse direction starts at each sequence's own end, and h_n is each
        sequence's state at its own end. Masks (given or drawn) are laid out as for a padded batch
        of the original order, ``draw_masks(T, B)``, and a sequence uses its first ``length`` steps."""
        sorted_idx, unsorted_idx = packed.sorted_indices, packed.unsorted_indices
        x, lengths = pad_packed_sequence(PackedSequence(packed.data, packed.batch_sizes))  # (T, B, in), sorted
        self._check_input(x, None)
        batch = x.shape[1]
        if hx is None:
            hx = tuple(x.new_zeros(shape) for shape in self._state_shapes(batch))
        else:
            hx = check_states(hx, self._state_shapes(batch))
            hx = tuple(s if sorted_idx is None else s.index_select(1, sorted_idx) for s in hx)
        masks = self._masks_for(x, masks)
        if masks is not None and sorted_idx is not None:  # into the pack's order
            masks = [{t: m.index_select(m.dim() - 2, sorted_idx) for t, m in d.items()} for d in masks]
        sizes = packed.batch_sizes.tolist()
        x, state = self._run_layers(x, hx, masks, functools.partial(self._run_packed_direction, lengths=lengths,
                                                                    sizes=sizes))
        data = pack_padded_sequence(x, lengths).data
        if unsorted_idx is not None:
            state = tuple(st.index_select(1, unsorted_idx) for st in state)
        output = PackedSequence(data, packed.batch_sizes, sorted_idx, unsorted_idx)
        return output, (state if self.n_states == 2 else state[0])

    def _run_packed_direction(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                              masks: Optional[Dict[str, Tensor]], *, lengths: Tensor, sizes: List[int]):
        """One direction over sequences sorted longest first: ``x`` is reversed within each sequence for
        the reverse direction, then run in stretches of steps over which the same sequences go on;
        a sequence's final state is taken where it ends."""
        if reverse:
            x = _reverse_within(x, lengths)
        steps, batch = x.shape[0], x.shape[1]
        pieces, ends, k0 = [], [], 0
        while k0 < steps:
            n = sizes[k0]
            k1 = k0 + sum(1 for _ in itertools.takewhile(lambda b: b == n, sizes[k0:]))
            seg = None if masks is None else {t: m[k0:k1, :n] if m.dim() == 3 else m[:n] for t, m in masks.items()}
            out, new = self._run_direction(x[k0:k1, :n], tuple(s[:n] for s in state), layer, reverse, seg,
                                           in_order=True)
            pieces.append(F.pad(out, (0, 0, 0, batch - n)))
            n_next = sizes[k1] if k1 < steps else 0
            ends.append(tuple(s[n_next:n] for s in new))  # the sequences that end here
            state = tuple(s[:n_next] for s in new)
            k0 = k1
        out = torch.cat(pieces)
        final = tuple(torch.cat([e[i] for e in reversed(ends)]) for i in range(self.n_states))
        return (_reverse_within(out, lengths) if reverse else out), final

    def _run_direction(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                       masks: Optional[Dict[str, Tensor]], in_order: bool = False):
        """One direction of ``layer`` (its reverse weights if ``reverse``) over ``x``, last step first if
        ``reverse``, or in the given order with ``in_order`` (``x`` already reversed, as for packed input)."""
        sfx = "_reverse" if reverse else ""
        w_ih = getattr(self, f"weight_ih_l{layer}{sfx}")
        w_hh = getattr(self, f"weight_hh_l{layer}{sfx}")
        b_ih = getattr(self, f"bias_ih_l{layer}{sfx}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_l{layer}{sfx}") if self.bias else None
        w_hr = getattr(self, f"weight_hr_l{layer}{sfx}") if self.proj_size else None
        per_step = self.rdrop.sampling == "per-step"
        factors = self.rdrop.factors(masks, self.training, per_step=per_step)
        backwards = reverse and not in_order
        if self.fused and w_hr is None and not plain_ops_needed(x, w_ih, w_hh, b_ih, b_hh, *state):
            return self._sequence(x, state, w_ih, w_hh, b_ih, b_hh, factors, backwards)
        gx = F.linear(x, w_ih, b_ih)  # (T, B, G*H): all input projections in one matmul
        steps = x.shape[0]
        order = range(steps - 1, -1, -1) if backwards else range(steps)
        outs: List[Optional[Tensor]] = [None] * steps
        for k, t in enumerate(order):  # masks are indexed by processing step k
            state = self._step(gx[t], state, w_hh, b_hh, factors.at(k))
            if w_hr is not None:  # the LSTM's projection (proj_size): h_t = W_hr (o_t * f(c_t))
                state = (F.linear(state[0], w_hr), *state[1:])
            outs[t] = state[0]
        return torch.stack(outs), state

    def _step(self, gx: Tensor, state: Tuple[Tensor, ...], w_hh: Tensor, b_hh: Optional[Tensor],
              factors) -> Tuple[Tensor, ...]:
        """The reference path: one step of ``recdrop.cells`` from ``gx = W_ih x_t + b_ih``; the new state."""
        raise NotImplementedError

    def _sequence(self, x: Tensor, state: Tuple[Tensor, ...], w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor],
                  b_hh: Optional[Tensor], factors: StepFactors, reverse: bool):
        """The fast path: the whole direction through ``recdrop.fused``; outputs and final state."""
        raise NotImplementedError

    # -- input checks -----------------------------------------------------------------------------
    def _check_input(self, input: Tensor, hx):
        batched = check_input(input, self.input_size, batched_rank=3)
        weight = self.weight_ih_l0
        if input.dtype != weight.dtype:  # as torch.nn says it, in training and at test alike
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                             f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        shapes = self._state_shapes(x.shape[1])
        if hx is None:
            return x, tuple(x.new_zeros(shape) for shape in shapes), batched
        states = check_states(hx, shapes if batched else [(s[0], s[2]) for s in shapes])
        return x, states if batched else tuple(st.unsqueeze(1) for st in states), batched

    def _check_masks(self, masks: Masks, steps: int, batch: int) -> None:
        n = self.num_layers * self.num_directions
        if not isinstance(masks, (list, tuple)) or len(masks) != n:
            raise ValueError(f"masks must be a list of {n} dicts (one per layer and direction)")
        shapes = self._mask_shapes(steps, batch)
        for m in masks:
            self.rdrop.check_masks(m, shapes)


def _reverse_within(x: Tensor, lengths: Tensor) -> Tensor:
    """``x`` (T, B, ...) with each sequence's first ``lengths[b]`` steps in reverse order; padding stays."""
    t = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
    n = lengths.to(x.device).unsqueeze(0)
    idx = torch.where(t < n, n - 1 - t, t)
    return x.gather(0, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


class LSTM(_RecurrentLayer):
    """Drop-in ``torch.nn.LSTM`` with recurrent dropout.

    Keyword-only: ``recurrent_dropout`` p (the drop rate, in [0, 1)); ``scheme`` one of
    ``"semeniuta"`` (default; drop g_t, Eq. 9), ``"gal"`` (drop h_{t-1} where it enters the gates,
    Eq. 7), ``"moon"`` (drop c_t, Eq. 8, carried dropped), ``"gal+semeniuta"`` (both);
    ``sampling`` ``"per-step"`` or ``"per-sequence"``; ``scaling`` ``"inverted"`` (Eq. 18) or
    ``"paper"`` (Eq. 3); ``nonlinearity`` of g_t and c_t, ``"tanh"`` or ``"relu"``.
    ``proj_size`` > 0 projects h_t = W_hr (o_t * f(c_t)) as torch.nn does (Gal's mask then has
    ``proj_size`` units); such a layer runs the reference loop, not the fast path.
    """

    kind = "LSTM"
    n_states = 2

    def _step(self, gx, state, w_hh, b_hh, factors):
        return lstm_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity])

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse):
        gx = _input_projection_with_both_biases(x, w_ih, b_ih, b_hh)
        return lstm_sequence(gx, *state, w_hh, factors, self.nonlinearity, reverse)


class GRU(_RecurrentLayer):
    """Drop-in ``torch.nn.GRU`` with recurrent dropout; arguments as ``recdrop.LSTM``.

    ``"semeniuta"`` drops the candidate n_t (the paper's g_t, Eq. 13); ``"gal"`` drops h_{t-1} where
    it enters r, z and n; ``"moon"`` drops the new state h_t, which is carried dropped.
    Deviation: the reset gate sits where torch.nn puts it (see ``recdrop.cells``).
    """

    kind = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, **kwargs):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, **kwargs)

    def _step(self, gx, state, w_hh, b_hh, factors):
        return (gru_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity]),)

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse):
        # b_hn sits inside r * (W_hn h + b_hn): b_hh stays with the recurrence
        return gru_sequence(F.linear(x, w_ih, b_ih), *state, w_hh, b_hh, factors, self.nonlinearity, reverse)


class RNN(_RecurrentLayer):
    """Drop-in ``torch.nn.RNN`` (Eq. 1) with recurrent dropout.

    ``scheme``: ``"semeniuta"`` (default) and ``"gal"`` both apply Eq. 2, d(h_{t-1}) where it
    re-enters the cell: for a vanilla RNN, the paper's recurrent dropout. ``"moon"`` drops h_t
    itself (the output and the carried state). ``"gal+semeniuta"`` is not accepted.
    """

    kind = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None, **kwargs):
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, nonlinearity=nonlinearity, **kwargs)

    def _step(self, gx, state, w_hh, b_hh, factors):
        return (rnn_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity]),)

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse):
        gx = _input_projection_with_both_biases(x, w_ih, b_ih, b_hh)
        return rnn_sequence(gx, *state, w_hh, factors, self.nonlinearity, reverse)
