"""Recurrent dropout masks: the dropout function d(.) of Eq. 3 (``eq:dropout``) and Eq. 18.

All masks of every scheme are drawn here, in one place. A mask is a 0/1 tensor drawn from
Bernoulli(1 - p), where ``p`` is always the *drop* rate (the paper's Eqs. 14-19 write p for the
keep probability; we never do).

Shapes: per-step masks are ``(T, B, H)`` (a fresh mask at every step, for every example and
unit); per-sequence masks are ``(B, H)`` (one per example, fixed over the sequence), as in the
authors' code.

Scaling:
- ``"inverted"`` (Eq. 18): mask / (1 - p) while training, identity at test.
- ``"paper"`` (Eq. 3): mask while training, times (1 - p) at test.
"""
from __future__ import annotations

import dataclasses
import numbers
import warnings
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import torch

from . import route

SCHEMES = ("semeniuta", "gal", "moon", "gal+semeniuta")
SAMPLINGS = ("per-step", "per-sequence")
SCALINGS = ("inverted", "paper")

# Which vector of the cell each scheme drops (the targets of d(.)):
#   gal       -> h_{t-1} where it enters the gates and the candidate (Eq. 7)
#   semeniuta -> the update vector g_t (Eq. 9 LSTM, Eq. 13 GRU)
#   moon      -> the cell state c_t (Eq. 8), or the GRU/RNN state h_t
SCHEME_TARGETS: Dict[str, Tuple[str, ...]] = {
    "semeniuta": ("semeniuta",),
    "gal": ("gal",),
    "moon": ("moon",),
    "gal+semeniuta": ("gal", "semeniuta"),
}

Factor = Union[torch.Tensor, float, None]
Shapes = Union[Tuple[int, ...], Dict[str, Tuple[int, ...]]]  # one mask shape, or one per target


def _shape_of(shapes: Shapes, target: str) -> Tuple[int, ...]:
    return tuple(shapes[target]) if isinstance(shapes, dict) else tuple(shapes)


