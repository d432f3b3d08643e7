"""Every scheme, sampling and scaling against the paper's equations, written out independently here.

The reference uses the paper's notation: one matrix per gate acting on [x_t, h_{t-1}] (Eqs. 4-13),
and d(.) of Eq. 3 ("paper") or Eq. 18 ("inverted") with a fixed, known 0/1 mask.
"""
import pytest
import torch

import recdrop
from kernel_cases import TRAINING_AND_TEST

T, B, D, H = 5, 3, 4, 6
P = 0.4


def d(x, mask, p, scaling, training):
    """Eq. 3 (paper scaling) and Eq. 18 (inverted): p is the drop rate."""
    if mask is None:
        return x
    if training:
        return x * mask if scaling == "paper" else x * mask / (1 - p)
    return x * (1 - p) if scaling == "paper" else x


def split(w, n):
    return [w[k * H:(k + 1) * H] for k in range(n)]


def paper_lstm(m, x, masks, scaling, training, per_step):
    """Eqs. 4-6 with Gal (7), Moon (8) and ours (9). torch's row blocks are i, f, g, o. With a
    projection (torch's proj_size), h_t = W_hr (o_t * tanh(c_t)), and Gal's d(.) acts on that h_{t-1}."""
    Wi, Wf, Wg, Wo = [torch.cat([a, b], 1) for a, b in zip(split(m.weight_ih_l0, 4), split(m.weight_hh_l0, 4))]
    bi, bf, bg, bo = [a + b for a, b in zip(split(m.bias_ih_l0, 4), split(m.bias_hh_l0, 4))]
    h = torch.zeros(B, m.proj_size or H, dtype=x.dtype)
    c = torch.zeros(B, H, dtype=x.dtype)
    out = []
    for t in range(T):
        mk = {k: (v[t] if per_step else v) for k, v in masks.items()}
        xh = torch.cat([x[t], d(h, mk.get("gal"), P, scaling, training)], 1)
        i = torch.sigmoid(xh @ Wi.T + bi)
        f = torch.sigmoid(xh @ Wf.T + bf)
        o = torch.sigmoid(xh @ Wo.T + bo)
        g = torch.tanh(xh @ Wg.T + bg)
        c = d(f * c + i * d(g, mk.get("semeniuta"), P, scaling, training), mk.get("moon"), P, scaling, training)
        h = o * torch.tanh(c)
        if m.proj_size:
            h = h @ m.weight_hr_l0.T
        out.append(h)
    return torch.stack(out), c


def paper_gru(m, x, masks, scaling, training, per_step):
    """Eqs. 10-13, with the reset gate where torch.nn puts it (the documented deviation from Eq. 11).

    torch's blocks are r, u, n with u = 1 - z_t of the paper."""
    Wr, Wu, Wg = split(m.weight_ih_l0, 3)
    Ur, Uu, Ug = split(m.weight_hh_l0, 3)
    br, bu, bg = split(m.bias_ih_l0, 3)
    cr, cu, cg = split(m.bias_hh_l0, 3)
    h = torch.zeros(B, H, dtype=x.dtype)
    out = []
    for t in range(T):
        mk = {k: (v[t] if per_step else v) for k, v in masks.items()}
        hd = d(h, mk.get("gal"), P, scaling, training)
        r = torch.sigmoid(x[t] @ Wr.T + br + hd @ Ur.T + cr)
        z = 1 - torch.sigmoid(x[t] @ Wu.T + bu + hd @ Uu.T + cu)  # the paper's z_t
        g = torch.tanh(x[t] @ Wg.T + bg + r * (hd @ Ug.T + cg))
        h = d((1 - z) * h + z * d(g, mk.get("semeniuta"), P, scaling, training), mk.get("moon"), P, scaling, training)
        out.append(h)
    return torch.stack(out), h


