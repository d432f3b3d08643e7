"""Dataset files: checksums verified, clear errors for missing or corrupt files; PTB as documented."""
import shutil

import pytest
import torch

from recdrop.data import DatasetError, data_root
from recdrop.data.ptb import batchify, load_ptb, load_ptb_char

PTB = data_root() / "ptb"
PTB_CHAR = data_root() / "ptb_char"
needs_ptb = pytest.mark.skipif(not PTB.exists(), reason=f"PTB is not at {PTB} (set RECDROP_DATA)")
needs_ptb_char = pytest.mark.skipif(not PTB_CHAR.exists(), reason=f"PTB (characters) is not at {PTB_CHAR}")


@needs_ptb
def test_ptb_matches_its_source_statistics():
    c = load_ptb()
    # ptb/SOURCE.md: 10,000 words with <eos>; tokens + one <eos> per line
    assert len(c.vocab) == 10_000 and c.vocab.count("<eos>") == 1
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (929_589, 73_760, 82_430)


@needs_ptb
def test_missing_file_names_it_and_where_to_get_it(tmp_path):
    shutil.copy(PTB / "ptb.train.txt", tmp_path)
    shutil.copy(PTB / "ptb.valid.txt", tmp_path)
    with pytest.raises(DatasetError, match=r"ptb\.test\.txt is missing.*simple-examples"):
        load_ptb(tmp_path)


@needs_ptb
def test_corrupt_file_is_named(tmp_path):
    for name in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"):
        shutil.copy(PTB / name, tmp_path)
    with (tmp_path / "ptb.valid.txt").open("a") as f:
        f.write(" one more line \n")
    with pytest.raises(DatasetError, match=r"ptb\.valid\.txt is corrupt"):
        load_ptb(tmp_path)


@needs_ptb_char
def test_ptb_char_matches_its_source_statistics():
    c = load_ptb_char()
    # ptb_char/SOURCE.md: 49 symbols + an end of line = the paper's 50; symbols + one per sentence
    assert len(c.vocab) == 50 and "_" in c.vocab and "<eos>" in c.vocab
    assert (c.train.numel(), c.valid.numel(), c.test.numel()) == (5_017_482, 393_042, 442_423)


@needs_ptb_char
def test_ptb_char_missing_file_names_it_and_where_to_get_it(tmp_path):
    shutil.copy(PTB_CHAR / "ptb.char.train.txt", tmp_path)
    with pytest.raises(DatasetError, match=r"ptb\.char\.valid\.txt is missing.*simple-examples"):
        load_ptb_char(tmp_path)


def test_batchify_lays_streams_side_by_side():
    b = batchify(torch.arange(10), 3)
    assert b.tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
