"""Word-level language modelling on Penn Treebank (paper Section 4.2, Table 2 and Figure 2).

Embedding 256 -> forward dropout -> one recdrop.LSTM of 256 with recurrent dropout -> forward
dropout -> linear to the 10k vocabulary; plain SGD with stateful truncated BPTT. Where the paper
is silent the authors' code (drop-rnn: config.py, main.py, model.py, sgd_optimizer.py) decides,
and the field says so.

This module trains the runs; their tables, claims and figures are ``word_lm_chapter``'s.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .. import step_graph, updates
from ..config import ExperimentConfig
from ..data.ptb import batchify, check_ptb, load_ptb
from ..models import Dropout, LanguageModel, generators, language_models_bytes, language_models_nll
from ..stacked import StackedLanguageModels, stacking
from ..step_graph import LearningRates, StepGraph
from ..train import Task, autocast, optimise_group
from .lm_tables import (
    best_epoch,
    conjecture_cells,
    headline_cells,
    pilot_cells,
    table_cells,
)


@dataclasses.dataclass(frozen=True)
class WordLMConfig(ExperimentConfig):
    experiment = "word_lm"
    SCALES = {
        "paper": {},
        # The 26-run grid sized for a 2-core CPU: the first 50k training tokens (of 930k), embedding
        # and LSTM of 64 units (the 10k softmax dominates the cost), 12 epochs (about 520 updates),
        # and the first 20k tokens of the validation and test sets (of 74k and 82k). The small model
        # is still under-fitting at the end: a smoke test of the pipeline, not a test of the claims.
        "quick": dict(train_tokens=50_000, valid_tokens=20_000, test_tokens=20_000, embedding_size=64,
                      hidden_size=64, epochs=12),
        # The paper's model, optimiser and schedule on the first 116k of the 930k training tokens
        # (103 updates an epoch), 20 epochs, full validation and test sets: small enough for a CPU,
        # large enough that the model without dropout over-fits (the chapter's fit table).
        "reduced": dict(train_tokens=116_000, epochs=20),
        "ci": dict(train_tokens=3_000, valid_tokens=2_000, test_tokens=2_000, embedding_size=16, hidden_size=16,
                   epochs=2),
    }
    POSITIVE = ("embedding_size", "hidden_size", "batch_size", "bptt", "epochs")
    SHOWN_AS = {name: {0: "all"} for name in ("train_tokens", "valid_tokens", "test_tokens")}

    scheme: str = "semeniuta"
    sampling: str = "per-step"
    recurrent_dropout: float = 0.0
    scaling: str = "paper"  # authors' code: recurrent masks not inverted (Eq. 3)
    input_dropout: float = 0.0  # paper Sec. 4.2 Table 2: 0.2 with forward dropout (inverted, as usual)
    output_dropout: float = 0.0  # paper Sec. 4.2 Table 2: 0.5 with forward dropout
    embedding_size: int = 256  # authors' code config.py
    hidden_size: int = 256  # paper Sec. 4.2: one layer of 256
    init_scale: float = 0.05  # paper Sec. 4.2: every parameter uniform in [-0.05, 0.05] (both LSTM biases too)
    lr: float = 1.0  # paper Sec. 4.2 (plain SGD, no momentum: authors' code sgd_optimizer.py)
    lr_decay: float = 1.5  # paper Sec. 4.2: divide by 1.5 after an epoch without a better validation perplexity
    clip_norm: float = 10.0  # paper Sec. 4.2: global-norm clipping at 10
    batch_size: int = 32  # paper Sec. 4.2
    bptt: int = 35  # paper Sec. 4.2
    epochs: int = 100  # authors' code main.py (the paper does not say)
    train_tokens: int = 0  # 0: the whole split
    valid_tokens: int = 0
    test_tokens: int = 0

    def validate(self) -> None:
        self._check_range("init_scale", 0, low_open=True, finite=True)
        self._check_range("lr", 0, low_open=True, finite=True)
        # the divisor of the learning rate after an epoch without a better validation perplexity
        # (WordLMTask.end_epoch): 1 keeps it; below 1 would raise it
        self._check_range("lr_decay", 1, finite=True)
        self._check_range("clip_norm", 0, low_open=True)
        # batchify cuts a split into batch_size streams; an epoch's first window needs bptt + 1
        # rows (WordLMTask.batches), an evaluation's 2 (WordLMTask.perplexities)
        self._check_limit("train_tokens", self.batch_size * (self.bptt + 1),
                          "one training window: batch_size * (bptt + 1)")
        for name in ("valid_tokens", "test_tokens"):
            self._check_limit(name, 2 * self.batch_size, "one step of each of the batch_size streams: 2 * batch_size")


@functools.lru_cache(maxsize=1)
def corpus():
    """The corpus, read and verified once per process (every run of a sweep worker shares it)."""
    return load_ptb()


def _exp(nll: float) -> float:
    """A perplexity: exp(nll), infinite where it overflows (a model blown up by its training)."""
    return math.exp(nll) if nll < 709.78 else math.inf


def _detach(state):
    return tuple(s.detach() for s in state)


class WordLMTask(Task):
    progress_metric = "valid_ppl"
    # A group's runs share the corpus, the model's sizes and the schedule's length; every run reads the
    # windows in the same order whatever its seed.
    FUSABLE_FIELDS = ("scheme", "sampling", "recurrent_dropout", "scaling", "input_dropout", "output_dropout",
                      "init_scale", "lr", "lr_decay", "clip_norm")
    batches_depend_on_seed = False
    autocasts = True

    @staticmethod
    def check_data(config: WordLMConfig) -> None:
        check_ptb()

    def __init__(self, cfg: WordLMConfig, device: str, seed: int):
        self.cfg, self.device = cfg, device
        c = corpus()

        def split(tokens, limit):
            return batchify(tokens[:limit] if limit else tokens, cfg.batch_size).to(device)
        self.train_data = split(c.train, cfg.train_tokens)
        self.valid_data = split(c.valid, cfg.valid_tokens)
        self.test_data = split(c.test, cfg.test_tokens)
        self.model = LanguageModel(len(c.vocab), cfg.embedding_size, cfg.hidden_size, Dropout.of(cfg),
                                   cfg.init_scale).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)
        self.state = self._zero_state()  # carried across batches and epochs, never reset (authors' code)
        self.best_valid = math.inf

    def _zero_state(self):
        z = torch.zeros(1, self.cfg.batch_size, self.cfg.hidden_size, device=self.device)
        return (z, z.clone())

    def batches(self, epoch: int) -> List[int]:
        """Start rows of the BPTT windows; the tail shorter than a window is dropped (authors' code)."""
        return list(range(0, self.train_data.shape[0] - self.cfg.bptt, self.cfg.bptt))

    @classmethod
    def group_bytes(cls, cfg, runs: int) -> int:
        return language_models_bytes(runs, len(corpus().vocab), cfg.embedding_size, cfg.hidden_size, cfg.bptt,
                                     cfg.batch_size, optimizer_slots=0)

    @classmethod
    def group_stepper(cls, tasks: Sequence["WordLMTask"], graphed: bool = True) -> StepGraph:
        """One SGD step of each run on the BPTT window at a start row, the runs as one model
        (``models.language_models_nll``), each from its own carried state: a function of the window's
        start row, made once for as long as the group stands, one CUDA graph on a GPU
        (``step_graph.StepGraph``): the window and the runs' carried states (h, c) live in static
        buffers, each run's ``state`` a view of its row. Off the CPU a group is one model
        (``stacked.StackedLanguageModels``: each run's parameters a view of its slice), clipped and
        updated for all runs at once (``updates``), each run's learning rate read from a tensor (plain
        SGD); on a CPU each run computes on its own and ``train.optimise_group`` updates each, its
        parameters a stack of one."""
        tasks = list(tasks)
        cfg, device, data = tasks[0].cfg, tasks[0].device, tasks[0].train_data
        graphed = graphed and step_graph.capturable(device)
        window = torch.empty(cfg.bptt + 1, cfg.batch_size, dtype=data.dtype, device=device)
        states = tuple(torch.cat([t.state[i] for t in tasks]) for i in range(2))  # (R, B, H) each
        for r, t in enumerate(tasks):
            t.state = tuple(s[r:r + 1] for s in states)
        models, optimizers = [t.model for t in tasks], [t.optimizer for t in tasks]
        stack = StackedLanguageModels(models) if stacking(models, device) else None
        lrs = LearningRates(optimizers, device)
        clip_norms = torch.tensor([t.cfg.clip_norm for t in tasks], dtype=models[0].out.weight.dtype, device=device)
        if stack:
            sgd = updates.SGD(stack.params, optimizers)
        else:  # each run's parameters a stack of one
            sgds = [updates.SGD(updates.of_one(m.parameters()), [o]) for m, o in zip(models, optimizers)]
        nll_of = stack.nll if stack else functools.partial(language_models_nll, models)

        def load(start: int) -> None:
            window.copy_(data[start:start + cfg.bptt + 1])
            lrs.refresh()

        def body() -> List[Dict[str, torch.Tensor]]:
            with autocast(tasks[0].precision, device):
                nll, new = nll_of(window[:-1], states, window[1:])
            # Authors' code: cross-entropy summed over the 35 steps and averaged over the batch.
            if stack:
                stack.zero_grad()
                (nll * cfg.bptt).sum().backward()
                grads = stack.grads()
                updates.clip_(grads, clip_norms)
                sgd.update(grads, lrs.tensor)
            else:
                optimise_group(tasks, nll * cfg.bptt, clip_norms, sgds, lrs.tensor)
            with torch.no_grad():
                for s, n in zip(states, new):  # carried to the next window (truncated BPTT)
                    s.copy_(n)
            return [{"loss": v} for v in nll.detach().unbind()]
        return StepGraph(load, body, [g for m in models for g in generators(m)], device, enabled=graphed)

    def perplexities(self, data) -> Tuple[float, float]:
        """(exp of the mean token NLL over the split, the authors' mean over windows of exp(window NLL)),
        from a zero state carried across the split's windows."""
        return self.group_perplexities([self], data)[0]

    @classmethod
    def group_perplexities(cls, tasks: Sequence["WordLMTask"], data) -> List[Tuple[float, float]]:
        """``perplexities`` of each of ``tasks`` on ``data``, the runs as one model (in eval mode); on a GPU
        each full window's forward replays one CUDA graph (``step_graph.StepGraph``)."""
        cfg, device = tasks[0].cfg, tasks[0].device
        models = [t.model for t in tasks]
        nll_of = StackedLanguageModels(models, bind=False).nll if stacking(models, device) else \
            functools.partial(language_models_nll, models)
        states = tuple(torch.cat(s) for s in zip(*(t._zero_state() for t in tasks)))  # (R, B, H), carried
        window = torch.empty(cfg.bptt + 1, cfg.batch_size, dtype=data.dtype, device=device)

        def forward(x, y) -> torch.Tensor:
            nll, new = nll_of(x, states, y, reduction="sum")
            for s, n in zip(states, new):
                s.copy_(n)
            return nll
        full = StepGraph(lambda start: window.copy_(data[start:start + cfg.bptt + 1]),
                         lambda: forward(window[:-1], window[1:]), [], device, enabled=step_graph.capturable(device))
        totals, count, per_window = [0.0] * len(tasks), 0, [[] for _ in tasks]
        for start in range(0, data.shape[0] - 1, cfg.bptt):
            y = data[start + 1:start + 1 + cfg.bptt]
            nll = full(start) if y.shape[0] == cfg.bptt else forward(data[start:start + y.shape[0]], y)
            count += y.numel()
            for r, v in enumerate(nll.tolist()):  # one transfer a window for the group
                totals[r] += v
                per_window[r].append(_exp(v / y.numel()))
        full.release()
        return [(_exp(total / count), sum(w) / len(w)) for total, w in zip(totals, per_window)]

    @classmethod
    def group_evaluate(cls, tasks, epoch: int, train_stats) -> List[Dict[str, Optional[float]]]:
        """Each run's validation perplexity every epoch; its test perplexity only where the table needs it:
        when validation improves (the best-validation model) and at the last epoch (the final model). The
        group's validation, then the test of the runs that need it, each as one model."""
        valid = cls.group_perplexities(tasks, tasks[0].valid_data)
        tested = [t for t, (v, _) in zip(tasks, valid) if v < t.best_valid or epoch == t.cfg.epochs - 1]
        test = dict(zip(map(id, tested), cls.group_perplexities(tested, tested[0].test_data))) if tested else {}
        return [{"train_ppl": _exp(s["loss"]), "valid_ppl": v, "test_ppl": test.get(id(t), (None, None))[0],
                 "valid_ppl_authors": va, "test_ppl_authors": test.get(id(t), (None, None))[1],
                 "lr": t.optimizer.param_groups[0]["lr"]}
                for t, s, (v, va) in zip(tasks, train_stats, valid)]

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        if metrics["valid_ppl"] < self.best_valid:
            self.best_valid = metrics["valid_ppl"]
        else:  # paper Sec. 4.2: divide the learning rate by 1.5
            for g in self.optimizer.param_groups:
                g["lr"] /= self.cfg.lr_decay

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, float]:
        """The final model's perplexities (as the authors test), and those of the best-validation epoch."""
        at_best = best_epoch(curves, "ppl")
        return {**curves[-1], "best_epoch": at_best["epoch"], "best_valid_ppl": at_best["valid_ppl"],
                "best_test_ppl": at_best["test_ppl"], "best_test_ppl_authors": at_best["test_ppl_authors"]}

    def state_dict(self) -> Dict[str, Any]:
        return {"state": tuple(s.clone() for s in self.state), "best_valid": self.best_valid}  # not a group's views

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.state = tuple(s.to(self.device) for s in state["state"])
        self.best_valid = state["best_valid"]


def grid(scale: str, cells=table_cells, **overrides):
    """Table 2's 26 runs: no recurrent dropout, and scheme x rate x sampling, each without and with
    forward dropout; recurrent masks with the `paper` scaling."""
    return [(label, WordLMConfig.at_scale(scale, **{**kw, **overrides})) for label, kw in cells()]


def headline_grid(scale: str, **overrides):
    """No dropout and each scheme's best cell of Table 2 (by the paper's numbers), for the seeds study."""
    return grid(scale, cells=lambda: headline_cells(2), **overrides)


def conjecture_grid(scale: str, **overrides):
    """gal+semeniuta at both rates and samplings, without and with forward dropout (end of Sec. 3)."""
    return grid(scale, cells=conjecture_cells, **overrides)


def pilot_grid(scale: str, **overrides):
    """No dropout and the paper's best cell, without forward dropout: the pilot of a new scale."""
    return grid(scale, cells=lambda: pilot_cells(2), **overrides)


GRIDS = {"table": grid, "headline": headline_grid, "conjecture": conjecture_grid, "pilot": pilot_grid}