def paper_rnn(m, x, masks, scaling, training, per_step):
    """Eq. 2: h_t = f(W_h [x_t, d(h_{t-1})] + b_h); "moon" drops h_t itself."""
    W = torch.cat([m.weight_ih_l0, m.weight_hh_l0], 1)
    b = m.bias_ih_l0 + m.bias_hh_l0
    h = torch.zeros(B, H, dtype=x.dtype)
    out = []
    for t in range(T):
        mk = {k: (v[t] if per_step else v) for k, v in masks.items()}
        drop_in = mk.get("semeniuta", mk.get("gal"))
        h = d(torch.tanh(torch.cat([x[t], d(h, drop_in, P, scaling, training)], 1) @ W.T + b),
              mk.get("moon"), P, scaling, training)
        out.append(h)
    return torch.stack(out), h


REFERENCE = {"LSTM": paper_lstm, "GRU": paper_gru, "RNN": paper_rnn}
# The vector each scheme drops, as the paper names them (Sec. 2): the masks' keys, which the reference
# equations above read; written out here, not read from the library, so that a wrong mapping fails.
PAPER_TARGETS = {"semeniuta": {"semeniuta"}, "gal": {"gal"}, "moon": {"moon"}, "gal+semeniuta": {"gal", "semeniuta"}}
CASES = [(kind, scheme) for kind in ("LSTM", "GRU") for scheme in recdrop.SCHEMES] + \
        [("RNN", s) for s in ("semeniuta", "gal", "moon")]


@pytest.mark.parametrize("kind,scheme,proj_size", [(*case, 0) for case in CASES] +
                         [("LSTM", scheme, 3) for scheme in recdrop.SCHEMES])
@pytest.mark.parametrize("sampling,scaling,training", TRAINING_AND_TEST)
def test_layer_matches_paper_equations(kind, scheme, proj_size, sampling, scaling, training):
    torch.manual_seed(0)
    extra = {"proj_size": proj_size} if proj_size else {}
    m = getattr(recdrop, kind)(D, H, recurrent_dropout=P, scheme=scheme, sampling=sampling,
                               scaling=scaling, **extra).double()
    m.train(training)
    x = torch.randn(T, B, D, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    masks = m.draw_masks(T, B, dtype=torch.float64, generator=gen)
    assert set(masks[0]) == PAPER_TARGETS[scheme]
    y, state = m(x, masks=masks if training else None)
    ref_y, ref_state = REFERENCE[kind](m, x, masks[0], scaling, training, sampling == "per-step")
    assert (y - ref_y).abs().max() < 1e-10
    last = state[1][0] if kind == "LSTM" else state[0]
    assert (last - ref_state).abs().max() < 1e-10
    if training:  # the masks really act: some unit is dropped and the output differs from no dropout
        plain = getattr(recdrop, kind)(D, H, **extra).double()
        plain.load_state_dict(m.state_dict())
        assert (plain(x)[0] - y).abs().max() > 1e-6


@pytest.mark.parametrize("kind,scheme", CASES)
@pytest.mark.parametrize("scaling", recdrop.SCALINGS)
@pytest.mark.parametrize("training", [True, False])
def test_cell_matches_paper_equations(kind, scheme, scaling, training):
    """A cell run step by step with a fixed per-sequence mask equals the layer's equations."""
    torch.manual_seed(0)
    layer = getattr(recdrop, kind)(D, H, recurrent_dropout=P, scheme=scheme, sampling="per-sequence",
                                   scaling=scaling).double().train(training)
    cell = getattr(recdrop, kind + "Cell")(D, H, recurrent_dropout=P, scheme=scheme, sampling="per-sequence",
                                           scaling=scaling).double().train(training)
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in layer.state_dict().items()})
    x = torch.randn(T, B, D, dtype=torch.float64)
    masks = layer.draw_masks(T, B, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref_y, ref_state = REFERENCE[kind](layer, x, masks[0], scaling, training, per_step=False)
    state = None
    for t in range(T):
        state = cell(x[t], state, masks=masks[0] if training else None)
        h = state[0] if kind == "LSTM" else state
        assert (h - ref_y[t]).abs().max() < 1e-10
    if kind == "LSTM":  # the carried c_t too: Moon's h_t can match where its carried state does not
        assert (state[1] - ref_state).abs().max() < 1e-10
