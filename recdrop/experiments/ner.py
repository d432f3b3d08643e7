"""Named entity recognition on CoNLL-2003 (paper Section 4.4, Table 4).

Each step sees a window of 5 words (the word, two before, two after): their static pretrained
embeddings and capitalisation features, concatenated -> forward dropout 0.2 -> one recurrent
layer (RNN, LSTM or GRU) of 1024 relu units with Semeniuta per-sequence recurrent dropout ->
forward dropout 0.5 -> linear to the tags. RMSProp; length expansion: 25 epochs on 5-word spans,
then 10 on 15-word spans; tested on full sentences with conlleval's entity F1. There is no
authors' code for this task: where the paper is silent the choice is ours and the field says so.

This module trains the runs; their tables, claims and figures are ``ner_chapter``'s.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from ..data.conll2003 import check_conll2003, entity_f1, load_conll2003
from ..data.embeddings import GLOVE, PAD, UNK, check_vectors, embedding_table
from ..models import Dropout, Tagger
from ..train import Task, epoch_generator
from .cell_grid import ABLATIONS as CELL_ABLATIONS
from .cell_grid import RMSPropConfig, cell_rate_grid, check_cell, with_torch_rmsprop

CAPS = ("lower", "title", "upper", "mixed", "no letters", "padding")  # capitalisation feature, one-hot


@dataclasses.dataclass(frozen=True)
class NERConfig(RMSPropConfig):
    experiment = "ner"
    ADDED = {**RMSPropConfig.ADDED, "tune_embeddings": False}  # every record before it kept them static
    SCALES = {
        "paper": {},
        # The 6-run grid sized for a 2-core CPU: 256 units (paper 1024), 6 + 3
        # epochs (paper 25 + 10) on the first 5000 of the 14,041 training sentences, validation
        # and test on the first 1000 sentences of each. Smaller and shorter-trained: a smoke test.
        "quick": dict(hidden_size=256, short_epochs=6, long_epochs=3, train_sentences=5000, eval_sentences=1000),
        "ci": dict(hidden_size=16, short_epochs=1, long_epochs=1, train_sentences=200, eval_sentences=100),
    }
    POSITIVE = ("hidden_size", "short_len", "long_len", "batch_size")
    SHOWN_AS = {name: {0: "all"} for name in ("train_sentences", "eval_sentences")}

    cell: str = "LSTM"  # Table 4's columns: RNN, LSTM, GRU
    recurrent_dropout: float = 0.0  # Table 4's rows: 0.0 or 0.25
    scheme: str = "semeniuta"  # paper Sec. 4.4: our recurrent dropout
    sampling: str = "per-sequence"  # paper Sec. 4.4: per-sequence masks
    scaling: str = "paper"  # Eq. 3, as in the other tables (the paper's Sec. 3 form)
    nonlinearity: str = "relu"  # paper Sec. 4.4: relu worked better than tanh
    input_dropout: float = 0.2  # paper Sec. 4.4
    output_dropout: float = 0.5  # paper Sec. 4.4
    hidden_size: int = 1024  # paper Sec. 4.4
    window: int = 5  # paper Sec. 4.4: the word, two before, two after
    embeddings: str = GLOVE  # paper: GoogleNews word2vec (not available here); or a path to that binary
    # paper Sec. 4.4: the word vectors are kept static; True trains them too (the chapter's ablation of
    # the inputs: does the input representation bound the F1 our cells reach?)
    tune_embeddings: bool = False
    short_len: int = 5  # paper Sec. 4.4: length expansion, stage 1 ...
    short_epochs: int = 25
    long_len: int = 15  # ... stage 2
    long_epochs: int = 10
    batch_size: int = 32  # not in the paper
    train_sentences: int = 0  # 0: all
    eval_sentences: int = 0

    def validate(self) -> None:
        super().validate()
        check_cell(self.cell)
        if self.window < 1 or self.window % 2 == 0:
            raise ValueError(f"window must be a positive odd number, got {self.window}")
        for name in ("short_epochs", "long_epochs"):
            self._check_range(name, 0)
        if self.short_epochs + self.long_epochs < 1:
            raise ValueError("short_epochs + long_epochs must be at least 1")
        for name in ("train_sentences", "eval_sentences"):  # 0: all; a sentence is enough
            self._check_range(name, 0)

    @property
    def epochs(self) -> int:
        return self.short_epochs + self.long_epochs


def caps_feature(word: str) -> int:
    """The capitalisation class of ``word`` (an index into CAPS; ``padding`` is for window slots
    outside the sentence)."""
    letters = [c for c in word if c.isalpha()]
    if not letters:
        return CAPS.index("no letters")
    if all(c.islower() for c in letters):
        return CAPS.index("lower")
    if all(c.isupper() for c in letters):
        return CAPS.index("upper")
    if letters[0].isupper() and all(c.islower() for c in letters[1:]):
        return CAPS.index("title")
    return CAPS.index("mixed")


@dataclasses.dataclass
class Split:
    """Every token of a split as rows: its window's word rows and caps classes ``(N, window)``,
    its tag; ``offsets[s]`` is sentence s's first row, ``lengths[s]`` its length."""

    windows: torch.Tensor
    caps: torch.Tensor
    tags: torch.Tensor
    offsets: torch.Tensor
    lengths: torch.Tensor


