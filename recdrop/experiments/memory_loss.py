"""Memory loss, measured (beyond the paper: Sec. 3's argument, Eqs. 17-19, and Sec. 4.1's remark on
longer sequences).

LSTMs are trained on Temporal Order exactly as Table 1's `short` cells are (same config and seed: with
the same code, the same weights), then probed:
- the memory trace (``recdrop.memory.memory_trace``) and the mean ||c_t|| over a long sequence, at
  test (eval mode) and in training (masks on);
- the accuracy on Temporal Order sequences longer than those trained on.

This module trains the runs; their tables, claims and figures are ``memory_loss_chapter``'s.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Tuple

import torch

from ..memory import cell_states, memory_trace
from .temporal_order import LENGTHS, TemporalOrderConfig, TemporalOrderTask, generate


@dataclasses.dataclass(frozen=True)
class MemoryLossConfig(TemporalOrderConfig):
    experiment = "memory_loss"
    SCALES = {**TemporalOrderConfig.SCALES,
              "ci": {**TemporalOrderConfig.SCALES["ci"], "probe_steps": 20, "probe_sequences": 16,
                     "test_lengths": (15, 30)}}

    length: int = LENGTHS["short"]  # trained on `short`, the length every scheme learns
    probe_steps: int = 60  # four times the training length
    probe_sequences: int = 256
    test_lengths: Tuple[int, ...] = (15, 30, 60, 120)

    def validate(self) -> None:
        super().validate()
        if self.probe_steps < 1 or self.probe_sequences < 1:
            raise ValueError(f"probe_steps and probe_sequences must be positive, got {self.probe_steps} "
                             f"and {self.probe_sequences}")
        if not self.test_lengths or any(not isinstance(n, int) or n < 6 for n in self.test_lengths):
            raise ValueError(f"test_lengths must be ints of at least 6, got {self.test_lengths!r}")


def _rounded(t: torch.Tensor) -> List[float]:
    return [float(f"{v:.6g}") for v in t.tolist()]


class MemoryLossTask(TemporalOrderTask):
    """Temporal Order training; the probes run once, on the final model."""
    def accuracy_at(self, length: int, gen: torch.Generator) -> float:
        x, y = generate(self.cfg.test_sequences, length, gen)
        correct = 0
        for xs, ys in zip(x.split(1024, dim=1), y.split(1024)):
            logits = self.model(xs.to(self.device))
            correct += (logits.argmax(-1).cpu() == ys).sum().item()
        return correct / y.numel()

    def probe(self, training: bool) -> Dict[str, List[float]]:
        gen = torch.Generator().manual_seed(self.seed + 7)
        x, _ = generate(self.cfg.probe_sequences, self.cfg.probe_steps, gen)
        x = x.to(self.device)
        rnn = self.model.rnn.train(training)
        try:
            norm = cell_states(rnn, x).norm(dim=-1).mean(dim=1)
            trace = memory_trace(rnn, x, gen)
        finally:
            rnn.eval()
        return {"cell_norm": _rounded(norm), "memory": _rounded(trace)}

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, Any]:
        self.model.eval()
        gen = torch.Generator().manual_seed(self.seed + 11)
        with torch.no_grad():
            by_length = {str(n): self.accuracy_at(n, gen) for n in self.cfg.test_lengths}
            probes = {"test": self.probe(False), "train": self.probe(True)}
        return {**curves[-1], "test_acc_by_length": by_length, "probe": probes}


SETTINGS = (("none", "-", "-"), ("moon", "per-step", "paper"), ("moon", "per-sequence", "paper"),
            ("moon", "per-step", "inverted"), ("moon", "per-sequence", "inverted"), ("gal", "per-step", "paper"),
            ("semeniuta", "per-step", "paper"), ("semeniuta", "per-sequence", "paper"))
KEYS = ["scheme", "sampling", "scaling"]


def grid(scale: str, **overrides):
    """No recurrent dropout; Moon per step and per sequence with both scalings; Gal and ours (paper
    scaling), all at Table 1's rate."""
    cells = []
    for scheme, sampling, scaling in SETTINGS:
        kw = (dict(recurrent_dropout=0.0) if scheme == "none"
              else dict(scheme=scheme, sampling=sampling, scaling=scaling))
        cells.append(({"scheme": scheme, "sampling": sampling, "scaling": scaling},
                      MemoryLossConfig.at_scale(scale, **{**kw, **overrides})))
    return cells


GRIDS = {"table": grid}
