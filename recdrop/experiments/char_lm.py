"""Character-level language modelling on Penn Treebank (paper Section 4.3, Table 3).

Characters embedded in 256 dimensions -> forward dropout -> one recdrop.LSTM of 1024 units with
recurrent dropout -> forward dropout -> linear to the 50 symbols; Adam on non-overlapping sequences
of 100 characters. The authors' code does not cover this task, so where the paper is silent the
choice is ours, and the field says so.

This module trains the runs; their tables, claims and figures are ``char_lm_chapter``'s.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Dict, List, Optional, Sequence

import torch

from .. import step_graph, updates
from ..config import ExperimentConfig
from ..data.ptb import check_ptb_char, load_ptb_char
from ..models import Dropout, LanguageModel, generators, language_models_bytes, language_models_nll
from ..stacked import StackedLanguageModels, stacking
from ..step_graph import FullBatches, LearningRates, StepGraph
from ..train import Task, autocast, epoch_generator, optimise_group
from .lm_tables import (
    FORWARD,
    best_epoch,
    conjecture_cells,
    headline_cells,
    pilot_cells,
    table_cells,
)

LN2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class CharLMConfig(ExperimentConfig):
    experiment = "char_lm"
    SCALES = {
        "paper": {},
        # The 28-run grid (Table 3's 26 and the batch-size check's 2) sized for a 2-core CPU:
        # embedding 32 and LSTM 128 (paper 256 and 1024), the first 300k training characters (of
        # 5.0M), 5 epochs with the decay from epoch 3, batch 32, the first 50k characters of the
        # validation and test sets. An under-trained small model: a smoke test of the pipeline, not
        # of the paper's claims.
        "quick": dict(embedding_size=32, hidden_size=128, train_chars=300_000, valid_chars=50_000,
                      test_chars=50_000, epochs=5, decay_from_epoch=3, batch_size=32),
        # The paper's embedding, optimiser and schedule in full (Adam 1e-3, 50 epochs, the 0.97 decay
        # from epoch 10) with an LSTM of 512 (paper 1024), the first 400k of the 5.0M training
        # characters at batch 16 (250 updates an epoch, 12.5k in all), and the first 100k characters
        # of the validation and test sets. At this size the model without dropout over-fits (at 256
        # units it only flattens), and a budget of fewer updates under-fits (book/deviations.md).
        "reduced": dict(hidden_size=512, train_chars=400_000, valid_chars=100_000, test_chars=100_000,
                        batch_size=16),
        "ci": dict(embedding_size=8, hidden_size=16, seq_len=20, train_chars=4_000, valid_chars=1_000,
                   test_chars=1_000, epochs=2, decay_from_epoch=2, batch_size=8),
    }
    POSITIVE = ("embedding_size", "hidden_size", "batch_size", "seq_len", "epochs", "decay_from_epoch")
    SHOWN_AS = {name: {0: "all"} for name in ("train_chars", "valid_chars", "test_chars")}

    scheme: str = "semeniuta"
    sampling: str = "per-step"
    recurrent_dropout: float = 0.0
    scaling: str = "paper"  # Eq. 3, as in Table 2 (the paper's Sec. 3 scaling; the authors' LM code)
    input_dropout: float = 0.0  # paper Table 3 caption: 0.2 with forward dropout
    output_dropout: float = 0.0  # paper Table 3 caption: 0.5 with forward dropout
    embedding_size: int = 256  # paper Sec. 4.3
    hidden_size: int = 1024  # paper Sec. 4.3
    init_scale: float = 0.01  # paper Sec. 4.3: every parameter uniform in [-0.01, 0.01]
    lr: float = 0.001  # paper Sec. 4.3: Adam
    lr_decay: float = 0.97  # paper Sec. 4.3: lr multiplied by 0.97 after every epoch ...
    decay_from_epoch: int = 10  # ... starting from epoch 10 (1-based: after epochs 10, 11, ...)
    clip_norm: float = 10.0  # paper Sec. 4.3: "MaxNorm gradient clipping with threshold 10" (global norm)
    seq_len: int = 100  # paper Sec. 4.3: non-overlapping sequences of 100 characters
    epochs: int = 50  # paper Sec. 4.3
    # Neither the paper nor the authors' code gives a batch size. 64 sequences of 100 characters:
    # about 780 Adam updates an epoch (39k in all), and enough work per step to keep a GPU busy at
    # 1024 units. The grid reruns two cells at half the batch to show the choice does not drive
    # the results (batch_check).
    batch_size: int = 64
    train_chars: int = 0  # 0: the whole split
    valid_chars: int = 0
    test_chars: int = 0

    def validate(self) -> None:
        self._check_range("init_scale", 0, low_open=True, finite=True)
        self._check_range("lr", 0, low_open=True, finite=True)
        # multiplies the learning rate after every epoch from decay_from_epoch (CharLMTask.end_epoch)
        self._check_range("lr_decay", 0, 1, low_open=True)
        self._check_range("clip_norm", 0, low_open=True)
        # a split of n characters gives (n - 1) // seq_len sequences (``sequences``)
        self._check_limit("train_chars", self.batch_size * self.seq_len + 1,
                          "one batch of batch_size sequences: batch_size * seq_len + 1")
        for name in ("valid_chars", "test_chars"):
            self._check_limit(name, self.seq_len + 1, "one sequence: seq_len + 1")


@functools.lru_cache(maxsize=1)
def corpus():
    """The corpus, read and verified once per process (every run of a sweep worker shares it)."""
    return load_ptb_char()


def sequences(stream: torch.Tensor, seq_len: int, limit: int = 0) -> torch.Tensor:
    """``(N, seq_len + 1)``: non-overlapping windows of ``seq_len`` inputs, each with the next
    character as the last target (window i covers characters ``i*seq_len .. (i+1)*seq_len``); the
    tail that does not fill a window is dropped."""
    if limit:
        stream = stream[:limit]
    n = (stream.numel() - 1) // seq_len
    idx = torch.arange(n).unsqueeze(1) * seq_len + torch.arange(seq_len + 1)
    return stream[idx]


class CharLMTask(Task):
    """Each sequence starts from a zero state (the paper trains on non-overlapping sequences; we
    score validation and test the same way), shuffled every epoch; bits per character are the
    mean NLL over every predicted character, in bits."""
    progress_metric = "valid_bpc"
    # A group's runs share the corpus, the model's sizes, the batch size and the schedule's length, and
    # one seed: it orders the sequences of each epoch (``batches``).
    FUSABLE_FIELDS = ("scheme", "sampling", "recurrent_dropout", "scaling", "input_dropout", "output_dropout",
                      "init_scale", "lr", "lr_decay", "decay_from_epoch", "clip_norm")
    autocasts = True

    @staticmethod
    def check_data(config: CharLMConfig) -> None:
        check_ptb_char()

    def __init__(self, cfg: CharLMConfig, device: str, seed: int):
        self.cfg, self.device, self.seed = cfg, device, seed
        c = corpus()
        self.train_seqs = sequences(c.train, cfg.seq_len, cfg.train_chars).to(device)
        self.valid_seqs = sequences(c.valid, cfg.seq_len, cfg.valid_chars).to(device)
        self.test_seqs = sequences(c.test, cfg.seq_len, cfg.test_chars).to(device)
        self.model = LanguageModel(len(c.vocab), cfg.embedding_size, cfg.hidden_size, Dropout.of(cfg),
                                   cfg.init_scale).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.best_valid = math.inf
        self.best_state: Optional[Dict[str, torch.Tensor]] = None  # the weights of the best validation so far

    def batches(self, epoch: int) -> List[torch.Tensor]:
        """The training sequences in a fresh order each epoch (fixed by the seed and the epoch)."""
        g = epoch_generator(self.seed, epoch)
        order = torch.randperm(self.train_seqs.shape[0], generator=g)
        return list(order.split(self.cfg.batch_size))

    @classmethod
    def group_bytes(cls, cfg, runs: int) -> int:
        return language_models_bytes(runs, len(corpus().vocab), cfg.embedding_size, cfg.hidden_size, cfg.seq_len,
                                     cfg.batch_size, optimizer_slots=2)

    @classmethod
    def eager_step(cls, tasks: Sequence["CharLMTask"], adams: Sequence[updates.Adam], lrs: LearningRates,
                   clip_norms: torch.Tensor, idx: torch.Tensor) -> List[Dict[str, torch.Tensor]]:
        """One Adam step of each run on the sequences ``idx``, each run on its own
        (``models.language_models_nll``), each sequence from a zero state, each run's parameters a stack of
        one for its clipping and update ``adams[r]`` (``train.optimise_group``): the step on a CPU."""
        lrs.refresh()
        for adam in adams:
            adam.count()
        nll = cls._batch_nll(tasks, idx, functools.partial(language_models_nll, [t.model for t in tasks]))
        optimise_group(tasks, nll, clip_norms, adams, lrs.tensor)
        return [{"loss": v} for v in nll.detach()]

    @staticmethod
    def _batch_nll(tasks: Sequence["CharLMTask"], idx: torch.Tensor, nll_of) -> torch.Tensor:
        """Each run's mean NLL ``(R,)`` on the training sequences ``idx``, each from a zero state, by
        ``nll_of`` (``models.language_models_nll``'s arguments after the models), the forward under the
        runs' precision (``train.autocast``)."""
        seqs = tasks[0].train_seqs[idx.to(tasks[0].train_seqs.device)].t()  # (T + 1, B)
        zero = tasks[0].model.out.weight.new_zeros(len(tasks), seqs.shape[1], tasks[0].cfg.hidden_size)
        with autocast(tasks[0].precision, tasks[0].device):
            nll, _ = nll_of(seqs[:-1], (zero, zero), seqs[1:])
        return nll

    @classmethod
    def group_stepper(cls, tasks: Sequence["CharLMTask"], graphed: bool = True):
        """One Adam step of each run on a batch of sequences, as a function of the batch, made once for as
        long as the group stands. Off the CPU a group is one model
        (``stacked.StackedLanguageModels``, each run's parameters a view of its slice), clipped and
        stepped by Adam for all runs at once (``updates.Adam``, each run's learning rate read from
        a tensor, ``step_graph.LearningRates``); on a GPU each full batch's step replays one CUDA graph
        (``step_graph.StepGraph``, a run alone a stack of one) and an epoch's last, smaller batch runs
        eagerly. On a CPU each run computes on its own and updates as a stack of one (``eager_step``)."""
        tasks = list(tasks)
        models, device = [t.model for t in tasks], tasks[0].device
        graphed = graphed and step_graph.capturable(device)
        optimizers = [t.optimizer for t in tasks]
        lrs = LearningRates(optimizers, device)
        clip_norms = torch.tensor([t.cfg.clip_norm for t in tasks], dtype=models[0].out.weight.dtype, device=device)
        if not (graphed or stacking(models, device)):
            adams = [updates.Adam(updates.of_one(m.parameters()), [list(m.parameters())], [o])
                     for m, o in zip(models, optimizers)]
            return functools.partial(cls.eager_step, tasks, adams, lrs, clip_norms)
        stack = StackedLanguageModels(models)
        adam = updates.Adam(stack.params, [list(m.parameters()) for m in models], optimizers)
        rows = torch.empty(tasks[0].cfg.batch_size, dtype=torch.long, device=device)  # a full batch's sequences

        def begin() -> None:  # the host's part of a step: the rates as the schedule left them, Adam's counts
            lrs.refresh()
            adam.count()

        def body(idx: torch.Tensor) -> List[Dict[str, torch.Tensor]]:
            nll = cls._batch_nll(tasks, idx, stack.nll)
            stack.zero_grad()
            nll.sum().backward()
            grads = stack.grads()
            updates.clip_(grads, clip_norms)
            adam.update(grads, lrs.tensor)
            return [{"loss": v} for v in nll.detach().unbind()]

        def load(idx: torch.Tensor) -> None:
            begin()
            rows.copy_(idx, non_blocking=True)  # from the host without waiting for the device (staged by CUDA)

        def eager(idx: torch.Tensor) -> List[Dict[str, torch.Tensor]]:
            begin()
            return body(idx.to(device, non_blocking=True))
        graph = StepGraph(load, lambda: body(rows), [g for m in models for g in generators(m)], device,
                          enabled=graphed)
        return FullBatches(graph, lambda idx: idx.shape == rows.shape, eager)

    @torch.no_grad()
    def bpc(self, seqs: torch.Tensor, batch: int = 256) -> float:
        return self.group_bpc([self], seqs, batch)[0]

    @classmethod
    @torch.no_grad()
    def group_bpc(cls, tasks: Sequence["CharLMTask"], seqs: torch.Tensor, batch: int = 256) -> List[float]:
        """Each run's bits per character on ``seqs``, the runs as one model, each sequence from a zero
        state; on a GPU each full chunk's forward replays one CUDA graph (``step_graph.StepGraph``)."""
        device, weight = tasks[0].device, tasks[0].model.out.weight
        models = [t.model for t in tasks]
        nll_of = StackedLanguageModels(models, bind=False).nll if stacking(models, device) else \
            functools.partial(language_models_nll, models)
        window = torch.empty(seqs.shape[1], batch, dtype=seqs.dtype, device=seqs.device)  # a full chunk, (T + 1, B)

        def forward(chunk: torch.Tensor) -> torch.Tensor:
            zero = weight.new_zeros(len(tasks), chunk.shape[1], tasks[0].cfg.hidden_size)
            return nll_of(chunk[:-1], (zero, zero), chunk[1:], reduction="sum")[0]
        full = StepGraph(lambda chunk: window.copy_(chunk.t()), lambda: forward(window), [], device,
                         enabled=step_graph.capturable(device))
        totals = torch.zeros(len(tasks), dtype=torch.float64, device=weight.device)
        try:
            for chunk in seqs.split(batch):  # each run's total in float64, in order, read once
                totals += full(chunk) if chunk.shape[0] == batch else forward(chunk.t())
        finally:
            full.release()
        return [total / (seqs.shape[0] * (seqs.shape[1] - 1)) / LN2 for total in totals.tolist()]

    @classmethod
    def group_evaluate(cls, tasks, epoch: int, train_stats) -> List[Dict[str, Optional[float]]]:
        """Each run's validation bpc every epoch; its test bpc at the last epoch (the final model), the
        group's each as one model. Where validation improves, the weights are kept (``best_state``), to be
        tested once, at the end (``final_metrics``): with dropout validation improves in most epochs, and
        testing at each improvement doubled the evaluation."""
        valid = cls.group_bpc(tasks, tasks[0].valid_seqs)
        last = epoch == tasks[0].cfg.epochs - 1
        test = cls.group_bpc(tasks, tasks[0].test_seqs) if last else [None] * len(tasks)
        out = []
        for t, s, v, te in zip(tasks, train_stats, valid, test):
            if v < t.best_valid:
                t.best_state = {k: w.detach().clone() for k, w in t.model.state_dict().items()}
            out.append({"train_bpc": s["loss"] / LN2, "valid_bpc": v, "test_bpc": te,
                        "lr": t.optimizer.param_groups[0]["lr"]})
        return out

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        self.best_valid = min(self.best_valid, metrics["valid_bpc"])
        if epoch + 1 >= self.cfg.decay_from_epoch:  # paper Sec. 4.3
            for g in self.optimizer.param_groups:
                g["lr"] *= self.cfg.lr_decay

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, float]:
        """The final model's bpc (what Table 3 shows here), and the best-validation epoch's: its test bpc
        from its curve where it was tested then (the last epoch, or an improvement under the code before
        the weights were kept), else from the weights kept at that epoch."""
        at_best = best_epoch(curves, "bpc")
        best_test = at_best["test_bpc"]
        if best_test is None and self.best_state is not None:
            final = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.model.load_state_dict(self.best_state)
            self.model.eval()
            best_test = self.bpc(self.test_seqs)
            self.model.load_state_dict(final)
        return {**curves[-1], "best_epoch": at_best["epoch"], "best_valid_bpc": at_best["valid_bpc"],
                "best_test_bpc": best_test}

    def state_dict(self) -> Dict[str, Any]:
        return {"best_valid": self.best_valid, "best_state": self.best_state}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.best_valid = state["best_valid"]
        self.best_state = state.get("best_state")  # absent from checkpoints of the code before it


