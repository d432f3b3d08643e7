"""The models of the paper's experiments, each built from one ``Dropout`` settings object.

- ``LanguageModel``: embedding -> forward dropout -> one LSTM with recurrent dropout -> forward
  dropout -> linear to the vocabulary (words, Sec. 4.2; characters, Sec. 4.3).
- ``SequenceClassifier``: static word vectors -> forward dropout -> one RNN, LSTM or GRU read at each
  sequence's last step -> forward dropout -> linear to the classes (Twitter sentiment, Sec. 4.5;
  the Temporal Order task of Sec. 4.1 is the same without word vectors).
- ``Tagger``: static word vectors of a window of words and their capitalisation -> forward dropout
  -> one recurrent layer -> forward dropout -> linear to the tags at every step (NER, Sec. 4.4).

The experiments build their models here and never from each other.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from . import layers
from .fused import linear


@dataclasses.dataclass(frozen=True)
class Dropout:
    """Every dropout of a model: the recurrent one (rate, scheme, sampling, scaling; ``recdrop.masks``)
    and the forward ones on the recurrent layer's input and output."""

    recurrent: float = 0.0
    scheme: str = "semeniuta"
    sampling: str = "per-step"
    scaling: str = "inverted"
    input: float = 0.0
    output: float = 0.0

    @classmethod
    def of(cls, cfg) -> "Dropout":
        """The settings of an experiment's config (fields ``recurrent_dropout``, ``scheme``, ...)."""
        return cls(cfg.recurrent_dropout, cfg.scheme, cfg.sampling, cfg.scaling, getattr(cfg, "input_dropout", 0.0),
                   getattr(cfg, "output_dropout", 0.0))

    def layer_kwargs(self) -> dict:
        """The keyword arguments of ``recdrop.LSTM`` / ``GRU`` / ``RNN`` for the recurrent dropout."""
        return dict(recurrent_dropout=self.recurrent, scheme=self.scheme, sampling=self.sampling, scaling=self.scaling)


def recurrent_layer(cell: str, input_size: int, hidden_size: int, dropout: Dropout,
                    nonlinearity: str = "tanh") -> torch.nn.Module:
    """``recdrop.<cell>`` ("RNN", "LSTM" or "GRU") with ``dropout``'s recurrent dropout."""
    return getattr(layers, cell)(input_size, hidden_size, nonlinearity=nonlinearity, **dropout.layer_kwargs())


def init_uniform_(module: torch.nn.Module, scale: float) -> torch.nn.Module:
    """Every parameter uniform in [-scale, scale], biases included (the authors' code)."""
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-scale, scale)
    return module


class ForwardDropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` (inverted: mask / (1 - p) while training, identity at test) that draws its
    mask from ``generator`` where one is set (a run's own), else as ``torch.nn.Dropout``."""

    generator: Optional[torch.Generator] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return super().forward(x)
        return layers.inverted_dropout(x, self.p, self.generator)


def set_generator(model: torch.nn.Module, generator: Optional[torch.Generator]) -> torch.nn.Module:
    """Draw every mask of ``model`` (its recurrent layers' and its forward dropouts') from ``generator``,
    a run's own: then what a run draws does not depend on the runs it trains beside."""
    for m in model.modules():
        if isinstance(m, (ForwardDropout, layers.RecurrentLayer)):
            m.generator = generator
    return model


def generators(model: torch.nn.Module) -> list:
    """The generators ``model``'s masks are drawn from (``set_generator``), each once."""
    found = {id(m.generator): m.generator for m in model.modules() if getattr(m, "generator", None) is not None}
    return list(found.values())


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` (the same parameters, state_dict and hooks) whose product runs on the faster of
    oneDNN and MKL on a CPU in float32 (``fused.linear``, ``recdrop.cpu_products``): a language model's
    decoder is most of its training step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def language_model_hidden(tokens: torch.Tensor, state, embed, input_drop, rnn, output_drop):
    """The language model of Secs. 4.2-4.3 up to its decoder, written once for a run alone
    (``LanguageModel``) and for a group stacked as one model (``stacked.StackedLanguageModels``, which
    passes its stacked parts): x = d_in(E[tokens]); y, state = LSTM(x, state) with recurrent dropout
    (Eqs. 7-9); returns d_out(y) and the new state."""
    y, state = rnn(input_drop(embed(tokens)), state)
    return output_drop(y), state


class LanguageModel(torch.nn.Module):
    """Tokens ``(T, B)`` and a carried state -> logits ``(T, B, vocab)`` and the new state."""

    def __init__(self, vocab_size: int, embedding_size: int, hidden_size: int, dropout: Dropout, init_scale: float):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, embedding_size)
        self.input_drop = ForwardDropout(dropout.input)
        self.rnn = layers.LSTM(embedding_size, hidden_size, **dropout.layer_kwargs())
        self.output_drop = ForwardDropout(dropout.output)
        self.out = Linear(hidden_size, vocab_size)
        init_uniform_(self, init_scale)

    def forward(self, tokens, state):
        y, state = language_model_hidden(tokens, state, self.embed, self.input_drop, self.rnn, self.output_drop)
        return self.out(y), state


