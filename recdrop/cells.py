"""One time step of the RNN, LSTM and GRU with recurrent dropout (paper Section 3).

The step functions take the input projection ``gx = W_ih x_t + b_ih`` already computed (the
layers compute it for all steps in one matmul) and the factors of d(.) for this step
(``recdrop.masks``); a factor of ``None`` means "not dropped". Gate order and parameter names are
torch.nn's, so weights load both ways between a recdrop module and its torch.nn twin.

d(.) is the dropout function: d(x) = m ⊙ x while training and (1 - p) x at test (Eq. 3), or
m ⊙ x / (1 - p) and x (Eq. 18, "inverted"), with m a 0/1 mask drawn from Bernoulli(1 - p); here
it is a multiplication by the step's factor. f is the nonlinearity (tanh, or relu), σ the sigmoid.

Deviation (GRU): torch.nn applies the reset gate after the recurrent matmul,
n_t = tanh(W_in x + b_in + r_t * (W_hn h_{t-1} + b_hn)), where the paper's Eq. 11
(``eq:gru_candidates``) has W_g [x_t, r_t * h_{t-1}]. We follow torch.nn so that the modules are
drop-in replacements whose weights load from torch.nn.GRU.
"""
from __future__ import annotations

import numbers
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import SCHEMES, DropoutSettings, RecurrentDropout, StepFactors

ACTIVATIONS: Dict[str, Callable[[Tensor], Tensor]] = {"tanh": torch.tanh, "relu": torch.relu}

# Scheme names each cell accepts. For the vanilla RNN, "semeniuta" and "gal" both mean Eq. 2
# (drop h_{t-1} where it re-enters the cell: the whole new state is the "update" of a vanilla
# RNN, and h_{t-1} is what enters its only gate); "moon" drops the state h_t itself, which is
# then both the output and the next step's input.
CELL_SCHEMES = {"LSTM": SCHEMES, "GRU": SCHEMES, "RNN": ("semeniuta", "gal", "moon")}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def scaled(x: Tensor, factor) -> Tensor:
    """``x`` times a dropout ``factor`` (a mask with its scaling), or ``x`` itself where there is none."""
    return x if factor is None else x * factor


def recurrent_product(h: Tensor, w_hh: Tensor, b_hh: Optional[Tensor]) -> Tensor:
    """W_hh h_{t-1} + b_hh, the recurrent half of every gate's pre-activation (Eqs. 1, 4, 10-11): for
    one run, ``h`` ``(B, H)`` and ``w_hh`` ``(G H, H)`` through ``F.linear``; for a group of runs stacked
    on a leading dimension, ``h`` ``(R, B, H)``, ``w_hh`` ``(R, G H, H)`` and ``b_hh`` ``(R, G H)``, one
    batched product (``baddbmm``) in which each run meets only its own weights."""
    if w_hh.dim() == 2:
        return F.linear(h, w_hh, b_hh)
    if h.dim() != 3 or h.shape[0] != w_hh.shape[0]:
        raise ValueError(f"a group's recurrent weights {tuple(w_hh.shape)} need states of shape (R, B, H) with "
                         f"R = {w_hh.shape[0]}, got {tuple(h.shape)}")
    if b_hh is None:
        return torch.bmm(h, w_hh.transpose(1, 2))
    return torch.baddbmm(b_hh.unsqueeze(1), h, w_hh.transpose(1, 2))


