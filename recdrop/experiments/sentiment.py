"""Twitter sentiment, SemEval message-level polarity (paper Section 4.5, Table 5).

Words are fed one by one and the label is read at the last step: static pretrained embeddings ->
forward dropout 0.2 -> one recurrent layer (RNN, LSTM or GRU) of 500 relu units with our
recurrent dropout, per-step masks, 0.0 or 0.25 -> forward dropout 0.5 -> linear to the 3 classes.
RMSProp at lr 0.001; the rest as in the NER task (Sec. 4.4). The paper pre-trains on 1M weakly
labelled tweets, which were never released: the pre-training step is here (distant labels from
emoticons, a corpus path to plug in), and the table is run without it unless a corpus is given.

This module trains the runs; their tables, claims and figures are ``sentiment_chapter``'s.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F

from ..data.embeddings import GLOVE, PAD, UNK, check_vectors, embedding_table
from ..data.semeval import LABELS, TEST_SETS, check_semeval, distant_label, load_semeval, semeval_f1, tokenize
from ..models import Dropout, SequenceClassifier
from ..train import Task, epoch_generator
from .cell_grid import RMSPropConfig, cell_rate_grid, check_cell, with_torch_rmsprop


@dataclasses.dataclass(frozen=True)
class SentimentConfig(RMSPropConfig):
    experiment = "sentiment"
    SCALES = {
        "paper": {},
        # The 6-run grid sized for a 2-core CPU: 128 units (paper 500), 6 epochs.
        "quick": dict(hidden_size=128, epochs=6),
        "ci": dict(hidden_size=16, epochs=2, train_messages=300, eval_messages=100),
    }
    POSITIVE = ("hidden_size", "epochs", "batch_size")
    SHOWN_AS = {"train_messages": {0: "all"}, "eval_messages": {0: "all"}, "pretrain_corpus": {"": "none"}}

    cell: str = "LSTM"  # Table 5's row groups
    recurrent_dropout: float = 0.0  # Table 5's rows: 0.0 or 0.25
    scheme: str = "semeniuta"
    sampling: str = "per-step"  # paper Sec. 4.5
    scaling: str = "paper"  # Eq. 3, as in the other tables
    nonlinearity: str = "relu"  # as in NER (paper Sec. 4.5: "all the other settings as in NER")
    input_dropout: float = 0.2  # as in NER
    output_dropout: float = 0.5  # as in NER
    hidden_size: int = 500  # paper Sec. 4.5
    embeddings: str = GLOVE  # as in NER (paper: word2vec, not available here)
    lr: float = 0.001  # paper Sec. 4.5: RMSProp (rho, its decay, the form and clipping as in NER)
    epochs: int = 20  # not in the paper
    batch_size: int = 32  # not in the paper
    pretrain_corpus: str = ""  # a text file, one tweet per line, labelled by its emoticons; "" = none
    pretrain_epochs: int = 1
    train_messages: int = 0  # 0: all
    eval_messages: int = 0

    def validate(self) -> None:
        super().validate()
        check_cell(self.cell)
        if self.pretrain_corpus and not Path(self.pretrain_corpus).exists():
            raise ValueError(f"pretrain_corpus={self.pretrain_corpus!r} does not exist")
        for name in ("pretrain_epochs", "train_messages", "eval_messages"):  # messages: 0 is all, one is enough
            self._check_range(name, 0)


def read_pretrain_corpus(path: str, limit: int = 0):
    """The weakly labelled messages of a corpus file (one tweet per line), by their emoticons."""
    out = []
    with Path(path).open(encoding="utf-8", errors="replace") as f:
        for line in f:
            m = distant_label(line)
            if m is not None:
                out.append(m)
                if limit and len(out) >= limit:
                    break
    return out


_DATA_CACHE: Dict[str, Any] = {}


def data(embeddings: str, train_messages: int = 0, eval_messages: int = 0, pretrain_corpus: str = ""):
    """(the SemEval sets cut to the limits (0: all) and tokenized, with the weakly labelled corpus
    as ``"pretrain"`` when given; word -> row over all their words; embedding table; source;
    notes), cached per arguments."""
    key = (embeddings, train_messages, eval_messages, pretrain_corpus)
    if key not in _DATA_CACHE:
        d = load_semeval()
        sets = {"train": d.train[:train_messages or None], "valid": d.valid[:eval_messages or None],
                **{f"test:{k}": v[:eval_messages or None] for k, v in d.tests.items()}}
        if pretrain_corpus:
            sets["pretrain"] = read_pretrain_corpus(pretrain_corpus)
        tokens = {k: [(tokenize(m.text), m.label) for m in v] for k, v in sets.items()}
        word_row, table, source = embedding_table({w for v in tokens.values() for ws, _ in v for w in ws}, embeddings)
        _DATA_CACHE[key] = (tokens, word_row, torch.from_numpy(table), source, d.notes)
    return _DATA_CACHE[key]


def encode(messages, word_row: Dict[str, int]):
    """(``(T, N)`` word rows padded with PAD, lengths, label ids) of tokenized messages."""
    lengths = torch.tensor([max(1, len(ws)) for ws, _ in messages])
    rows = torch.full((int(lengths.max()), len(messages)), PAD, dtype=torch.long)
    for j, (ws, _) in enumerate(messages):
        ids = [word_row.get(w, UNK) for w in ws] or [UNK]
        rows[:len(ids), j] = torch.tensor(ids)
    labels = torch.tensor([LABELS.index(label) for _, label in messages])
    return rows, lengths, labels


def classifier(cfg: SentimentConfig, vectors: torch.Tensor) -> SequenceClassifier:
    """The model of Sec. 4.5: static word vectors, one recurrent layer read at each message's last word."""
    return SequenceClassifier(cfg.cell, vectors.shape[1], cfg.hidden_size, len(LABELS), Dropout.of(cfg),
                              vectors=vectors, nonlinearity=cfg.nonlinearity)


