"""A group of language models as one model: every parameter stacked once on a leading run dimension.

A group of runs that share a model's shape trains as one model: the embedding
``(R, V, E)``, the LSTM's ``W_ih`` ``(R, 4H, E)``, ``W_hh`` ``(R, 4H, H)`` and biases, the decoder
``(R, V, H)``, made once when the group forms. Each member's own parameters become views of its
slice, so that its ``state_dict``, checkpoint and record are what they are alone. One step then
dispatches the same ops whatever the number of runs, but for one mask draw per run and mask (each
from the run's own generator, so that a run draws what it draws alone): the products are batched,
and each run's clipping and update (``updates``) run for all runs at once from the stacked gradients.

The forward is the model's own (``models.language_model_hidden``), given the stack's parts: one
embedding lookup, each run's dropouts, the LSTM's batched products. Each run computes what its
``models.LanguageModel`` computes alone (``tests/test_stacked.py``):

    x = d_in(E_r[tokens]);  y, (h, c) = LSTM_r(x, state_r) with d(.) of Eqs. 7-9;  logits = W_r d_out(y) + b_r
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import route
from .fused import group_decoder_nll, group_linear
from .masks import SAMPLINGS, TARGETS, StepFactors
from .models import LanguageModel, language_model_hidden


def _check_group(models: Sequence[LanguageModel]) -> None:
    if not models:
        raise ValueError("a stacked group needs at least one model")
    first = models[0]
    for m in models:
        if not isinstance(m, LanguageModel):
            raise TypeError(f"a stacked group holds recdrop.models.LanguageModel, got {type(m).__name__}")
        rnn = m.rnn
        if rnn.num_layers != 1 or rnn.bidirectional or not rnn.bias or rnn.proj_size:
            raise ValueError(f"a stacked group needs one-layer LSTM language models with biases, got {m!r}")
        if [n for n, _ in m.named_parameters()] != [n for n, _ in first.named_parameters()]:
            raise ValueError(f"a stacked group's models must have the same parameters, got {m!r} beside {first!r}")
        shapes = [(p.shape, p.dtype, p.device) for p in m.parameters()]
        if shapes != [(p.shape, p.dtype, p.device) for p in first.parameters()] or m.rnn.nonlinearity != "tanh":
            raise ValueError("a stacked group's models must share their sizes, dtype, device and nonlinearity (tanh)")
        targets = m.rnn.rdrop.targets  # drawn in this order alone; the group draws them in TARGETS' order
        if list(targets) != [t for t in TARGETS if t in targets]:
            raise ValueError(f"a stacked group draws the recurrent masks in the order {TARGETS}, got {targets}")


class _Draws:
    """One kind of mask of every run of a group, drawn from each run's own generator into its slice of a
    buffer ``(R, *shape)``, as the run draws it alone: ``uniform`` draws U[0, 1) and keeps a unit where
    it falls below 1 - p (``masks.RecurrentDropout.draw``), ``bernoulli`` draws Bernoulli(1 - p)
    (``models.ForwardDropout``). A run that does not draw keeps every unit."""

    def __init__(self, runs: List[Tuple[int, float, Optional[torch.Generator]]], how: str, n_runs: int):
        self.runs, self.how, self.n_runs = runs, how, n_runs
        self.buffers: Dict[tuple, tuple] = {}

    def __bool__(self) -> bool:
        return bool(self.runs)

    def masks(self, shape: Tuple[int, ...], like: Tensor) -> Tensor:
        """The 0/1 masks ``(R, *shape)`` of this step."""
        key = (shape, like.dtype, like.device)
        if key not in self.buffers:
            if any(g is None for _, _, g in self.runs):
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
            if self.how == "uniform":
                row.uniform_(generator=g)  # torch.rand's own draw, into the run's slice
            else:
                row.bernoulli_(1.0 - p, generator=g)
        return buffer if keep is None else (buffer < keep).to(like.dtype)


class StackedLanguageModels:
    """``models`` (one run's ``LanguageModel`` each: one size, any dropout) as one model whose parameters
    are stacked on a leading run dimension (``params``, leaf tensors with their own gradients). With
    ``bind`` each model's parameters become views of its slice (a training group: what the group learns
    is in each model); without, the stack is a copy (an evaluation)."""

    def __init__(self, models: Sequence[LanguageModel], bind: bool = True):
        _check_group(models)
        self.models = list(models)
        R = len(self.models)
        first = self.models[0]
        self.names = [n for n, _ in first.named_parameters()]  # the model's own, in its order
        with torch.no_grad():
            self.params = [torch.stack([dict(m.named_parameters())[n] for m in self.models]).requires_grad_()
                           for n in self.names]
        if bind:
            for r, m in enumerate(self.models):
                for (_, p), stacked in zip(m.named_parameters(), self.params):
                    p.data = stacked.detach()[r]
        of_first = {id(p): s for p, s in zip(first.parameters(), self.params)}  # each of first's, stacked
        self.embed, self.w_out, self.b_out = (of_first[id(p)] for p in (first.embed.weight, first.out.weight,
                                                                        first.out.bias))
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = (of_first[id(p)] for p in first.rnn.layer_weights(0, False)[:4])
        self.vocab = first.embed.num_embeddings
        self.offsets = torch.arange(R, device=self.embed.device).view(1, R, 1) * self.vocab
        self.rnn = first.rnn  # its fast path runs the stacked weights (layers.RecurrentLayer.run_weights)

        def forward_draws(name):
            runs = [(r, getattr(m, name).p, getattr(m, name).generator) for r, m in enumerate(self.models)
                    if getattr(m, name).p > 0]
            return _Draws(runs, "bernoulli", R), torch.tensor(
                [1.0 - getattr(m, name).p for m in self.models], dtype=self.embed.dtype,
                device=self.embed.device).view(R, 1, 1)
        (self.input_draws, self.input_keep), (self.output_draws, self.output_keep) = map(
            forward_draws, ("input_drop", "output_drop"))
        # per target and sampling, the runs whose recurrent dropout draws it (Eqs. 7-9)
        self.recurrent_draws = {
            (t, s): _Draws([(r, m.rnn.rdrop.p, m.rnn.generator) for r, m in enumerate(self.models)
                            if t in m.rnn.rdrop.targets and m.rnn.rdrop.sampling == s], "uniform", R)
            for t in TARGETS for s in SAMPLINGS}
        # drawn in TARGETS' order, as each run draws its own targets alone (_check_group)
        self.draw_order = [key for key in self.recurrent_draws if self.recurrent_draws[key]]
        # per target, each run's divisor of its mask while training (1 - p where it scales inverted, Eq.
        # 18) and its factor at test (1 - p where it scales as the paper, Eq. 3), made here and not in a
        # step: a CUDA graph cannot copy from the host
        rdrops = [m.rnn.rdrop for m in self.models]

        def per_run(t, scaling):
            if not any(t in d.targets and d.scaling == scaling for d in rdrops):
                return None
            return torch.tensor([1.0 - d.p if t in d.targets and d.scaling == scaling else 1.0 for d in rdrops],
                                dtype=self.embed.dtype, device=self.embed.device)
        self.train_divisors = {t: per_run(t, "inverted") for t in TARGETS}
        self.test_factors = {t: f.view(R, 1, 1) for t in TARGETS if (f := per_run(t, "paper")) is not None}

    @property
    def training(self) -> bool:
        return self.models[0].training

    def _forward_dropout(self, x: Tensor, draws: _Draws, keep: Tensor) -> Tensor:
        """``ForwardDropout`` of each run on its slice of ``x`` ``(T, R, B, F)``: x * mask / (1 - p)."""
        if not self.training or not draws:
            return x
        masks = draws.masks((x.shape[0], x.shape[2], x.shape[3]), x)  # (R, T, B, F)
        return x * masks.transpose(0, 1) / keep

    def _recurrent_factors(self, steps: int, batch: int, like: Tensor) -> StepFactors:
        """Each run's d(.) (``masks.RecurrentDropout.factors``) stacked on the run dimension: per target,
        ``(T, R, B, H)`` where some run draws a mask per step, ``(R, B, H)`` where some run draws one per
        sequence only, ``(R, 1, 1)`` constants at test (Eq. 3's 1 - p under the ``paper`` scaling)."""
        hidden = self.rnn.hidden_size
        if not self.training:
            return StepFactors(self.test_factors, per_step=False)
        drawn = {}
        for t, s in self.draw_order:  # each run's generator advances as it does alone
            shape = (steps, batch, hidden) if s == "per-step" else (batch, hidden)
            drawn[(t, s)] = self.recurrent_draws[(t, s)].masks(shape, like)
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

    def embedding(self, tokens: Tensor) -> Tensor:
        """Every run's embedding of ``tokens`` ``(T, B)``: ``(T, R, B, E)``, in one lookup."""
        return F.embedding(tokens.unsqueeze(1) + self.offsets, self.embed.flatten(0, 1))

    def input_dropout(self, x: Tensor) -> Tensor:
        return self._forward_dropout(x, self.input_draws, self.input_keep)

    def output_dropout(self, y: Tensor) -> Tensor:
        return self._forward_dropout(y, self.output_draws, self.output_keep)

    def recurrent(self, x: Tensor, states: Tuple[Tensor, Tensor]):
        """Every run's LSTM with its own recurrent dropout on its slice of ``x`` ``(T, R, B, E)``, the
        weights stacked (one batched product a step): outputs ``(T, R, B, H)`` and the new states."""
        factors = self._recurrent_factors(x.shape[0], x.shape[2], x)
        y, states = self.rnn.run_weights(x, tuple(states), (self.w_ih, self.w_hh, self.b_ih, self.b_hh, None),
                                          factors, False)
        for m in self.models:  # each run's layer ran on this path (the trainer records it)
            m.rnn.last_route = self.rnn.last_route
        return y, states

    def hidden(self, tokens: Tensor, states: Tuple[Tensor, Tensor]):
        """What enters every run's decoder on ``tokens`` ``(T, B)`` from ``states`` (h, c) ``(R, B, H)``: its
        LSTM's outputs after its output dropout ``(T, R, B, H)``, and the new states: the model's own
        forward (``models.language_model_hidden``) on the stacked parts."""
        return language_model_hidden(tokens, tuple(states), self.embedding, self.input_dropout, self.recurrent,
                                     self.output_dropout)

    def outputs(self, tokens: Tensor, states: Tuple[Tensor, Tensor]):
        """Logits ``(T, R, B, V)`` of every run on ``tokens`` ``(T, B)`` from ``states`` (h, c) ``(R, B, H)``,
        and the new states."""
        y, states = self.hidden(tokens, states)
        return group_linear(y, self.w_out, self.b_out), states

    def nll(self, tokens: Tensor, states: Tuple[Tensor, Tensor], targets: Tensor, reduction: str = "mean"):
        """Each run's negative log-likelihood of ``targets`` ``(T, B)``: its mean over the tokens (or sum,
        ``reduction="sum"``) ``(R,)``, and the new states. The decoder and the loss are one
        (``fused.group_decoder_nll``): the group's logits are never held whole."""
        y, states = self.hidden(tokens, states)
        nll = group_decoder_nll(y, self.w_out, self.b_out, targets)
        return (nll * targets.numel() if reduction == "sum" else nll), states

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def grads(self) -> List[Tensor]:
        """The stacked parameters' gradients, in the order of ``params``."""
        return [p.grad for p in self.params]


def stacking(models: Sequence[LanguageModel], device) -> bool:
    """Whether a group of ``models`` trains as one stacked model: more than one run, where ``route.stacks``."""
    return len(models) > 1 and route.stacks(device)
