"""CoNLL-2003 English named-entity recognition (paper Section 4.4): eng.train, eng.testa
(validation), eng.testb (test), four columns ``word POS chunk NER``, IOB1 tags.

Entity-level F1 as conlleval computes it comes from seqeval in its default (conlleval-compatible)
mode, which reads IOB1 as conlleval does: an ``I-`` tag after ``O`` or after another type opens a
chunk.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .files import verified_files

SOURCE = ("the CoNLL-2003 shared task, https://www.clips.uantwerpen.be/conll2003/ner/ (files rebuilt from "
          "Reuters RCV1), or the byte-identical mirror https://github.com/suryasumukh/conll-ner (data/)")
MIRROR = "https://raw.githubusercontent.com/suryasumukh/conll-ner/18d3e43a09247adaa9ec088485a087d5ffa758a6/data/"
SPLITS = {"train": "eng.train", "valid": "eng.testa", "test": "eng.testb"}


@dataclass
class Sentence:
    words: List[str]
    tags: List[str]


def read_conll(path: Path) -> List[Sentence]:
    """Sentences of a CoNLL file: blank lines separate them, ``-DOCSTART-`` lines are skipped."""
    sentences: List[Sentence] = []
    words: List[str] = []
    tags: List[str] = []
    with Path(path).open() as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append(Sentence(words, tags))
                    words, tags = [], []
                continue
            words.append(fields[0])
            tags.append(fields[-1])
    if words:
        sentences.append(Sentence(words, tags))
    return sentences


def load_conll2003(root: Optional[Path] = None, download: bool = False) -> Dict[str, List[Sentence]]:
    """``{"train", "valid", "test"}`` -> sentences, every file verified against its checksum."""
    paths = _files(root, download)
    return {split: read_conll(paths[name]) for split, name in SPLITS.items()}


def _files(root: Optional[Path], download: bool) -> Dict[str, Path]:
    names = list(SPLITS.values())
    return verified_files("conll2003", names, SOURCE, root, {n: MIRROR + n for n in names} if download else None)


def check_conll2003(root: Optional[Path] = None) -> None:
    """The three files verified, not read: a ``DatasetError`` naming a missing or corrupt one."""
    _files(root, download=False)


def entity_f1(true_tags: Sequence[Sequence[str]], predicted_tags: Sequence[Sequence[str]]) -> float:
    """Entity-level F1 over all sentences, in percent, as conlleval computes it (seqeval's default mode)."""
    from seqeval.metrics import f1_score

    if len(true_tags) != len(predicted_tags) or any(len(t) != len(p) for t, p in zip(true_tags, predicted_tags)):
        raise ValueError("true_tags and predicted_tags must have the same sentences of the same lengths")
    return float(100.0 * f1_score([list(t) for t in true_tags], [list(p) for p in predicted_tags]))
