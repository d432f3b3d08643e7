"""PackedSequence in and out: a packed batch equals each of its sequences run alone, given the same
masks, for every cell, scheme, sampling and direction, in training and at test."""
import re

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence

import recdrop
from recdrop.cells import CELL_SCHEMES

LENGTHS = [3, 7, 5, 7, 1]  # unsorted, with a tie and a sequence of one step
SETTINGS = [(kind, scheme, sampling) for kind in ("LSTM", "GRU", "RNN") for scheme in CELL_SCHEMES[kind]
            for sampling in ("per-step", "per-sequence")]
# the LSTM with a projection (proj_size), where Gal's mask has proj_size units: every scheme
PROJECTED = [("LSTM", scheme, sampling, 2) for scheme in CELL_SCHEMES["LSTM"]
             for sampling in ("per-step", "per-sequence")]


def alone(masks, b, n):
    """Sequence ``b``'s own masks, of its ``n`` steps, from a padded batch's masks."""
    return [{t: (m[:n, b:b + 1] if m.dim() == 3 else m[b:b + 1]) for t, m in d.items()} for d in masks]


@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "plain loop"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("kind,scheme,sampling,proj_size", [(*s, 0) for s in SETTINGS] + PROJECTED)
def test_a_packed_batch_equals_each_sequence_run_alone(kind, scheme, sampling, proj_size, train, fused):
    torch.manual_seed(0)
    extra = {"proj_size": proj_size} if proj_size else {}
    m = getattr(recdrop, kind)(3, 4, num_layers=2, bidirectional=True, recurrent_dropout=0.4, scheme=scheme,
                               sampling=sampling, scaling="paper", **extra).double().train(train)
    m.fused = fused
    seqs = [torch.randn(n, 3, dtype=torch.float64) for n in LENGTHS]
    packed = pack_sequence(seqs, enforce_sorted=False)
    masks = m.draw_masks(max(LENGTHS), len(LENGTHS), dtype=torch.float64) if train else None
    out, state = m(packed, masks=masks)
    h_n = state[0] if kind == "LSTM" else state
    padded, lengths = pad_packed_sequence(out)
    assert lengths.tolist() == LENGTHS
    for b, (x, n) in enumerate(zip(seqs, LENGTHS)):
        y, st = m(x.unsqueeze(1), masks=None if masks is None else alone(masks, b, n))
        torch.testing.assert_close(padded[:n, b], y[:, 0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(h_n[:, b], (st[0] if kind == "LSTM" else st)[:, 0], rtol=1e-10, atol=1e-10)
        if kind == "LSTM":
            torch.testing.assert_close(state[1][:, b], st[1][:, 0], rtol=1e-10, atol=1e-10)
        assert padded[n:, b].abs().sum() == 0  # padding stays padding


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_packed_input_matches_torch_nn_without_dropout(kind):
    torch.manual_seed(1)
    ref = getattr(torch.nn, kind)(3, 4, num_layers=2, bidirectional=True).double()
    ours = getattr(recdrop, kind)(3, 4, num_layers=2, bidirectional=True).double()
    ours.load_state_dict(ref.state_dict())
    ours.torch_kernels = False  # recdrop's own packed path, not torch.nn's forward
    seqs = [torch.randn(n, 3, dtype=torch.float64, requires_grad=True) for n in LENGTHS]
    h0 = torch.randn(4, len(LENGTHS), 4, dtype=torch.float64)
    hx = (h0, h0.cos()) if kind == "LSTM" else h0
    results = []
    for model in (ref, ours):
        out, state = model(pack_sequence(seqs, enforce_sorted=False), hx)
        states = state if isinstance(state, tuple) else (state,)
        loss = pad_packed_sequence(out)[0].pow(2).sum() + sum(s.sin().sum() for s in states)
        grads = torch.autograd.grad(loss, seqs + list(model.parameters()))
        results.append((out.data, states, grads))
    torch.testing.assert_close(results[0], results[1], rtol=1e-10, atol=1e-10)


def test_packed_from_a_padded_sorted_batch_and_batch_first():
    torch.manual_seed(2)
    ref, ours = torch.nn.GRU(3, 4, batch_first=True), recdrop.GRU(3, 4, batch_first=True, recurrent_dropout=0.25)
    ours.load_state_dict(ref.state_dict())
    ours.torch_kernels = False  # in eval no dropout acts, and torch.nn's forward would compute it: ours here
    x = torch.randn(3, 6, 3)
    packed = pack_padded_sequence(x, torch.tensor([6, 4, 2]), batch_first=True)
    got, want = ours.eval()(packed), ref(packed)
    assert ours.last_route.body != "torch.nn"
    torch.testing.assert_close(got[0].data, want[0].data)
    torch.testing.assert_close(got[1], want[1])


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "plain loop"])
def test_a_packed_batchs_gradients_are_its_sequences_gradients_alone(kind, nonlinearity, fused):
    """With dropout on, the gradients of a packed batch (one call per direction over the padded batch
    where the nonlinearity is bounded, issue 36; stretches of steps where it is relu) equal the sum of
    each sequence's gradients alone, with the same masks: the steps past a sequence's end take no part."""
    torch.manual_seed(3)
    m = getattr(recdrop, kind)(3, 4, num_layers=2, bidirectional=True, recurrent_dropout=0.4, scheme="semeniuta",
                               scaling="paper", nonlinearity=nonlinearity).double().train()
    m.fused = fused
    seqs = [torch.randn(n, 3, dtype=torch.float64, requires_grad=True) for n in LENGTHS]
    masks = m.draw_masks(max(LENGTHS), len(LENGTHS), dtype=torch.float64)
    weight = torch.linspace(-1, 1, 8, dtype=torch.float64)

    def loss(out, state):
        states = state if isinstance(state, tuple) else (state,)
        return (out * weight).pow(2).sum() + sum(s.sin().sum() for s in states)
    out, state = m(pack_sequence(seqs, enforce_sorted=False), masks=masks)
    packed = torch.autograd.grad(loss(pad_packed_sequence(out)[0], state), seqs + list(m.parameters()))
    each = sum(loss(*m(x.unsqueeze(1), masks=alone(masks, b, n))) for b, (x, n) in enumerate(zip(seqs, LENGTHS)))
    torch.testing.assert_close(packed, torch.autograd.grad(each, seqs + list(m.parameters())), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("batch_first", [False, True])
def test_packed_input_with_an_initial_state_is_checked_as_torch_nn_checks_it(batch_first):
    """The initial state's shape is checked on the padded batch (not on the pack, whose size would be read
    on the host), batch-first or not, and before it is sorted into the pack's order: a right state is
    taken; a wrong one gets torch.nn's words for a wrong hidden size, where torch.nn's own sort fails first
    with an indexing error (or, for a larger batch, takes some of its rows: ``tests/test_bad_input.py``)."""
    m = recdrop.LSTM(3, 4, batch_first=batch_first, recurrent_dropout=0.25)
    ref = torch.nn.LSTM(3, 4, batch_first=batch_first)
    packed = pack_sequence([torch.randn(n, 3) for n in (5, 2, 4)], enforce_sorted=False)
    right, wrong = (torch.zeros(1, 3, 4),) * 2, (torch.zeros(1, 2, 4),) * 2
    assert m(packed, right)[1][0].shape == (1, 3, 4)
    with pytest.raises(RuntimeError, match=re.escape("Expected hidden size (1, 3, 4), got [1, 2, 4]")):
        m(packed, wrong)
    with pytest.raises(RuntimeError, match="INDICES element is out of DATA bounds"):
        ref(packed, wrong)