def check_choice(name: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not valid; allowed values: {', '.join(map(repr, allowed))}")


def check_rate(name: str, p) -> float:
    """Return ``p`` as a float, or raise ValueError unless it is a number in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):  # as torch.nn's dropout: numpy's floats too
        raise ValueError(f"{name} must be a float in [0, 1), got {p!r}")
    if not 0.0 <= float(p) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p!r}")
    return float(p)


def _values_readable(t: torch.Tensor) -> bool:
    """Whether a check may read ``t``'s values: not where ops are recorded (``route.ops_recorded``) or
    captured in a CUDA graph, nor under a functorch transform, where a value is not defined."""
    return not (route.ops_recorded() or torch._C._are_functorch_transforms_active()
                or (t.is_cuda and torch.cuda.is_current_stream_capturing()))


def mask_shape(sampling: str, steps: int, batch: int, hidden: int) -> Tuple[int, ...]:
    """A mask's shape: ``(T, B, H)`` drawn per step, ``(B, H)`` per sequence."""
    return (steps, batch, hidden) if sampling == "per-step" else (batch, hidden)


@dataclass(frozen=True)
class RecurrentDropout:
    """What to drop, how often to draw its mask, and how to scale it.

    ``p`` is the drop rate in [0, 1). ``scheme`` names the dropped vector (see ``SCHEME_TARGETS``),
    ``sampling`` is ``"per-step"`` or ``"per-sequence"``, ``scaling`` is ``"inverted"`` (Eq. 18)
    or ``"paper"`` (Eq. 3).
    """

    p: float = 0.0
    scheme: str = "semeniuta"
    sampling: str = "per-step"
    scaling: str = "inverted"
    schemes: Tuple[str, ...] = SCHEMES  # the scheme names the owning cell accepts

    def __post_init__(self):
        object.__setattr__(self, "p", check_rate("recurrent_dropout", self.p))
        check_choice("scheme", self.scheme, self.schemes)
        check_choice("sampling", self.sampling, SAMPLINGS)
        check_choice("scaling", self.scaling, SCALINGS)

    def describe(self) -> str:
        """This dropout's part of a module's ``extra_repr``: empty when it is off."""
        if self.p == 0:
            return ""
        return (f", recurrent_dropout={self.p}, scheme={self.scheme!r}, sampling={self.sampling!r}, "
                f"scaling={self.scaling!r}")

    @property
    def targets(self) -> Tuple[str, ...]:
        return SCHEME_TARGETS[self.scheme] if self.p > 0 else ()

    def acts(self, training: bool) -> bool:
        """Whether d(.) changes anything: p > 0, and training or the ``paper`` scaling's (1 - p) at
        test (``factors`` is empty otherwise)."""
        return bool(self.targets) and (training or self.scaling == "paper")

    def mask_shape(self, steps: int, batch: int, hidden: int) -> Tuple[int, ...]:
        return mask_shape(self.sampling, steps, batch, hidden)

    def draw(self, shape: Shapes, device=None, dtype=None,
             generator: Optional[torch.Generator] = None) -> Dict[str, torch.Tensor]:
        """Draw raw 0/1 masks of ``shape`` (one for every target, or a dict target -> shape), one
        per target, all steps in one call.

        A unit is kept where a uniform draw in [0, 1) falls below 1 - p: Bernoulli(1 - p), drawn
        with the vectorised uniform generator (faster on a CPU than ``torch.bernoulli``)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"a mask generator must be a torch.Generator or None, got {type(generator).__name__}")
        dtype = dtype or torch.get_default_dtype()
        # generator=None is left out, not passed: Dynamo refuses it with symbolic shapes (torch.compile with
        # dynamic lengths), and without it torch.rand draws from the global generator all the same
        own = {} if generator is None else {"generator": generator}
        return {t: torch.rand(_shape_of(shape, t), device=device, dtype=dtype, **own).lt_(1.0 - self.p)
                for t in self.targets}  # in place: the uniforms' own buffer becomes the 0/1 mask

    def check_masks(self, masks: Dict[str, torch.Tensor], shape: Shapes, given: bool = True) -> None:
        """Raise ValueError unless ``masks`` has exactly this scheme's targets, each a tensor of ``shape``
        (one for every target, or a dict target -> shape) and, where a caller ``given`` them, of 0s and
        1s: d(.) scales them itself (``scaling``)."""
        if not isinstance(masks, dict) or set(masks) != set(self.targets):
            got = sorted(masks) if isinstance(masks, dict) else type(masks).__name__
            raise ValueError(f"masks must be a dict with keys {sorted(self.targets)} for scheme={self.scheme!r} "
                             f"and recurrent_dropout={self.p}, got {got}")
        for name, m in masks.items():
            if not isinstance(m, torch.Tensor):
                raise ValueError(f"masks[{name!r}] must be a torch.Tensor of 0s and 1s, got {type(m).__name__}")
            if tuple(m.shape) != _shape_of(shape, name):
                raise ValueError(f"masks[{name!r}] must have shape {_shape_of(shape, name)} for "
                                 f"sampling={self.sampling!r}, got {tuple(m.shape)}")
            if given and _values_readable(m) and not ((m == 0) | (m == 1)).all():
                other = m[(m != 0) & (m != 1)].flatten()[0].item()
                raise ValueError(f"masks[{name!r}] must hold only 0s and 1s (raw masks: the layer scales them "
                                 f"by scaling={self.scaling!r}), got {other}")

    def factors(self, masks: Optional[Dict[str, torch.Tensor]], training: bool,
                per_step: bool) -> "StepFactors":
        """The multipliers d(.) applies, per target: scaled masks when training, a constant at test.

        ``per_step``: the masks have a leading time axis to index at every step.
        """
        if not self.targets:
            return StepFactors({}, per_step=False)
        if training:
            if masks is None:
                raise ValueError("masks are required while training with recurrent_dropout > 0")
            if self.scaling == "inverted":  # Eq. 18
                masks = {k: m / (1.0 - self.p) for k, m in masks.items()}
            return StepFactors(masks, per_step=per_step)
        # Only a caller gives masks in eval (a layer draws them in training only). Not under torch.compile,
        # where a warning would break the graph.
        if masks is not None and not torch.compiler.is_compiling():
            warnings.warn("masks given in eval mode are not applied: masks act in training only, and the test "
                          "phase is Eq. 3's (call .train() to apply them)", UserWarning)
        if self.scaling == "paper":  # Eq. 3, test phase: (1 - p) x
            return StepFactors({t: 1.0 - self.p for t in self.targets}, per_step=False)
        return StepFactors({}, per_step=False)


def factor_at(factor: Factor, t: int, per_step: bool) -> Factor:
    """The factor of step ``t``: a per-step mask's slice, else the factor itself (a per-sequence
    mask, the test-time constant, or None)."""
    if per_step and isinstance(factor, torch.Tensor):
        return factor[t]
    return factor


class StepFactors:
    """Per-step access to the factors of each target: ``f.at(t)`` -> (gal, semeniuta, moon)."""

    __slots__ = ("gal", "semeniuta", "moon", "per_step")

    def __init__(self, factors: Dict[str, Factor], per_step: bool):
        self.gal = factors.get("gal")
        self.semeniuta = factors.get("semeniuta")
        self.moon = factors.get("moon")
        self.per_step = per_step

    def at(self, t: int) -> Tuple[Factor, Factor, Factor]:
        return tuple(factor_at(f, t, self.per_step) for f in (self.gal, self.semeniuta, self.moon))


TARGETS = ("gal", "semeniuta", "moon")  # StepFactors' order


def stack_directions(factors: Sequence[StepFactors]) -> StepFactors:
    """The factors of one layer's directions (one ``RecurrentDropout``, so of one kind each) stacked on a
    leading run dimension, for both directions run as a group of two: per target, masks ``(T, 2, B, H)``
    per step or ``(2, B, H)`` per sequence; a test-time constant or None as it is."""
    stacked: Dict[str, Factor] = {}
    for t in TARGETS:
        found = [getattr(f, t) for f in factors]
        if isinstance(found[0], torch.Tensor):
            stacked[t] = torch.stack(found, 1 if factors[0].per_step else 0)
        elif found[0] is not None:
            stacked[t] = found[0]
    return StepFactors(stacked, per_step=factors[0].per_step)


class RunDraws:
    """One kind of mask of every run of a group, drawn from each run's own generator into its slice of
    one buffer ``(R, *shape)``, as the run draws it alone: ``uniform`` draws U[0, 1) and keeps a unit
    where it falls below 1 - p (``RecurrentDropout.draw``), ``bernoulli`` draws Bernoulli(1 - p)
    (``models.ForwardDropout``). A run that does not draw keeps every unit. ``runs`` are (r, p,
    generator) of the runs that draw; with ``own`` each must have a generator of its own (so that it
    draws what it draws alone), else a run without one draws from torch's global generator. The buffer
    of a shape is made once, so that a CUDA graph of the step replays the draws into it."""

    def __init__(self, runs: Sequence[Tuple[int, float, Optional[torch.Generator]]], how: str, n_runs: int,
                 own: bool = True):
        self.runs, self.how, self.n_runs, self.own = list(runs), how, n_runs, own
        self.buffers: Dict[tuple, tuple] = {}

    def __bool__(self) -> bool:
        return bool(self.runs)

    def masks(self, shape: Tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """The 0/1 masks ``(R, *shape)`` of this step, in ``like``'s dtype and device."""
        key = (shape, like.dtype, like.device)
        if key not in self.buffers:
            if self.own and any(g is None for _, _, g in self.runs):
                raise ValueError("each model of a stacked group draws its masks from its own generator "
                                 "(models.set_generator)")
            fill = 0.0 if self.how == "uniform" else 1.0  # a run that does not draw keeps every unit
            buffer = like.new_full((self.n_runs, *shape), fill)
            keep = None
            if self.how == "uniform":
                keep = like.new_ones((self.n_runs,) + (1,) * len(shape))
                for r, p, _ in self.runs:
                    keep[r] = 1.0 - p
            self.buffers[key] = buffer, keep, [(buffer[r], p, g) for r, p, g in self.runs]  # the slices made once
        buffer, keep, slices = self.buffers[key]
        for row, p, g in slices:
            own = {} if g is None else {"generator": g}
            if self.how == "uniform":
                row.uniform_(**own)  # torch.rand's own draw, into the run's slice
            else:
                row.bernoulli_(1.0 - p, **own)
        return buffer if keep is None else (buffer < keep).to(like.dtype)