def lstm_step(gx: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh: Optional[Tensor],
              gal, sem, moon, act: Callable[[Tensor], Tensor] = torch.tanh) -> Tuple[Tensor, Tensor]:
    """LSTM step, Eqs. 4-6, with the recurrent dropout of Gal (Eq. 7), Moon (Eq. 8) and ours (Eq. 9).

        (i_t, f_t, o_t) = σ(W_{i,f,o} [x_t, h_{t-1}] + b_{i,f,o})    (Eq. 4)
        g_t = f(W_g [x_t, h_{t-1}] + b_g)                            (Eq. 4)
        c_t = f_t ⊙ c_{t-1} + i_t ⊙ g_t                              (Eq. 5)
        h_t = o_t ⊙ f(c_t)                                           (Eq. 6)

    Gal:  d(h_{t-1}) in place of h_{t-1} in every gate and in g_t   (Eq. 7)
    Moon: c_t = d(f_t ⊙ c_{t-1} + i_t ⊙ g_t), carried dropped       (Eq. 8)
    ours: c_t = f_t ⊙ c_{t-1} + i_t ⊙ d(g_t)                        (Eq. 9)

    ``gal``, ``sem``, ``moon``: the step's factors of each d(.). torch.nn gate order: i, f, g, o.
    Every step function also takes a group of runs on a leading dimension (``recurrent_product``),
    with factors that broadcast against ``(R, B, H)``.
    """
    gates = gx + recurrent_product(scaled(h, gal), w_hh, b_hh)  # Eq. 7: d(h_{t-1}) enters every gate
    i, f, g, o = gates.chunk(4, dim=-1)
    i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
    g = scaled(act(g), sem)  # Eq. 9: c_t = f * c_{t-1} + i * d(g_t)
    c = scaled(f * c + i * g, moon)  # Eq. 8: c_t = d(f * c_{t-1} + i * g_t), carried on dropped
    return o * act(c), c


def gru_step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Optional[Tensor],
             gal, sem, moon, act: Callable[[Tensor], Tensor] = torch.tanh) -> Tensor:
    """GRU step, Eqs. 10-12 in torch.nn's form, with our dropout on the candidate (Eq. 13).

        r_t = σ(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)              (Eq. 10)
        z_t = σ(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)              (Eq. 10; the paper's 1 - z_t)
        n_t = f(W_in x_t + b_in + r_t ⊙ (W_hn h_{t-1} + b_hn))      (Eq. 11; the paper's g_t)
        h_t = (1 - z_t) ⊙ n_t + z_t ⊙ h_{t-1}                       (Eq. 12)

    ours: h_t = (1 - z_t) ⊙ d(n_t) + z_t ⊙ h_{t-1}                  (Eq. 13)
    Gal:  d(h_{t-1}) in place of h_{t-1} where it enters r_t, z_t and n_t (not in z_t ⊙ h_{t-1})
    Moon: h_t = d((1 - z_t) ⊙ n_t + z_t ⊙ h_{t-1}), carried dropped

    torch.nn gate order: r, z, n. Deviation: r_t applies after the recurrent matmul (module docstring).
    """
    gh = recurrent_product(scaled(h, gal), w_hh, b_hh)
    xr, xz, xn = gx.chunk(3, dim=-1)
    hr, hz, hn = gh.chunk(3, dim=-1)
    r = torch.sigmoid(xr + hr)
    z = torch.sigmoid(xz + hz)
    n = scaled(act(xn + r * hn), sem)  # Eq. 13: d(g_t)
    return scaled((1 - z) * n + z * h, moon)


def rnn_recurrent_factor(gal, sem):
    """For the vanilla RNN "semeniuta" and "gal" mean the same thing, Eq. 2: the factor on h_{t-1}
    where it re-enters. Whichever of the two is set; in a group mixing the two names both are, each
    run's other factor being 1, so their product is each run's own."""
    if gal is None or sem is None:
        return gal if sem is None else sem
    return gal * sem


def rnn_step(gx: Tensor, h: Tensor, w_hh: Tensor, b_hh: Optional[Tensor],
             gal, sem, moon, act: Callable[[Tensor], Tensor] = torch.tanh) -> Tensor:
    """Vanilla RNN step, Eq. 1, with recurrent dropout.

        h_t = f(W_h [x_t, h_{t-1}] + b_h)                            (Eq. 1)

    "semeniuta", "gal": h_t = f(W_h [x_t, d(h_{t-1})] + b_h)        (Eq. 2)
    "moon":             h_t = d(f(W_h [x_t, h_{t-1}] + b_h)), carried dropped

    W_h [x_t, h_{t-1}] + b_h is torch's W_ih x_t + b_ih + W_hh h_{t-1} + b_hh.
    """
    drop_in = rnn_recurrent_factor(gal, sem)
    return scaled(act(gx + recurrent_product(scaled(h, drop_in), w_hh, b_hh)), moon)


