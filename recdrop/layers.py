"""Multi-layer RNN, LSTM and GRU with recurrent dropout, drop-in for torch.nn (paper Section 3).

Subclasses of ``torch.nn.LSTM`` / ``GRU`` / ``RNN``: the same constructor arguments, forward
signature, shapes, return values and parameter names; the keyword-only arguments
``recurrent_dropout``, ``scheme``, ``sampling`` and ``scaling`` add the paper's recurrent dropout
(see ``recdrop.masks``). Every layer and direction draws its own masks. Where no recurrent dropout
acts (``recurrent_dropout=0``, or ``eval()`` with inverted scaling), forward is torch.nn's own, with
the exceptions ``_torch_computes_it`` lists (a nonlinearity torch.nn lacks, torch.compile, a functorch
transform, dropout between layers drawn from the layer's ``generator``, ``torch_kernels = False``) and a
call given masks.

Speed: the input projections W_ih x_t of all time steps are one matmul before the time loop (as
cuDNN does); only the recurrent matmul and the elementwise gate math run per step.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import numbers
import sys
import warnings
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from . import cpu_kernels, graphs, route, triton_kernels
from .cells import (ACTIVATIONS, CELL_SCHEMES, NONLINEARITY, check_activation, gru_step, lstm_step, rnn_step, states_of,
                    without_generator)
from .fused import autocast_on, gru_sequence, linear, lstm_sequence, plain_ops_needed, rnn_sequence, transformed
from .masks import DropoutSettings, GroupDropout, RecurrentDropout, StepFactors, stack_directions
from .route import Route

Masks = List[Dict[str, Tensor]]


def _input_projection_with_both_biases(x: Tensor, w_ih: Tensor, b_ih: Optional[Tensor],
                                        b_hh: Optional[Tensor]) -> Tensor:
    """W_ih x + b_ih + b_hh for all steps in one matmul (LSTM, RNN: b_hh sits outside any gate product)."""
    return linear(x, w_ih, b_ih if b_hh is None else b_ih + b_hh)


class RecurrentLayer(DropoutSettings, nn.RNNBase):
    """The layers' shared body. Each layer is a subclass of its torch.nn twin (``isinstance(m,
    nn.LSTM)``), built by torch.nn's own constructor: the same parameters, names, init, attributes
    (``mode``, ``_flat_weights``, ``all_weights``) and checks. Where no recurrent dropout acts
    (``recurrent_dropout=0``, or ``eval()`` with inverted scaling), ``forward`` is torch.nn's own (cuDNN,
    oneDNN), but for the exceptions ``_torch_computes_it`` lists and a call given masks. Otherwise each
    subclass says how one direction runs (``_step`` on the reference path, ``_sequence`` on the fast path)."""

    kind = ""
    n_states = 1  # h_t; the LSTM carries (h_t, c_t)
    fused = True  # the fast path of recdrop.fused where it can run (plain_ops_needed); False: always the loop
    torch_kernels = True  # where no recurrent dropout acts, torch.nn's forward; False: recdrop's own there too
    generator: Optional[torch.Generator] = None  # draws the masks; None: torch's global one (a run's own in a group)
    has_triton = True  # whether its fused sequence has Triton kernels for its pointwise parts
    has_cpu_kernels = True  # and C++ kernels (``recdrop.cpu_kernels``)
    last_route: Optional[Route] = None  # the path of its last call (``route``), which the trainer records
    nonlinearity = NONLINEARITY

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None, *, nonlinearity: str = "tanh",
                 recurrent_dropout: float = 0.0, scheme: str = "semeniuta", sampling: str = "per-step",
                 scaling: str = "inverted"):
        for name, value in (("num_layers", num_layers), ("proj_size", proj_size)):  # torch.nn checks their range
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} should be of type int, got: {type(value).__name__}")
        check_activation(nonlinearity)
        rdrop = RecurrentDropout(recurrent_dropout, scheme, sampling, scaling, CELL_SCHEMES[self.kind])
        nn.RNNBase.__init__(self, self.mode_for(nonlinearity), input_size, hidden_size, num_layers, bias, batch_first,
                            dropout, bidirectional, proj_size, device, dtype)
        self.nonlinearity = nonlinearity
        self.rdrop = rdrop
        self.num_directions = 2 if bidirectional else 1

    def mode_for(self, nonlinearity: str) -> str:
        """torch.nn's name of this layer's computation (RNNBase.mode)."""
        return f"RNN_{nonlinearity.upper()}" if self.kind == "RNN" else self.kind

    @property
    def output_size(self) -> int:
        """The size of h_t: ``proj_size`` where the LSTM projects it, else ``hidden_size``."""
        return self.proj_size or self.hidden_size

    def __getstate__(self):
        """The module's state less ``last_route``, a note of its last call, not of what it is, and less its
        ``generator`` (``cells.without_generator``): a pickled layer holds only what
        ``torch.load(weights_only=True)`` accepts."""
        state = without_generator(super().__getstate__())  # torch.nn's: its weight references dropped
        state.pop("last_route", None)
        return state

    def __setstate__(self, state):
        """A pickled state without torch.nn's bookkeeping (``_all_weights``, ``mode``, ``_flat_weights``), as a
        layer that was not a torch.nn subclass pickled it, gets it rebuilt from its weights' names."""
        if "_all_weights" not in state:
            per = (4 if state["bias"] else 2) + (1 if state.get("proj_size") else 0)
            names = state["_flat_weights_names"]
            state = {**state, "_all_weights": [names[i:i + per] for i in range(0, len(names), per)],
                     "mode": self.mode_for(state.get("nonlinearity", "tanh")),
                     "_flat_weights": [state["_parameters"][n] for n in names]}
        super().__setstate__(state)

    def _torch_computes_it(self, x: Tensor) -> bool:
        """Whether this call runs torch.nn's forward: ``torch_kernels`` is on, no recurrent dropout acts,
        the nonlinearity is one torch.nn has (its LSTM and GRU have only tanh), and neither torch.compile
        (where AOTAutograd fails on torch.nn's LSTM in eval) nor a functorch transform (torch.nn's LSTM has
        no vmap rule) is at work: there recdrop's plain ops run. Nor where the dropout between stacked layers acts and
        is to be drawn from the layer's ``generator``, which torch.nn's forward cannot take."""
        own_between = self.generator is not None and self.dropout > 0 and self.training and self.num_layers > 1
        return (self.torch_kernels and not self.rdrop.acts(self.training) and not own_between
                and (self.kind == "RNN" or self.nonlinearity == "tanh")
                and not torch.compiler.is_compiling() and not transformed(x))

    def route(self, x: Tensor, weights: Optional[Tuple[Optional[Tensor], ...]] = None,
              state: Tuple[Tensor, ...] = (), own: bool = False) -> Optional[Route]:
        """The path a call over ``x`` runs (``recdrop.route``), chosen here and nowhere else:
        torch.nn's forward where it computes the call (``_torch_computes_it``; not where the caller runs
        recdrop's own code, ``own``: given masks, a group); else, for one direction's ``weights``
        (``layer_weights``; a group's stacked ``(R, ...)``) and ``state``, recdrop's fused sequence where it can
        run (not under ``plain_ops_needed``, nor with a projection or ``fused = False``; under autocast too,
        its products in autocast's dtype), with Triton for an LSTM or GRU, one run's or a group's, where
        ``triton_kernels.usable``, else with C++ for an LSTM or GRU where ``cpu_kernels.usable``, and its loops as
        CUDA graphs where ``graphs.loop_graphed``; else the reference loop. Without ``weights``, None where
        recdrop's own code runs (each direction's route is chosen with its weights)."""
        if not own and self._torch_computes_it(x):
            return Route("torch.nn")
        if weights is None:
            return None
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        runs = w_hh.shape[0] if w_hh.dim() == 3 else 1
        if not self.fused or w_hr is not None or plain_ops_needed(x, w_ih, w_hh, b_ih, b_hh, *state):
            return Route("loop", runs=runs)
        triton = self.has_triton and triton_kernels.usable(x)
        cpp = self.has_cpu_kernels and not triton and cpu_kernels.usable(x)
        batch = x.shape[-2] if x.dim() > 1 else 1  # (T, [runs,] B, I) from the layer's calls; else one sequence
        work = runs * batch * self.hidden_size * w_hh.shape[-2]  # a step's product (``graphs.step_work``)
        return Route("fused", triton, graphs.loop_graphed((x,), work), runs, cpp)

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
        "gal", H is ``proj_size`` where there is a projection: it drops h_{t-1}). Drawn from the ``generator``
        given, else from the layer's own where one is set (as its forward draws them), else from torch's global one."""
        for name, n in (("seq_len", seq_len), ("batch_size", batch_size)):
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                raise ValueError(f"draw_masks: {name} must be an integer, 0 or more, got {n!r}")
        return self._draw_masks(seq_len, batch_size, device, dtype, self.generator if generator is None else generator)

    def _draw_masks(self, steps, batch, device=None, dtype=None, generator=None) -> Masks:
        """``draw_masks`` for a forward call's own sizes (symbolic or traced under torch.compile or jit.trace)."""
        shapes = self._mask_shapes(steps, batch)
        return [self.rdrop.draw(shapes, device, dtype, generator) for _ in range(self.num_layers * self.num_directions)]

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
        given raw 0/1 masks, in the layout of ``draw_masks``, in training; in eval they are not applied,
        and a warning says so."""
        if torch.compiler.is_compiling() or "torch._dynamo" not in sys.modules:
            return self._forward(input, hx, masks)  # Dynamo traces the layer (``allow_rnn``), or nothing can
        # Run eagerly, every frame below too: where Dynamo skips an RNN module (its default), it would
        # still compile the helpers this forward calls, each a frame of its own, and there the plain
        # per-step loop would run (``plain_ops_needed``) in place of the fast path.
        return eager_forward()(self, input, hx, masks)

    def _forward(self, input: Tensor, hx, masks: Optional[Masks]):
        if not isinstance(input, (Tensor, PackedSequence)):
            raise TypeError(f"input must be a torch.Tensor or a PackedSequence, got {type(input).__name__}")
        packed = isinstance(input, PackedSequence)
        data = input.data if packed else input
        if self.route(data, own=masks is not None) is not None:  # torch.nn's
            self._check_as_recdrop_does(input, hx)
            self.last_route = Route("torch.nn")
            return super(RecurrentLayer, self).forward(input, hx)  # torch.nn's forward: cuDNN, oneDNN
        if torch.jit.is_tracing():  # torch.nn's forward traces as one op; recdrop's own loop as its steps
            steps = (input.batch_sizes.numel() if packed
                     else data.shape[-2] if self.batch_first else data.shape[0])
            warnings.warn(f"recdrop.{type(self).__name__}: a trace of its own forward (as where recurrent dropout "
                          f"acts) unrolls the loop over the traced input's {steps} steps; the traced module runs "
                          "inputs of that length only", torch.jit.TracerWarning, stacklevel=3)
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx, masks)
        x, hx, batched = self._check_input(input, hx)
        masks = self.masks_for(x, masks)
        x, state = self._run_layers(x, hx, masks, self._run_direction, self._run_both_directions)
        output = x.transpose(0, 1) if self.batch_first and batched else x  # unbatched input has no batch dim
        if not batched:
            output = output.squeeze(1)
            state = tuple(s.squeeze(1) for s in state)
        return output, (state if self.n_states == 2 else state[0])

    def _check_as_recdrop_does(self, input, hx) -> None:
        """Before torch.nn's forward: what recdrop's own code checks (``_check_input``, ``_forward_packed``), so
        that one bad input gets one error whether or not recurrent dropout acts (torch.nn's kernels fail on
        these deep inside, or not at all)."""
        packed = isinstance(input, PackedSequence)
        data = input.data if packed else input
        if packed:
            self.check_input(data, input.batch_sizes)  # torch.nn's check, which its packed forward skips
        if hx is not None:  # a pack's states by its batch too, which torch.nn's packed LSTM does not check
            shapes = self._state_shapes(int(input.batch_sizes[0])) if packed and not route.ops_recorded() else None
            self._check_states(states_of(hx, self.n_states), data, shapes)

    def masks_for(self, x: Tensor, masks: Optional[Masks]) -> Optional[Masks]:
        """The masks of a forward call over ``x`` (T, B, ...): the given ones, checked, or fresh ones
        drawn when training with recurrent dropout; None otherwise."""
        steps, batch = x.shape[0], x.shape[1]
        if masks is not None:
            self._check_masks(masks, steps, batch)
            return [{t: m.to(x) for t, m in k.items()} for k in masks]  # given ones act in the input's dtype
        if self.training and self.rdrop.targets:
            return self._draw_masks(steps, batch, x.device, x.dtype, self.generator)
        return None

    def _run_layers(self, x: Tensor, hx: Tuple[Tensor, ...], masks: Optional[Masks], run_direction,
                    run_both=None):
        """Every layer and direction over ``x`` (time-major) with ``run_direction(x, state, layer,
        reverse, masks)``, or both directions at once with ``run_both(x, states, layer, masks)`` where it
        is given and runs them (not None), dropout between layers; the last layer's output and (h_n[, c_n])."""
        finals: List[List[Tensor]] = [[] for _ in range(self.n_states)]  # h_n (and c_n) per layer and direction
        for layer in range(self.num_layers):
            ks = [layer * self.num_directions + d for d in range(self.num_directions)]
            states = [tuple(s[k] for s in hx) for k in ks]
            layer_masks = [None if masks is None else masks[k] for k in ks]
            results = run_both(x, states, layer, layer_masks) if run_both and len(ks) == 2 else None
            if results is None:
                results = [run_direction(x, state, layer, d == 1, m)
                           for d, (state, m) in enumerate(zip(states, layer_masks))]
            for _, state in results:
                for final, s in zip(finals, state):
                    final.append(s)
            x = results[0][0] if len(results) == 1 else torch.cat([out for out, _ in results], dim=-1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = inverted_dropout(x, self.dropout, self.generator)
        return x, tuple(torch.stack(final) for final in finals)

    def _run_both_directions(self, x: Tensor, states: List[Tuple[Tensor, ...]], layer: int,
                             masks: List[Optional[Dict[str, Tensor]]]):
        """Both directions of ``layer`` over ``x`` as one group of two, the reverse direction's input
        flipped in time (``run_weights``, their weights stacked): one product and one set of pointwise
        ops a step for both, where a direction's step on its own is bound by its ops' fixed cost. Each
        direction computes what it computes alone, with its own masks, indexed by processing step as
        alone. [(outputs, final state)] of each direction, or None where the fast path cannot run them."""
        weights = tuple(None if w is None else torch.stack([w, w_reverse])
                        for w, w_reverse in zip(self.layer_weights(layer, False), self.layer_weights(layer, True)))
        both = torch.stack([x, x.flip(0)], 1)  # (T, 2, B, I)
        state = tuple(torch.stack(s) for s in zip(*states))  # (2, B, H) each
        chosen = self.route(both, weights, state, own=True)
        if chosen.body != "fused":
            return None
        per_step = self.rdrop.sampling == "per-step"
        factors = [self.rdrop.factors(m, self.training, per_step=per_step) for m in masks]
        ys, final = self.run_weights(both, state, weights, stack_directions(factors), False)
        self.last_route = dataclasses.replace(chosen, runs=1)  # one run: its two directions stacked
        return [(ys[:, 0], tuple(f[0] for f in final)), (ys[:, 1].flip(0), tuple(f[1] for f in final))]

    # -- packed sequences -------------------------------------------------------------------------
    def _forward_packed(self, packed: PackedSequence, hx, masks: Optional[Masks]):
        """A PackedSequence in and out, as torch.nn. Sequences are run in the pack's order (longest
        first), each direction in one call over the padded batch (with relu, in stretches:
        ``_run_packed_direction``), so that
        padding takes no part: nothing past a sequence's end reaches an output, a state or a gradient,
        the reverse direction starts at each sequence's own end, and h_n is each sequence's state at
        its own end. Masks (given or drawn) are laid out as for a padded batch
        of the original order, ``draw_masks(T, B)``, and a sequence uses its first ``length`` steps."""
        sorted_idx, unsorted_idx = packed.sorted_indices, packed.unsorted_indices
        x, lengths = pad_packed_sequence(PackedSequence(packed.data, packed.batch_sizes))  # (T, B, in), sorted
        batch = x.shape[1]
        if hx is None:
            hx = tuple(x.new_zeros(shape) for shape in self._state_shapes(batch))
        else:
            hx = states_of(hx, self.n_states)
            self._check_states(hx, x, self._state_shapes(batch))  # before the sort, which reads any batch
            hx = tuple(s if sorted_idx is None else s.index_select(1, sorted_idx) for s in hx)
        # torch.nn's checks, on the padded batch: the pack's would read its batch size on the host (Tensor.item)
        self.check_forward_args(x.transpose(0, 1) if self.batch_first else x, hx if self.n_states == 2 else hx[0], None)
        masks = self.masks_for(x, masks)
        if masks is not None and sorted_idx is not None:  # into the pack's order
            masks = [{t: m.index_select(m.dim() - 2, sorted_idx) for t, m in d.items()} for d in masks]
        x, state = self._run_layers(x, hx, masks, functools.partial(self._run_packed_direction, lengths=lengths,
                                                                    sizes=packed.batch_sizes))
        data = pack_padded_sequence(x, lengths).data
        if unsorted_idx is not None:
            state = tuple(st.index_select(1, unsorted_idx) for st in state)
        output = PackedSequence(data, packed.batch_sizes, sorted_idx, unsorted_idx)
        return output, (state if self.n_states == 2 else state[0])

    def _run_packed_direction(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                              masks: Optional[Dict[str, Tensor]], *, lengths: Tensor, sizes: Tensor):
        """One direction over sequences sorted longest first: ``x`` is reversed within each sequence for
        the reverse direction (so that every sequence starts at its own end), then run over the padded
        batch, each sequence's outputs kept up to its end and its final state taken there. The steps past
        an end compute on padding and take no part: nothing of them reaches an output, a final state or a
        gradient. A bounded nonlinearity (tanh) runs in one call (``_run_to_each_end``); an unbounded one
        (relu), whose padding steps could overflow, in stretches of steps over which the same sequences go
        on (``_run_in_stretches``)."""
        if reverse:
            x = _reverse_within(x, lengths)
        run = self._run_to_each_end if self.nonlinearity == "tanh" else self._run_in_stretches
        out, final = run(x, state, layer, reverse, masks, lengths, sizes)
        return (_reverse_within(out, lengths) if reverse else out), final

    def _run_to_each_end(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                         masks: Optional[Dict[str, Tensor]], lengths: Tensor, sizes: Tensor):
        """``_run_packed_direction``'s one call over the padded batch: the outputs, padding zeroed past each
        sequence's end, and the final state at each end (h_t from the outputs, the LSTM's c_t from every
        step's)."""
        out, _, cs = self._run_direction(x, state, layer, reverse, masks, in_order=True, cells=True)
        ends = (lengths.to(x.device) - 1).view(1, -1, 1)
        final = tuple(s.gather(0, ends.expand(1, -1, s.shape[-1]))[0] for s in (out, cs)[:self.n_states])
        steps = torch.arange(x.shape[0], device=x.device).view(-1, 1, 1)
        return torch.where(steps < ends + 1, out, out.new_zeros(())), final  # padding stays padding

    def _run_in_stretches(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                          masks: Optional[Dict[str, Tensor]], lengths: Tensor, sizes: Tensor):
        """``_run_packed_direction`` in stretches of steps over which the pack's batch size stays the same
        (``sizes``, read on the host): each stretch runs only the sequences still going, and those that end
        with it leave their final state."""
        steps, batch, sizes = x.shape[0], x.shape[1], sizes.tolist()
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
        final = tuple(torch.cat([e[i] for e in reversed(ends)]) for i in range(self.n_states))
        return torch.cat(pieces), final

    def _run_direction(self, x: Tensor, state: Tuple[Tensor, ...], layer: int, reverse: bool,
                       masks: Optional[Dict[str, Tensor]], in_order: bool = False, cells: bool = False):
        """One direction of ``layer`` (its reverse weights if ``reverse``) over ``x``, last step first if
        ``reverse``, or in the given order with ``in_order`` (``x`` already reversed, as for packed input);
        with ``cells``, the LSTM's cell state of every step as well (``run_weights``)."""
        factors = self.rdrop.factors(masks, self.training, per_step=self.rdrop.sampling == "per-step")
        return self.run_weights(x, state, self.layer_weights(layer, reverse), factors, reverse and not in_order, cells)

    def layer_weights(self, layer: int, reverse: bool) -> Tuple[Optional[Tensor], ...]:
        """(w_ih, w_hh, b_ih, b_hh, w_hr) of one direction of ``layer``, None where the layer has none."""
        sfx = "_reverse" if reverse else ""
        return (getattr(self, f"weight_ih_l{layer}{sfx}"), getattr(self, f"weight_hh_l{layer}{sfx}"),
                getattr(self, f"bias_ih_l{layer}{sfx}") if self.bias else None,
                getattr(self, f"bias_hh_l{layer}{sfx}") if self.bias else None,
                getattr(self, f"weight_hr_l{layer}{sfx}") if self.proj_size else None)

    def run_weights(self, x: Tensor, state: Tuple[Tensor, ...], weights: Tuple[Optional[Tensor], ...],
                     factors: StepFactors, backwards: bool, cells: bool = False):
        """One direction over ``x`` with ``weights`` (``layer_weights``: one run's, or a group's stacked on a
        leading run dimension, ``run_group``) and the step ``factors``; last step first if
        ``backwards``. The fast path where it can run, else the reference loop. Returns the outputs
        and the final state, and with ``cells`` the LSTM's cell state of every step (else None)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        chosen = self.last_route = self.route(x, weights, state, own=True)
        if chosen.body == "fused":
            out = self._sequence(x, state, w_ih, w_hh, b_ih, b_hh, factors, backwards, cells, chosen.step_kernels)
            return out if not cells else out if len(out) == 3 else (*out, None)
        gx = F.linear(x, w_ih, b_ih) if w_ih.dim() == 2 else linear(x, w_ih, b_ih)  # (T, B, G*H): one matmul
        steps = x.shape[0]
        order = range(steps - 1, -1, -1) if backwards else range(steps)
        outs: List[Optional[Tensor]] = [None] * steps
        cs: List[Optional[Tensor]] = [None] * steps
        for k, t in enumerate(order):  # masks are indexed by processing step k
            state = self._step(gx[t], state, w_hh, b_hh, factors.at(k))
            if w_hr is not None:  # the LSTM's projection (proj_size): h_t = W_hr (o_t * f(c_t))
                state = (F.linear(state[0], w_hr), *state[1:])
            outs[t], cs[t] = state[0], state[-1]
        if not cells:
            return torch.stack(outs), state
        return torch.stack(outs), state, (torch.stack(cs) if self.n_states == 2 else None)

    def _step(self, gx: Tensor, state: Tuple[Tensor, ...], w_hh: Tensor, b_hh: Optional[Tensor],
              factors) -> Tuple[Tensor, ...]:
        """The reference path: one step of ``recdrop.cells`` from ``gx = W_ih x_t + b_ih``; the new state."""
        raise NotImplementedError

    def _sequence(self, x: Tensor, state: Tuple[Tensor, ...], w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor],
                  b_hh: Optional[Tensor], factors: StepFactors, reverse: bool, cells: bool = False,
                  kernels: Optional[str] = None):
        """The fast path: the whole direction through ``recdrop.fused`` (its pointwise parts in the ``kernels``
        of ``route``, "triton" or "cpp"); outputs and final state (and with ``cells``, the LSTM's cell state of
        every step)."""
        raise NotImplementedError

    # -- input checks -----------------------------------------------------------------------------
    def _check_input(self, input: Tensor, hx):
        """torch.nn's checks, with its errors, then ``x`` time-major and batched, the initial states
        as a tuple, and whether ``input`` was batched."""
        if input.dim() not in (2, 3):
            noun = " tensor" if self.kind == "RNN" else ""  # torch.nn's words differ by layer
            raise ValueError(f"{self.kind}: Expected input to be 2D or 3D, got {input.dim()}D{noun} instead")
        batched = input.dim() == 3
        x = input if batched else input.unsqueeze(0 if self.batch_first else 1)
        states = None if hx is None else states_of(hx, self.n_states)
        if states is not None and any(s.dim() != input.dim() for s in states):
            got = (f"({states[0].dim()}-D, {states[1].dim()}-D) tensors" if self.n_states == 2  # torch.nn's words
                   else f"{states[0].dim()}-D tensor")
            states_named = "hx and cx" if self.n_states == 2 else "hx"
            raise RuntimeError(f"For {'batched 3-D' if batched else 'unbatched 2-D'} input, {states_named} should also "
                               f"be {input.dim()}-D but got {got}")
        if states is not None and not batched:
            states = tuple(s.unsqueeze(1) for s in states)
        if states is None:
            states = tuple(x.new_zeros(shape) for shape in self._state_shapes(x.shape[0 if self.batch_first else 1]))
        self.check_forward_args(x, states if self.n_states == 2 else states[0], None)  # torch.nn's: sizes, dtype
        self._check_states(states, x, None)
        x = x.transpose(0, 1) if self.batch_first else x
        if x.shape[0] == 0:  # torch.nn's kernels refuse an empty sequence (an empty batch they accept)
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        return x, states, batched

    def _check_states(self, states: Tuple[Tensor, ...], x: Tensor, shapes) -> None:
        """The initial states against the input: each of ``shapes`` where given (torch.nn's message), and
        of the input's dtype, which torch.nn does not check (its kernels fail deep inside instead)."""
        for i, s in enumerate(states):
            if s.device != x.device:  # torch.nn's check and words (its kernels run it; recdrop's own code must)
                raise RuntimeError(f"Input and hidden tensors are not at the same device, found input tensor at "
                                   f"{x.device} and hidden tensor at {s.device}")
            if shapes is not None and tuple(s.shape) != shapes[i]:
                raise RuntimeError(f"Expected hidden size {shapes[i]}, got {list(s.shape)}")
            if s.dtype != x.dtype and not autocast_on(x.device.type):  # autocast casts them
                raise RuntimeError(f"hx must have the input's dtype, {x.dtype}; got {s.dtype}")

    def _check_masks(self, masks: Masks, steps: int, batch: int) -> None:
        n = self.num_layers * self.num_directions
        if not isinstance(masks, (list, tuple)) or len(masks) != n:
            raise ValueError(f"masks must be a list of {n} dicts (one per layer and direction)")
        shapes = self._mask_shapes(steps, batch)
        for m in masks:
            self.rdrop.check_masks(m, shapes)


def inverted_dropout(x: Tensor, p: float, generator: Optional[torch.Generator]) -> Tensor:
    """torch.nn's ``dropout`` (inverted, a fresh mask per element), between stacked layers and in the
    models' forward dropout (``models.ForwardDropout``): where a ``generator`` is set, drawn from it
    like the recurrent masks; else ``F.dropout``'s own draw."""
    if generator is None:
        return F.dropout(x, p, training=True)
    mask = torch.empty_like(x).bernoulli_(1 - p, generator=generator)  # drawn at p = 1 too, as a group draws it
    return x * mask / (1 - p) if p < 1 else x * mask  # p = 1: every element dropped, as F.dropout


@functools.lru_cache(maxsize=None)
def eager_forward():
    """``RecurrentLayer._forward`` kept from Dynamo (``torch.compiler.disable``), made at its first use: it
    imports Dynamo, which takes seconds, and a process that compiles nothing never needs it."""
    return torch.compiler.disable(RecurrentLayer._forward)


def _reverse_within(x: Tensor, lengths: Tensor) -> Tensor:
    """``x`` (T, B, ...) with each sequence's first ``lengths[b]`` steps in reverse order; padding stays."""
    t = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
    n = lengths.to(x.device).unsqueeze(0)
    idx = torch.where(t < n, n - 1 - t, t)
    return x.gather(0, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))


def _no_projection(kwargs: dict) -> None:
    """The GRU and RNN take no ``proj_size``, not even 0: torch.nn's error, not a TypeError."""
    if "proj_size" in kwargs:
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")


class LSTM(RecurrentLayer, nn.LSTM):
    """Drop-in ``torch.nn.LSTM`` with recurrent dropout; the step's equations are
    ``recdrop.cells.lstm_step``'s (Eqs. 4-9).

    Keyword-only:

    - ``recurrent_dropout``: the drop rate p, a number in [0, 1); 0 (the default) is off, and the
      layer is then torch.nn's LSTM (``scheme`` and the rest are kept but do nothing).
    - ``scheme``: what is dropped. ``"semeniuta"`` (default) the update g_t, c_t = f_t ⊙ c_{t-1} +
      i_t ⊙ d(g_t) (Eq. 9); ``"gal"`` h_{t-1} where it enters the gates and g_t (Eq. 7); ``"moon"``
      the new cell state c_t, which the next step receives dropped (Eq. 8); ``"gal+semeniuta"``
      both, with independent masks.
    - ``sampling``: ``"per-step"`` (default) draws a fresh mask at every step; ``"per-sequence"`` one
      mask per example and unit, kept over the whole sequence of a call.
    - ``scaling``: ``"inverted"`` (default) divides the kept units by 1-p while training and is the
      identity in ``eval()``, where the layer runs torch.nn's kernels (Eq. 18); ``"paper"`` keeps
      them as they are while training and multiplies by 1-p in ``eval()`` (Eq. 3), so recdrop's own
      code runs there too.
    - ``nonlinearity`` of g_t and c_t: ``"tanh"`` (default) or ``"relu"`` (recdrop's own code only).

    ``proj_size`` > 0 projects h_t = W_hr (o_t ⊙ f(c_t)) as torch.nn does (Gal's mask then has
    ``proj_size`` units); such a layer runs the reference loop, not the fast path. The masks are drawn
    from ``layer.generator`` where one is set (a ``torch.Generator`` on the input's device), else from
    torch's global generator; ``forward(..., masks=...)`` takes given 0/1 masks (``draw_masks``).
    ``torch.utils.checkpoint`` restores the global generator's state for its recomputation, not a
    layer's own: under it, leave ``generator`` unset or pass the masks.
    """

    kind = "LSTM"
    n_states = 2

    def _step(self, gx, state, w_hh, b_hh, factors):
        return lstm_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity])

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse, cells=False, kernels=None):
        gx = _input_projection_with_both_biases(x, w_ih, b_ih, b_hh)
        return lstm_sequence(gx, *state, w_hh, factors, self.nonlinearity, reverse, cells, kernels)