class GroupDropout:
    """The recurrent dropout d(.) of each run of a group (Eqs. 3, 7-9, 18), stacked on a leading run
    dimension so that one step of the group applies each run's own: ``rdrops[r]`` is run r's, its masks
    drawn from ``generators[r]`` as the run draws them alone (``RunDraws``, with ``own``); the constants
    are made in ``dtype`` on ``device`` once, since a CUDA graph cannot copy them from the host."""

    def __init__(self, rdrops: Sequence[RecurrentDropout], generators: Sequence[Optional[torch.Generator]],
                 dtype: torch.dtype, device, own: bool = True):
        for d in rdrops:  # each run draws its targets in this order alone, the group in TARGETS' order
            if list(d.targets) != [t for t in TARGETS if t in d.targets]:
                raise ValueError(f"a group draws the recurrent masks in the order {TARGETS}, got {d.targets}")
        R = len(rdrops)
        self.draws = {(t, s): RunDraws([(r, d.p, g) for r, (d, g) in enumerate(zip(rdrops, generators))
                                        if t in d.targets and d.sampling == s], "uniform", R, own)
                      for t in TARGETS for s in SAMPLINGS}
        self.order = [key for key, draws in self.draws.items() if draws]

        def per_run(t: str, scaling: str) -> Optional[torch.Tensor]:
            if not any(t in d.targets and d.scaling == scaling for d in rdrops):
                return None
            return torch.tensor([1.0 - d.p if t in d.targets and d.scaling == scaling else 1.0 for d in rdrops],
                                dtype=dtype, device=device)
        # per target, each run's divisor of its mask while training (1 - p where it scales inverted, Eq. 18)
        # and its factor at test (1 - p where it scales as the paper, Eq. 3)
        self.train_divisors = {t: per_run(t, "inverted") for t in TARGETS}
        self.test_factors = {t: f.view(R, 1, 1) for t in TARGETS if (f := per_run(t, "paper")) is not None}

    def factors(self, steps: int, batch: int, hidden: int, like: torch.Tensor, training: bool) -> StepFactors:
        """Each run's d(.) (``RecurrentDropout.factors``) stacked on the run dimension: per target,
        ``(T, R, B, H)`` where some run draws a mask per step, ``(R, B, H)`` where some run draws one per
        sequence only, ``(R, 1, 1)`` constants at test (Eq. 3's 1 - p under the ``paper`` scaling); a run
        that does not drop a target multiplies it by 1, and a target no run drops is None."""
        if not training:
            return StepFactors(self.test_factors, per_step=False)
        drawn = {}
        for t, s in self.order:  # each run's generator advances as it does alone
            drawn[(t, s)] = self.draws[(t, s)].masks(mask_shape(s, steps, batch, hidden), like)
        per_step = any(s == "per-step" for _, s in drawn)
        found = {}
        for t in TARGETS:
            step, seq = drawn.get((t, "per-step")), drawn.get((t, "per-sequence"))
            if step is None and seq is None:
                continue
            if step is None:  # each run's mask of its sequence, at every step where some run draws per step
                mask = seq.unsqueeze(1).expand(-1, steps, -1, -1) if per_step else seq
            else:
                mask = step if seq is None else step * seq.unsqueeze(1)
            if self.train_divisors[t] is not None:  # Eq. 18 where a run scales inverted (m / 1 is m)
                mask = mask / self.train_divisors[t].view(-1, *([1] * (mask.dim() - 1)))
            found[t] = mask.transpose(0, 1) if per_step else mask  # (T, R, B, H) or (R, B, H)
        return StepFactors(found, per_step=per_step)