def check_activation(nonlinearity: str) -> Callable[[Tensor], Tensor]:
    if nonlinearity not in ACTIVATIONS:
        raise ValueError(f"nonlinearity={nonlinearity!r} is not valid; allowed values: "
                         f"{', '.join(map(repr, ACTIVATIONS))}")
    return ACTIVATIONS[nonlinearity]


def _set_nonlinearity(module: nn.Module, value: str) -> None:
    check_activation(value)
    module.__dict__["nonlinearity"] = value
    if isinstance(module, nn.RNNBase):  # torch.nn's forward computes its ``mode``: the RNN's RNN_TANH or RNN_RELU
        module.mode = module.mode_for(value)


# A module's nonlinearity by name (a module holds no function, so that it loads weights_only), settable after
# construction as the dropout's settings are: checked as at construction, and a layer's torch.nn ``mode``
# follows it, so that torch.nn's forward (where no dropout acts) and recdrop's compute the same function.
NONLINEARITY = property(lambda module: module.__dict__["nonlinearity"], _set_nonlinearity,
                        doc="The nonlinearity's name, settable (checked as at construction).")


class _CellBase(DropoutSettings, nn.RNNCellBase):
    """A single-step cell, drop-in for torch.nn.{LSTM,GRU,RNN}Cell, with recurrent dropout: a subclass
    of its torch.nn twin, built by torch.nn's constructor. Where no recurrent dropout acts and the
    nonlinearity is one torch.nn has, ``forward`` is torch.nn's own.

    With ``sampling="per-sequence"`` the cell draws its mask at the first training call and keeps
    it until ``reset_masks()`` (call it at the start of every new sequence); with ``"per-step"``
    every call draws a fresh mask. ``forward(..., masks=...)`` takes raw 0/1 masks of shape
    ``(B, H)`` instead (``(1, H)`` for an unbatched input), one per dropped target (see
    ``RecurrentDropout.targets``), in training (in eval they are not applied, and a warning says so).
    Masks are drawn from ``generator`` where one is set, else from torch's global generator.
    """

    kind = ""
    torch_kernels = True  # where no recurrent dropout acts, torch.nn's forward; False: recdrop's own there too
    generator: Optional[torch.Generator] = None  # draws the masks; None: torch's global one
    nonlinearity = NONLINEARITY

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None, *,
                 nonlinearity: str = "tanh", recurrent_dropout: float = 0.0, scheme: str = "semeniuta",
                 sampling: str = "per-step", scaling: str = "inverted"):
        input_size, hidden_size = _check_sizes(input_size, hidden_size)
        check_activation(nonlinearity)
        rdrop = RecurrentDropout(recurrent_dropout, scheme, sampling, scaling, CELL_SCHEMES[self.kind])
        nn.RNNCellBase.__init__(self, input_size, hidden_size, bias, GATES[self.kind], device, dtype)
        self.nonlinearity = nonlinearity
        self.rdrop = rdrop
        self._sequence_masks: Optional[Dict[str, Tensor]] = None

    def reset_masks(self) -> None:
        """Forget the per-sequence mask: the next training call draws a new one."""
        self._sequence_masks = None

    def __getstate__(self):
        """The module's state less its ``generator`` (``without_generator``)."""
        return without_generator(super().__getstate__())

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity!r}"
        return s + self.rdrop.describe()

    def _torch_computes_it(self, masks) -> bool:
        """Whether this call runs torch.nn's forward: no masks given, no recurrent dropout acts and
        the nonlinearity is one torch.nn has (its LSTMCell and GRUCell have only tanh)."""
        return (masks is None and self.torch_kernels and not self.rdrop.acts(self.training)
                and (self.kind == "RNN" or self.nonlinearity == "tanh"))

    def _factors(self, x: Tensor, masks) -> StepFactors:
        r, shape = self.rdrop, (x.shape[0], self.hidden_size)
        given = masks is not None
        if masks is None and self.training and r.targets:
            if r.sampling == "per-step":
                masks = r.draw(shape, x.device, x.dtype, self.generator)
            else:
                if self._sequence_masks is None:
                    self._sequence_masks = r.draw(shape, x.device, x.dtype, self.generator)
                masks = self._sequence_masks  # cast below: the cell may have moved since it was drawn (.to, .half)
                if next(iter(masks.values())).shape[0] != shape[0]:
                    raise ValueError(f"input batch size {shape[0]} differs from the per-sequence mask's: "
                                     "call reset_masks() at the start of every new sequence")
        if masks is not None:
            r.check_masks(masks, shape, given)
            masks = {t: m.to(x) for t, m in masks.items()}  # given or kept masks act in the input's dtype
        return r.factors(masks, self.training, per_step=False)

    def _checked_types(self, input: Tensor, hx, n_states: int) -> Optional[Tuple[Tensor, ...]]:
        """Check that ``input`` is a tensor and ``hx``, where given, ``n_states`` tensors (``states_of``); the states,
        or None. Run before either forward, torch.nn's too, so that a bad input gets one error whether or not
        recurrent dropout acts."""
        if not isinstance(input, Tensor):
            raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
        return None if hx is None else states_of(hx, n_states)

    def _prepare(self, input: Tensor, hx, n_states: int):
        """torch.nn's checks, with its errors; then x and the states batched, gx = W_ih x + b_ih, and
        whether ``input`` was batched."""
        name = type(self).__name__
        states = self._checked_types(input, hx, n_states)
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for idx, st in enumerate(states or ()):
            if st.dim() not in (1, 2):
                what = f"hx[{idx}]" if n_states == 2 else "hidden"
                raise ValueError(f"{name}: Expected {what} to be 1D or 2D, got {st.dim()}D instead")
        batched = input.dim() == 2
        x = input if batched else input.unsqueeze(0)
        if states is None:
            states = tuple(x.new_zeros(x.shape[0], self.hidden_size) for _ in range(n_states))
        elif not batched:
            states = tuple(st.unsqueeze(0) for st in states)
        if x.shape[1] != self.input_size:  # the checks and words of torch.nn's cell kernels
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} expected {self.input_size}")
        for idx, st in enumerate(states):
            if st.shape[0] != x.shape[0]:
                raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{idx} batch size {st.shape[0]}")
            if st.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{idx} has inconsistent hidden_size: got {st.shape[1]}, "
                                   f"expected {self.hidden_size}")
        gx = F.linear(x, self.weight_ih, self.bias_ih)
        return x, gx, states, batched