class GRU(RecurrentLayer, nn.GRU):
    """Drop-in ``torch.nn.GRU`` with recurrent dropout; its recurrent-dropout arguments are
    ``recdrop.LSTM``'s (it takes no ``proj_size``, as torch.nn's), the step's equations
    ``recdrop.cells.gru_step``'s (Eqs. 10-13).

    ``"semeniuta"`` drops the candidate n_t (the paper's g_t, Eq. 13); ``"gal"`` drops h_{t-1} where
    it enters r, z and n; ``"moon"`` drops the new state h_t, which is carried dropped.
    Deviation: the reset gate sits where torch.nn puts it (see ``recdrop.cells``).
    """

    kind = "GRU"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, *, nonlinearity: str = "tanh", recurrent_dropout: float = 0.0,
                 scheme: str = "semeniuta", sampling: str = "per-step", scaling: str = "inverted", **kwargs):
        _no_projection(kwargs)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, nonlinearity=nonlinearity, recurrent_dropout=recurrent_dropout,
                         scheme=scheme, sampling=sampling, scaling=scaling, **kwargs)

    def _step(self, gx, state, w_hh, b_hh, factors):
        return (gru_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity]),)

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse, cells=False, kernels=None):
        # b_hn sits inside r * (W_hn h + b_hn): b_hh stays with the recurrence
        return gru_sequence(linear(x, w_ih, b_ih), *state, w_hh, b_hh, factors, self.nonlinearity, reverse, kernels)