def language_models_nll(models: Sequence[LanguageModel], tokens: torch.Tensor, states: Tuple[torch.Tensor, ...],
                        targets: torch.Tensor, reduction: str = "mean"):
    """Each run's negative log-likelihood of ``targets`` ``(T, B)`` after ``tokens``, its mean over the
    tokens (or its sum, ``reduction="sum"``), ``(R,)``, and the new states ``(R, B, H)``: each model's own
    forward from its slice of ``states``, the way of a group that does not stack (a CPU's). A group that
    stacks computes the same as one model (``stacked.StackedLanguageModels.nll``)."""
    flat = targets.reshape(-1)
    nlls, finals = [], []
    for r, m in enumerate(models):
        logits, state = m(tokens, tuple(s[r:r + 1] for s in states))
        nlls.append(F.cross_entropy(logits.reshape(flat.numel(), -1), flat, reduction=reduction))
        finals.append(state)
    return torch.stack(nlls), tuple(torch.cat(s) for s in zip(*finals))


def language_models_bytes(runs: int, vocab: int, embedding: int, hidden: int, steps: int, batch: int,
                          optimizer_slots: int, dtype_bytes: int = 4) -> int:
    """About how many bytes ``runs`` language models take to train as one group: per run, its parameters
    four times (weights, gradients, the stacked copy and its gradient) plus the optimiser's
    ``optimizer_slots`` per parameter, and the step's activations (embeddings and their dropout, the
    LSTM's gates, cells and outputs, the logits, their log-softmax and its gradient)."""
    params = vocab * embedding + 4 * hidden * (embedding + hidden + 2) + vocab * (hidden + 1)
    activations = steps * batch * (2 * embedding + 10 * hidden + 3 * vocab)
    return runs * dtype_bytes * (params * (4 + optimizer_slots) + activations)


class SequenceClassifier(torch.nn.Module):
    """Word rows ``(T, B)`` (or features ``(T, B, input)`` where there are no word vectors) -> class
    logits ``(B, classes)`` read at each sequence's last step (``lengths``; all of them if None)."""

    def __init__(self, cell: str, input_size: int, hidden_size: int, n_classes: int, dropout: Dropout,
                 vectors: Optional[torch.Tensor] = None, nonlinearity: str = "tanh"):
        super().__init__()
        if vectors is not None:
            self.embed = torch.nn.Embedding.from_pretrained(vectors, freeze=True)  # kept static
            input_size = vectors.shape[1]
        self.input_drop = ForwardDropout(dropout.input)
        self.rnn = recurrent_layer(cell, input_size, hidden_size, dropout, nonlinearity)
        self.output_drop = ForwardDropout(dropout.output)
        self.out = torch.nn.Linear(hidden_size, n_classes)

    def forward(self, x: torch.Tensor, lengths: Optional[torch.Tensor] = None, return_state: bool = False):
        """The logits; with ``return_state``, also the recurrent layer's final state (h_n, or (h_n, c_n) for
        an LSTM)."""
        if hasattr(self, "embed"):
            x = self.embed(x)
        y, state = self.rnn(self.input_drop(x))
        last = y[-1] if lengths is None else y[lengths - 1, torch.arange(x.shape[1], device=x.device)]
        logits = self.out(self.output_drop(last))
        return (logits, state) if return_state else logits


class Tagger(torch.nn.Module):
    """Windows of word rows ``(T, B, window)`` and their capitalisation classes -> tag logits
    ``(T, B, tags)``: each step sees the word vectors and one-hot capitalisation of its window."""

    def __init__(self, cell: str, vectors: torch.Tensor, window: int, n_caps: int, hidden_size: int, n_tags: int,
                 dropout: Dropout, nonlinearity: str = "tanh", tune_embeddings: bool = False):
        super().__init__()
        self.n_caps = n_caps
        # paper: kept static; ``tune_embeddings`` trains them (an ablation of the NER chapter), on a copy:
        # from_pretrained shares ``vectors``' storage, which the runs of a process share
        self.embed = torch.nn.Embedding.from_pretrained(vectors.clone() if tune_embeddings else vectors,
                                                        freeze=not tune_embeddings)
        self.input_drop = ForwardDropout(dropout.input)
        self.rnn = recurrent_layer(cell, window * (vectors.shape[1] + n_caps), hidden_size, dropout, nonlinearity)
        self.output_drop = ForwardDropout(dropout.output)
        self.out = torch.nn.Linear(hidden_size, n_tags)

    def forward(self, windows: torch.Tensor, caps: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.embed(windows).flatten(2), F.one_hot(caps, self.n_caps).flatten(2).float()], dim=-1)
        y, _ = self.rnn(self.input_drop(x))
        return self.out(self.output_drop(y))