def make_split(sentences, word_row: Dict[str, int], tag_id: Dict[str, int], window: int) -> Split:
    half = window // 2
    win_rows, win_caps, tags, lengths = [], [], [], []
    pad_caps = CAPS.index("padding")
    for s in sentences:
        rows = [PAD] * half + [word_row.get(w, UNK) for w in s.words] + [PAD] * half
        caps = [pad_caps] * half + [caps_feature(w) for w in s.words] + [pad_caps] * half
        for j in range(len(s.words)):
            win_rows.append(rows[j:j + window])
            win_caps.append(caps[j:j + window])
        tags.extend(tag_id[t] for t in s.tags)
        lengths.append(len(s.words))
    lengths_t = torch.tensor(lengths)
    offsets = torch.cumsum(lengths_t, 0) - lengths_t
    return Split(torch.tensor(win_rows), torch.tensor(win_caps), torch.tensor(tags), offsets, lengths_t)


_DATA_CACHE: Dict[Any, Any] = {}


def data(embeddings: str):
    """(splits, tag names, word vectors as a tensor with the PAD and UNK rows first), cached."""
    if embeddings not in _DATA_CACHE:
        corpus = load_conll2003()
        word_row, table, source = embedding_table({w for split in corpus.values() for s in split for w in s.words},
                                                  embeddings)
        tag_names = sorted({t for s in corpus["train"] for t in s.tags})
        tag_id = {t: i for i, t in enumerate(tag_names)}
        _DATA_CACHE[embeddings] = (corpus, word_row, tag_names, tag_id, torch.from_numpy(table), source)
    return _DATA_CACHE[embeddings]


def epoch_chunks(split: Split, length: int, generator: torch.Generator) -> torch.Tensor:
    """``(n, 2)``: (first row, length) of chunks of at most ``length`` words that cover every token
    of ``split`` once. Each sentence is cut at a random offset, so the cuts move from epoch to
    epoch; a sentence no longer than ``length`` is one chunk."""
    shifts = torch.randint(length, (len(split.lengths),), generator=generator).tolist()
    out = []
    for off, n, shift in zip(split.offsets.tolist(), split.lengths.tolist(), shifts):
        if n <= length:
            out.append((off, n))
            continue
        for start in range(shift - length if shift else 0, n, length):
            a, b = max(start, 0), min(start + length, n)
            out.append((off + a, b - a))
    return torch.tensor(out)


def gather(split: Split, firsts: torch.Tensor, lengths: torch.Tensor, steps: int):
    """Time-major ``(steps, B, ...)`` windows, caps and tags of spans, and the mask of real tokens."""
    pos = torch.arange(steps).unsqueeze(1)  # (T, 1)
    mask = pos < lengths.unsqueeze(0)  # (T, B)
    rows = torch.where(mask, firsts.unsqueeze(0) + pos, torch.zeros_like(mask, dtype=torch.long))
    windows = torch.where(mask.unsqueeze(-1), split.windows[rows], PAD)
    caps = torch.where(mask.unsqueeze(-1), split.caps[rows], CAPS.index("padding"))
    return windows, caps, split.tags[rows], mask