class SentimentTask(Task):
    progress_metric = "valid_f1"

    @staticmethod
    def check_data(config: SentimentConfig) -> None:
        check_semeval()
        check_vectors(config.embeddings)

    def __init__(self, cfg: SentimentConfig, device: str, seed: int):
        self.cfg, self.device, self.seed = cfg, device, seed
        tokens, self.word_row, vectors, self.embeddings_source, self.notes = data(
            cfg.embeddings, cfg.train_messages, cfg.eval_messages, cfg.pretrain_corpus)
        self.train = encode(tokens["train"], self.word_row)
        self.valid = encode(tokens["valid"], self.word_row)
        self.tests = {name: encode(tokens[f"test:{name}"], self.word_row) for name in TEST_SETS}
        self.model = classifier(cfg, vectors).to(device)
        self.optimizer = cfg.make_optimizer(self.model)
        self.weak = tokens.get("pretrain", [])
        self.pretrained = 0  # messages of pre-training done: a stage of a run that starts (``begin``)

    def begin(self) -> None:
        """The pre-training stage, where there is a corpus (``pretrain``): once, when the run starts; a
        resumed run's checkpoint holds its result."""
        if self.cfg.pretrain_corpus:
            self.pretrained = self.pretrain(self.weak)

    def state_dict(self) -> Dict[str, Any]:
        return {"pretrained": self.pretrained}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.pretrained = state.get("pretrained", 0)

    def pretrain(self, weak) -> int:
        """Distant supervision (Severyn and Moschitti 2015): ``pretrain_epochs`` over the weakly
        labelled, tokenized messages before the SemEval training; returns how many were used."""
        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.cfg.pretrain_epochs):
            for idx in torch.randperm(len(weak), generator=g).split(self.cfg.batch_size):
                rows, lengths, labels = encode([weak[i] for i in idx.tolist()], self.word_row)  # one batch at a time
                self._step(rows, lengths, labels, torch.arange(len(labels)))
        return len(weak)

    def batches(self, epoch: int) -> List[torch.Tensor]:
        g = epoch_generator(self.seed, epoch)
        return list(torch.randperm(len(self.train[2]), generator=g).split(self.cfg.batch_size))

    def _step(self, rows, lengths, labels, idx) -> Dict[str, float]:
        n = int(lengths[idx].max())
        logits = self.model(rows[:n, idx].to(self.device), lengths[idx].to(self.device))
        loss = F.cross_entropy(logits, labels[idx].to(self.device))
        grad_norm = self.optimise(loss, self.cfg.clip_norm).item()
        return {"loss": loss.item(), "grad_norm": grad_norm, "clipped": float(grad_norm > self.cfg.clip_norm > 0)}

    def train_step(self, idx: torch.Tensor) -> Dict[str, float]:
        return self._step(*self.train, idx)

    @torch.no_grad()
    def f1(self, encoded, batch: int = 256) -> float:
        rows, lengths, labels = encoded
        self.model.eval()
        pred = []
        for idx in torch.arange(len(labels)).split(batch):
            n = int(lengths[idx].max())
            pred.append(self.model(rows[:n, idx].to(self.device), lengths[idx].to(self.device)).argmax(-1).cpu())
        self.model.train()
        return semeval_f1([LABELS[i] for i in labels.tolist()], [LABELS[i] for i in torch.cat(pred).tolist()])

    def evaluate(self, epoch: int, train_stats: Dict[str, float]) -> Dict[str, Optional[float]]:
        """Validation F1 every epoch, and every test set's (cheap: about 11k messages in all); the mean
        gradient norm before clipping, and the fraction of the epoch's steps that were clipped."""
        return {"train_loss": train_stats["loss"], "grad_norm": train_stats["grad_norm"],
                "clipped": train_stats["clipped"], "valid_f1": self.f1(self.valid),
                **{f"test_f1:{name}": self.f1(enc) for name, enc in self.tests.items()},
                "lr": self.optimizer.param_groups[0]["lr"]}

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] *= self.cfg.lr_decay

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, Any]:
        """The final model's test F1 per set (Table 5), the best-validation epoch's beside it."""
        best = max(curves, key=lambda c: c["valid_f1"])
        return {**curves[-1], "best_epoch": best["epoch"],
                **{f"best_test_f1:{name}": best[f"test_f1:{name}"] for name in TEST_SETS},
                "embeddings": self.embeddings_source, "pretrained_messages": self.pretrained}


def grid(scale: str, **overrides):
    """Table 5's runs: each cell without and with 0.25 recurrent dropout; each run is scored on
    every test set."""
    return cell_rate_grid(scale, SentimentConfig, **overrides)


GRIDS = {"table": grid, "torch-rmsprop": with_torch_rmsprop(grid)}