def without_generator(state: dict) -> dict:
    """A module's pickled state (``__getstate__``) less the mask ``generator`` set on it: a generator is
    a run's source of randomness, not part of the module, and ``torch.load(weights_only=True)`` refuses
    one; a copy (pickle, ``copy.deepcopy``) draws from torch's global generator until given its own,
    rather than drawing its original's masks."""
    state = dict(state)
    state.pop("generator", None)
    return state


def states_of(hx, n_states: int) -> Tuple[Tensor, ...]:
    """``hx`` as a tuple of tensors: (h_0,), or (h_0, c_0) where ``n_states`` is 2 (the LSTM)."""
    states = tuple(hx) if n_states == 2 and isinstance(hx, (tuple, list)) else (hx,)
    if len(states) != n_states:
        raise ValueError(f"hx must be a tuple (h_0, c_0), got {len(states)} tensors{_masks_as_hx_hint(hx)}")
    for name, st in zip(("h_0", "c_0"), states):
        if not isinstance(st, Tensor):
            raise TypeError(f"hx: {name} must be a torch.Tensor, got {type(st).__name__}{_masks_as_hx_hint(hx)}")
    return states


def _masks_as_hx_hint(hx) -> str:
    """A hint for a refused ``hx`` that is a layer's masks (a list of dicts, ``draw_masks``), given as the
    second positional argument."""
    if isinstance(hx, list) and hx and all(isinstance(m, dict) for m in hx):
        return "; masks are keyword-only: forward(x, hx, masks=...)"
    return ""