class NERTask(Task):
    progress_metric = "valid_f1"

    @staticmethod
    def check_data(config: NERConfig) -> None:
        check_conll2003()
        check_vectors(config.embeddings)

    def __init__(self, cfg: NERConfig, device: str, seed: int):
        self.cfg, self.device, self.seed = cfg, device, seed
        corpus, word_row, self.tag_names, tag_id, vectors, self.embeddings_source = data(cfg.embeddings)

        def split(name, limit):
            sentences = corpus[name][:limit] if limit else corpus[name]
            return make_split(sentences, word_row, tag_id, cfg.window)
        self.train = split("train", cfg.train_sentences)
        self.valid = split("valid", cfg.eval_sentences)
        self.test = split("test", cfg.eval_sentences)
        self.model = Tagger(cfg.cell, vectors, cfg.window, len(CAPS), cfg.hidden_size, len(self.tag_names),
                            Dropout.of(cfg), cfg.nonlinearity, cfg.tune_embeddings).to(device)
        self.optimizer = cfg.make_optimizer(self.model)

    def span_len(self, epoch: int) -> int:
        return self.cfg.short_len if epoch < self.cfg.short_epochs else self.cfg.long_len

    def like_epoch(self, epoch: int) -> int:
        """The first epoch of ``epoch``'s stage: its spans are as long, so its batches about as many."""
        return 0 if epoch < self.cfg.short_epochs else self.cfg.short_epochs

    def batches(self, epoch: int) -> List[Tuple[int, torch.Tensor]]:
        """(span length, chunks) per batch: every training token once, in chunks of at most the
        stage's span length (``epoch_chunks``), shuffled (fixed by the seed and the epoch)."""
        length = self.span_len(epoch)
        g = epoch_generator(self.seed, epoch)
        chunks = epoch_chunks(self.train, length, g)
        chunks = chunks[torch.randperm(len(chunks), generator=g)]
        return [(length, batch) for batch in chunks.split(self.cfg.batch_size)]

    def train_step(self, batch) -> Dict[str, float]:
        length, chunks = batch
        windows, caps, tags, mask = gather(self.train, chunks[:, 0], chunks[:, 1], length)
        logits = self.model(windows.to(self.device), caps.to(self.device))
        mask = mask.to(self.device)
        loss = F.cross_entropy(logits[mask], tags.to(self.device)[mask])
        grad_norm = self.optimise(loss, self.cfg.clip_norm).item()
        return {"loss": loss.item(), "grad_norm": grad_norm, "clipped": float(grad_norm > self.cfg.clip_norm > 0)}

    @torch.no_grad()
    def predict(self, split: Split, batch: int = 256) -> Tuple[List[List[str]], List[List[str]]]:
        """(true, predicted) tags of every full sentence of ``split``, in its order. Batches hold
        sentences of similar length (padding was three quarters of the work in the split's order)."""
        true: List[List[str]] = [[] for _ in split.lengths]
        pred: List[List[str]] = [[] for _ in split.lengths]
        if not true:
            return true, pred
        self.model.eval()
        for idx in split.lengths.argsort(stable=True).split(batch):
            lengths = split.lengths[idx]
            windows, caps, tags, mask = gather(split, split.offsets[idx], lengths, int(lengths.max()))
            out = self.model(windows.to(self.device), caps.to(self.device)).argmax(-1).cpu()
            for b, (s, n) in enumerate(zip(idx.tolist(), lengths.tolist())):
                true[s] = [self.tag_names[t] for t in tags[:n, b].tolist()]
                pred[s] = [self.tag_names[t] for t in out[:n, b].tolist()]
        self.model.train()
        return true, pred

    def f1(self, split: Split) -> float:
        return entity_f1(*self.predict(split))

    def evaluate(self, epoch: int, train_stats: Dict[str, float]) -> Dict[str, Optional[float]]:
        """Validation and test F1 every epoch (the stages' last epochs give Table 4's two rows; the
        others, what choosing the epoch on validation would give); the mean gradient norm before
        clipping, and the fraction of the epoch's steps that were clipped."""
        return {"train_loss": train_stats["loss"], "grad_norm": train_stats["grad_norm"],
                "clipped": train_stats["clipped"], "span_len": self.span_len(epoch), "valid_f1": self.f1(self.valid),
                "test_f1": self.f1(self.test), "lr": self.optimizer.param_groups[0]["lr"]}

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        for g in self.optimizer.param_groups:  # paper Sec. 4.4
            g["lr"] *= self.cfg.lr_decay

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, float]:
        """F1 after the 5-word stage and after the 15-word stage, validation and test (the model of
        the stage's last epoch, as the authors test); beside them, the test F1 of the stage's epoch
        with the best validation F1, and that epoch."""
        out: Dict[str, Any] = {"embeddings": self.embeddings_source}
        short = self.cfg.short_epochs
        for stage, epochs in (("short", range(short)), ("long", range(short, self.cfg.epochs))):
            c = curves[epochs[-1]] if epochs and epochs[-1] < len(curves) else {}
            out[f"valid_f1_{stage}"] = c.get("valid_f1")
            out[f"test_f1_{stage}"] = c.get("test_f1")
            ran = [curves[e] for e in epochs if e < len(curves)]
            best = max(ran, key=lambda c: c["valid_f1"]) if ran else {}
            out[f"best_test_f1_{stage}"] = best.get("test_f1")
            out[f"best_epoch_{stage}"] = best.get("epoch")
        return out


def grid(scale: str, **overrides):
    """Table 4's runs: each cell without and with 0.25 recurrent dropout; each run gives both
    stages' rows."""
    return cell_rate_grid(scale, NERConfig, **overrides)


def tuned_embeddings_grid(scale: str, **overrides):
    """The RNN's two cells of Table 4 with the word vectors trained too (the paper keeps them static):
    the chapter's ablation of the inputs, on its cheapest cell."""
    return [(labels, cfg) for labels, cfg in grid(scale, **{"tune_embeddings": True, **overrides})
            if labels["cell"] == "RNN"]


GRIDS = {"table": grid, "torch-rmsprop": with_torch_rmsprop(grid), "tuned-embeddings": tuned_embeddings_grid}
ABLATIONS = (*CELL_ABLATIONS, ("tuned-embeddings", "the word vectors tuned in training (the paper keeps them "
                                                   "static); the RNN's cells only"))
