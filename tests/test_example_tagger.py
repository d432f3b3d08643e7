"""examples/bilstm_tagger.py: the BiLSTM tagger with recdrop.LSTM swapped in learns on CoNLL-2003, and
without recurrent dropout (or in eval()) it computes what the same tagger on torch.nn.LSTM computes."""
import importlib.util
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import recdrop
from recdrop.data import data_root

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bilstm_tagger.py"
needs_conll = pytest.mark.skipif(not (data_root() / "conll2003").exists(), reason="CoNLL-2003 not available")


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("bilstm_tagger", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_conll
def test_tagger_with_recurrent_dropout_learns_on_conll(example):
    from recdrop.data.conll2003 import load_conll2003

    torch.manual_seed(0)
    train = load_conll2003()["train"]
    words = example.build_vocab(train)
    tags = {t: i for i, t in enumerate(sorted({t for s in train for t in s.tags}))}
    loader = DataLoader(example.encode(train[:2000], words, tags), 16, shuffle=True, collate_fn=example.collate,
                        generator=torch.Generator().manual_seed(0))
    model = example.BiLSTMTagger(len(words), len(tags), emb=32, hidden=32, layer="recdrop", recurrent_dropout=0.25)
    assert isinstance(model.lstm, recdrop.LSTM) and model.lstm.rdrop.p == 0.25
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = example.train_batches(model, loader, optimizer, 30)
    assert len(losses) == 30
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.6 * first, (first, last)


# torch_kernels=False: recdrop's own packed path, where torch.nn's would otherwise run (no dropout acting)
@pytest.mark.parametrize("p, torch_kernels", [(0.0, True), (0.0, False), (0.25, False)])
def test_recdrop_tagger_equals_torch_tagger_on_a_packed_batch(example, p, torch_kernels):
    torch.manual_seed(0)
    ref = example.BiLSTMTagger(50, 9, emb=16, hidden=12, layer="torch").eval()
    new = example.BiLSTMTagger(50, 9, emb=16, hidden=12, layer="recdrop", recurrent_dropout=p).eval()
    new.lstm.torch_kernels = torch_kernels
    new.load_state_dict(ref.state_dict())  # the whole tagger's weights, names unchanged by the swap
    lengths = [5, 9, 1, 7, 3]  # unsorted, as a DataLoader gives them: enforce_sorted=False sorts
    batch = [(torch.randint(2, 50, (n,)), torch.randint(0, 9, (n,))) for n in lengths]
    tokens, _, lengths = example.collate(batch)
    assert tokens.shape == (5, 9) and (tokens[2, 1:] == 0).all()
    out_ref, out_new = ref(tokens, lengths), new(tokens, lengths)
    assert (new.lstm.last_route.body == "torch.nn") == torch_kernels  # the hand-over, or our packed path
    assert out_new.shape == (5, 9, 9)
    torch.testing.assert_close(out_new, out_ref, rtol=1e-5, atol=1e-6)
    if p == 0.0:  # and the same gradients
        out_ref.square().sum().backward()
        out_new.square().sum().backward()
        for (name, a), b in zip(ref.named_parameters(), new.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


@needs_conll
@torch._dynamo.config.patch(allow_rnn=False)  # the example sets it True for its process: not for the tests after
def test_the_example_trains_compiled(example, capsys):
    """``--compile``: the tagger compiled with dynamic shapes trains on CoNLL's batches of varying length
    and evaluates (Dynamo's tracing only, backend 'eager', 2 batches and 1 dev batch, to keep it short: each new
    length is traced anew)."""
    args = ["--epochs", "1", "--batches", "2", "--batch-size", "8", "--hidden", "16", "--dev-batches", "1"]
    results = []
    for compiled in ([], ["--compile", "eager"]):  # the same seed: the same masks, batches and updates
        example.main(args + compiled)
        found = re.search(r"epoch 1: train loss (\S+) \| dev token accuracy (\S+)%", capsys.readouterr().out)
        results.append((float(found[1]), float(found[2])))
    (loss, accuracy), (compiled_loss, compiled_accuracy) = results
    # the compiled forward runs recdrop's plain ops, eager its fused path: equal up to float rounding
    assert compiled_loss == pytest.approx(loss, rel=1e-4) and compiled_accuracy == pytest.approx(accuracy, abs=0.02)
