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

from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import route
from .fused import group_decoder_nll, group_linear
from .masks import GroupDropout, RunDraws
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
            # a run at p = 1 drops every element: its mask is all zeros, divided by 1 (as ``inverted_dropout``)
            keep = [1.0 - getattr(m, name).p if getattr(m, name).p < 1 else 1.0 for m in self.models]
            return RunDraws(runs, "bernoulli", R), torch.tensor(keep, dtype=self.embed.dtype,
                                                                device=self.embed.device).view(R, 1, 1)
        (self.input_draws, self.input_keep), (self.output_draws, self.output_keep) = map(
            forward_draws, ("input_drop", "output_drop"))
        rnns = [m.rnn for m in self.models]
        self.recurrent_dropout = GroupDropout([r.rdrop for r in rnns], [r.generator for r in rnns],
                                              self.embed.dtype, self.embed.device)

    @property
    def training(self) -> bool:
        return self.models[0].training

    def _forward_dropout(self, x: Tensor, draws: RunDraws, keep: Tensor) -> Tensor:
        """``ForwardDropout`` of each run on its slice of ``x`` ``(T, R, B, F)``: x * mask / (1 - p)."""
        if not self.training or not draws:
            return x
        masks = draws.masks((x.shape[0], x.shape[2], x.shape[3]), x)  # (R, T, B, F)
        return x * masks.transpose(0, 1) / keep

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
        factors = self.recurrent_dropout.factors(x.shape[0], x.shape[2], self.rnn.hidden_size, x, self.training)
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