def _check_sizes(input_size: int, hidden_size: int) -> Tuple[int, int]:
    """The sizes as ints: any integer (``numpy.int64`` too, as torch.nn's cells take), positive (where
    torch.nn's cells take 0 and fail at the first call); a TypeError for another type, as torch.nn's."""
    sizes = []
    for name, v in (("input_size", input_size), ("hidden_size", hidden_size)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} should be of type int, got: {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
        sizes.append(int(v))
    return sizes[0], sizes[1]


class LSTMCell(_CellBase, nn.LSTMCell):
    """Drop-in ``torch.nn.LSTMCell`` with recurrent dropout (Eqs. 7-9, ``lstm_step``) at rate
    ``recurrent_dropout``; its recurrent-dropout keyword arguments are ``recdrop.LSTM``'s. One call is one step: with
    ``sampling="per-sequence"``, call ``reset_masks()`` at the start of every new sequence."""

    kind = "LSTM"

    def forward(self, input: Tensor, hx: Optional[Tuple[Tensor, Tensor]] = None, *,
                masks: Optional[Dict[str, Tensor]] = None) -> Tuple[Tensor, Tensor]:
        if self._torch_computes_it(masks):
            self._checked_types(input, hx, 2)
            return super().forward(input, hx)  # torch.nn.LSTMCell's
        x, gx, (h, c), batched = self._prepare(input, hx, 2)
        gal, sem, moon = self._factors(x, masks).at(0)
        h, c = lstm_step(gx, h, c, self.weight_hh, self.bias_hh, gal, sem, moon, ACTIVATIONS[self.nonlinearity])
        return (h, c) if batched else (h[0], c[0])


class _SingleStateCell(_CellBase):
    """A cell whose only state is h_t (GRU, RNN); ``step`` is its step function."""

    step: Callable = staticmethod(rnn_step)

    def forward(self, input: Tensor, hx: Optional[Tensor] = None, *,
                masks: Optional[Dict[str, Tensor]] = None) -> Tensor:
        if self._torch_computes_it(masks):
            self._checked_types(input, hx, 1)
            return super().forward(input, hx)  # torch.nn.GRUCell's or RNNCell's
        x, gx, (h,), batched = self._prepare(input, hx, 1)
        gal, sem, moon = self._factors(x, masks).at(0)
        h = self.step(gx, h, self.weight_hh, self.bias_hh, gal, sem, moon, ACTIVATIONS[self.nonlinearity])
        return h if batched else h[0]


class GRUCell(_SingleStateCell, nn.GRUCell):
    """Drop-in ``torch.nn.GRUCell`` with recurrent dropout (Semeniuta: Eq. 13, ``gru_step``); its
    recurrent-dropout keyword arguments are ``recdrop.LSTM``'s. With ``sampling="per-sequence"``, call
    ``reset_masks()`` at each new sequence."""

    kind = "GRU"
    step = staticmethod(gru_step)


class RNNCell(_SingleStateCell, nn.RNNCell):
    """Drop-in ``torch.nn.RNNCell`` with recurrent dropout.

    Schemes: ``"semeniuta"`` (default) and ``"gal"`` both apply Eq. 2, d(h_{t-1}) where it
    re-enters the cell; ``"moon"`` drops h_t itself (output and carried state).
    """

    kind = "RNN"
    step = staticmethod(rnn_step)

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None, **kwargs):
        super().__init__(input_size, hidden_size, bias, device, dtype, nonlinearity=nonlinearity, **kwargs)