class RNN(RecurrentLayer, nn.RNN):
    """Drop-in ``torch.nn.RNN`` (Eq. 1) with recurrent dropout; its recurrent-dropout arguments are
    ``recdrop.LSTM``'s (it takes no ``proj_size``, as torch.nn's), the step's equation
    ``recdrop.cells.rnn_step``'s.

    ``scheme``: ``"semeniuta"`` (default) and ``"gal"`` both apply Eq. 2, d(h_{t-1}) where it
    re-enters the cell: for a vanilla RNN, the paper's recurrent dropout. ``"moon"`` drops h_t
    itself (the output and the carried state). ``"gal+semeniuta"`` is not accepted.
    """

    kind = "RNN"
    has_triton = has_cpu_kernels = False

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None, *, recurrent_dropout: float = 0.0,
                 scheme: str = "semeniuta", sampling: str = "per-step", scaling: str = "inverted", **kwargs):
        _no_projection(kwargs)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         0, device, dtype, nonlinearity=nonlinearity, recurrent_dropout=recurrent_dropout,
                         scheme=scheme, sampling=sampling, scaling=scaling, **kwargs)

    def _step(self, gx, state, w_hh, b_hh, factors):
        return (rnn_step(gx, *state, w_hh, b_hh, *factors, ACTIVATIONS[self.nonlinearity]),)

    def _sequence(self, x, state, w_ih, w_hh, b_ih, b_hh, factors, reverse, cells=False, kernels=None):
        gx = _input_projection_with_both_biases(x, w_ih, b_ih, b_hh)
        return rnn_sequence(gx, *state, w_hh, factors, self.nonlinearity, reverse)


