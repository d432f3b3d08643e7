"""CoNLL-2003: the files as SOURCE.md documents them, and conlleval's entity-level F1."""
import pytest

from recdrop.data import DatasetError, data_root
from recdrop.data.conll2003 import entity_f1, load_conll2003, read_conll

CONLL = data_root() / "conll2003"
needs_conll = pytest.mark.skipif(not CONLL.exists(), reason=f"CoNLL-2003 is not at {CONLL}")


def test_entity_f1_on_a_hand_computed_case():
    # IOB1: an I- tag after O opens a chunk. Truth: PER "John Smith", LOC "Paris", ORG "EU" "UN"
    # as two ORG chunks (B- marks the second). Predicted: PER right, LOC typed as ORG, the two ORGs
    # merged into one. Chunks: true {PER, LOC, ORG1, ORG2}, predicted {PER, ORG@3, ORG@5-6}:
    # one correct of 3 predicted and 4 true: P = 1/3, R = 1/4, F1 = 2PR/(P+R) = 2/7.
    true = [["I-PER", "I-PER", "O", "I-LOC", "O", "I-ORG", "B-ORG"]]
    pred = [["I-PER", "I-PER", "O", "I-ORG", "O", "I-ORG", "I-ORG"]]
    assert entity_f1(true, pred) == pytest.approx(100 * 2 / 7)
    assert entity_f1(true, true) == 100.0
    with pytest.raises(ValueError, match="same sentences"):
        entity_f1(true, [pred[0][:3]])


def test_read_conll_skips_docstart_and_splits_on_blank_lines(tmp_path):
    f = tmp_path / "x"
    f.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n")
    s = read_conll(f)
    assert [x.words for x in s] == [["EU", "rejects"], ["Peter"]]
    assert [x.tags for x in s] == [["I-ORG", "O"], ["I-PER"]]


@needs_conll
def test_conll2003_matches_its_source_statistics():
    data = load_conll2003()
    # conll2003/SOURCE.md: sentences without -DOCSTART-, tokens, entity chunks per split
    assert [len(data[s]) for s in ("train", "valid", "test")] == [14_041, 3_250, 3_453]
    assert [sum(len(x.words) for x in data[s]) for s in ("train", "valid", "test")] == [203_621, 51_362, 46_435]
    from seqeval.metrics.sequence_labeling import get_entities
    assert [len(get_entities([x.tags for x in data[s]])) for s in ("train", "valid", "test")] == \
        [23_499, 5_942, 5_648]


@needs_conll
def test_missing_conll_file_is_named(tmp_path):
    with pytest.raises(DatasetError, match=r"eng\.train is missing.*CoNLL-2003"):
        load_conll2003(tmp_path)