def _default_batch_grid(cells, scale: str, **overrides):
    return [({**label, "batch": "default"}, CharLMConfig.at_scale(scale, **{**kw, **overrides}))
            for label, kw in cells]


def headline_grid(scale: str, **overrides):
    """No dropout and each scheme's best cell of Table 3 (by the paper's numbers), for the seeds study."""
    return _default_batch_grid(headline_cells(3), scale, **overrides)


def conjecture_grid(scale: str, **overrides):
    """gal+semeniuta at both rates and samplings, without and with forward dropout (end of Sec. 3)."""
    return _default_batch_grid(conjecture_cells(), scale, **overrides)


def pilot_grid(scale: str, **overrides):
    """No dropout and the paper's best cell, without forward dropout: the pilot of a new scale."""
    return _default_batch_grid(pilot_cells(3), scale, **overrides)


def grid(scale: str, **overrides):
    """Table 3's 26 runs, labelled ``batch="default"``, and the batch-size check: no dropout and
    ours 0.25 per-step (without forward dropout) at half the default batch, labelled ``batch="half"``."""
    out = []
    for label, kw in table_cells():
        cfg = CharLMConfig.at_scale(scale, **{**kw, **overrides})
        out.append(({**label, "batch": "default"}, cfg))
        if label["forward"] == next(iter(FORWARD)) and (label["scheme"], label["rate"], label["sampling"]) in (
                ("none", 0.0, "-"), ("semeniuta", 0.25, "per-step")):
            out.append(({**label, "batch": "half"}, dataclasses.replace(cfg, batch_size=max(1, cfg.batch_size // 2))))
    return out


GRIDS = {"table": grid, "headline": headline_grid, "conjecture": conjecture_grid, "pilot": pilot_grid}


def table_rows(rows):
    """The rows of Table 3 itself, without the batch-size check's (rows without a batch label pass)."""
    return [r for r in rows if r.labels.get("batch", "default") == "default"]