def run_group(layers: List[RecurrentLayer], x: Tensor, hx: Tuple[Tensor, ...]):
    """The forward of each of ``layers`` on its own slice of ``x``, as one group: ``x``
    ``(T, R, B, input_size)`` time-major with a run dimension, ``hx`` the initial states ``(R, B, H)``
    (h_0, and c_0 for the LSTM) -> outputs ``(T, R, B, H)`` and the final states ``(R, B, H)``.

    The layers are one run's each: one unidirectional layer without projection, all of one kind,
    sizes, nonlinearity and mode (training or eval); each draws its own masks from its own
    ``generator`` as it does alone, and its weights are stacked at the call (autograd gives each its
    own gradient), where ``route.stacks``; on a CPU each runs its own forward. Each run's slice is what its
    layer computes alone on its slice (``tests/test_run_groups.py``)."""
    first = layers[0]
    for m in layers:
        if (type(m), m.input_size, m.hidden_size, m.bias, m.nonlinearity, m.training) != (
                type(first), first.input_size, first.hidden_size, first.bias, first.nonlinearity, first.training):
            raise ValueError("a group's layers must share their kind, sizes, bias, nonlinearity and mode; got "
                             f"{m!r} beside {first!r}")
        if m.num_layers != 1 or m.num_directions != 1 or m.proj_size or m.batch_first:
            raise ValueError(f"a group runs one-layer, one-direction, time-major layers without projection, got {m!r}")
    if x.dim() != 4 or x.shape[1] != len(layers):
        raise ValueError(f"a group of {len(layers)} layers needs inputs of shape (T, R, B, I) with R = {len(layers)}, "
                         f"got {tuple(x.shape)}")
    steps, batch = x.shape[0], x.shape[2]
    if not route.stacks(x.device):  # each layer's own forward: its weights, its kernels
        outs = [m(x[:, r], tuple(s[r:r + 1] for s in hx) if len(hx) == 2 else hx[0][r:r + 1])
                for r, m in enumerate(layers)]
        states = [st if isinstance(st, tuple) else (st,) for _, st in outs]
        return torch.stack([y for y, _ in outs], 1), tuple(torch.cat(s) for s in zip(*states))
    dropout = GroupDropout([m.rdrop for m in layers], [m.generator for m in layers], x.dtype, x.device, own=False)
    factors = dropout.factors(steps, batch, first.hidden_size, x, first.training)
    weights = tuple(None if w is None else torch.stack([m.layer_weights(0, False)[i] for m in layers])
                    for i, w in enumerate(first.layer_weights(0, False)))
    out = first.run_weights(x, tuple(hx), weights, factors, False)
    for m in layers:  # each ran on the group's path
        m.last_route = first.last_route
    return out