def _setting(field: str) -> property:
    """A layer's attribute that reads ``rdrop.<field>`` and, set, replaces ``rdrop`` (``DropoutSettings``)."""
    return property(lambda self: getattr(self.rdrop, field), lambda self, value: self._set_dropout(**{field: value}),
                    doc=f"The recurrent dropout's ``{field}``, settable (checked as at construction).")


class DropoutSettings:
    """The recurrent dropout's settings as attributes of a layer or cell that holds a ``RecurrentDropout``
    in ``rdrop``: ``recurrent_dropout`` (p), ``scheme``, ``sampling`` and ``scaling`` read it, and set
    after construction they are checked as at construction and act from the next call, as
    ``torch.nn.LSTM``'s ``dropout`` does (``lstm.recurrent_dropout = 0`` switches it off)."""

    rdrop: RecurrentDropout

    def _set_dropout(self, **change) -> None:
        self.rdrop = dataclasses.replace(self.rdrop, **change)  # RecurrentDropout checks it
        if hasattr(self, "reset_masks"):  # a cell's per-sequence mask was drawn under the old settings
            self.reset_masks()

    def __prepare_scriptable__(self):
        """``torch.jit.script`` asks every submodule of a model for this first: recdrop's layers and cells are
        not TorchScript, and say so by name (torch's own error would name a type annotation deep inside)."""
        raise NotImplementedError(f"recdrop.{type(self).__name__} does not support TorchScript (torch.jit.script); "
                                  "use torch.jit.trace, torch.export or torch.compile")

    recurrent_dropout = _setting("p")
    scheme = _setting("scheme")
    sampling = _setting("sampling")
    scaling = _setting("scaling")
