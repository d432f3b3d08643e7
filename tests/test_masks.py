"""Mask statistics, and that forward really samples the way `sampling` says."""
import warnings

import pytest
import torch

import recdrop


@pytest.mark.parametrize("p", [0.25, 0.5])
@pytest.mark.parametrize("sampling", recdrop.SAMPLINGS)
def test_keep_rate_and_shapes(p, sampling):
    m = recdrop.LSTM(3, 64, 2, bidirectional=True, recurrent_dropout=p, scheme="gal+semeniuta", sampling=sampling)
    masks = m.draw_masks(50, 40, generator=torch.Generator().manual_seed(0))
    assert len(masks) == 4  # every layer and direction has its own masks
    for layer in masks:
        assert set(layer) == {"gal", "semeniuta"}
        for mk in layer.values():
            assert mk.shape == ((50, 40, 64) if sampling == "per-step" else (40, 64))
            assert set(mk.unique().tolist()) <= {0.0, 1.0}
            assert abs(mk.mean().item() - (1 - p)) < 0.03
    flat = [mk for layer in masks for mk in layer.values()]
    assert all(not torch.equal(a, b) for i, a in enumerate(flat) for b in flat[i + 1:])


def test_per_step_masks_vary_over_time_and_between_examples():
    m = recdrop.GRU(3, 32, recurrent_dropout=0.5, sampling="per-step")
    mk = m.draw_masks(10, 8)[0]["semeniuta"]
    assert not torch.equal(mk[0], mk[1])
    assert not torch.equal(mk[:, 0], mk[:, 1])


def test_per_sequence_masks_differ_between_examples():
    mk = recdrop.LSTM(3, 32, recurrent_dropout=0.5, sampling="per-sequence").draw_masks(10, 8)[0]["semeniuta"]
    assert not torch.equal(mk[0], mk[1])


def _dropped_pattern(sampling, fused=True):
    """Moon with paper scaling: a dropped unit has c_t = 0, hence h_t = o * tanh(0) = 0 exactly. ``fused``:
    the fast path (its own step masks, ``fused``), else the reference loop (``masks.factor_at``)."""
    torch.manual_seed(0)
    m = recdrop.LSTM(3, 32, bidirectional=True, recurrent_dropout=0.5, scheme="moon", sampling=sampling,
                     scaling="paper")
    m.fused = fused
    y, _ = m(torch.randn(12, 6, 3))
    return y == 0  # (T, B, 2H)


@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "reference loop"])
def test_forward_per_sequence_mask_constant_over_time(fused):
    z = _dropped_pattern("per-sequence", fused)
    assert z.any()
    assert torch.equal(z, z[:1].expand_as(z))
    assert not torch.equal(z[:, 0], z[:, 1])  # differs between examples
    assert not torch.equal(z[..., :32], z[..., 32:])  # and between directions


@pytest.mark.parametrize("fused", [True, False], ids=["fast path", "reference loop"])
def test_forward_per_step_mask_varies_over_time(fused):
    z = _dropped_pattern("per-step", fused)
    assert z.any() and not torch.equal(z[0], z[1])


def test_forward_draws_with_draw_masks():
    """Without `masks`, forward draws from the global RNG exactly what draw_masks would."""
    m = recdrop.LSTM(3, 16, 2, recurrent_dropout=0.3, scheme="moon", sampling="per-step").double()
    x = torch.randn(7, 4, 3, dtype=torch.float64)
    torch.manual_seed(5)
    y_random, _ = m(x)
    torch.manual_seed(5)
    masks = m.draw_masks(7, 4, dtype=torch.float64)
    y_given, _ = m(x, masks=masks)
    assert torch.equal(y_random, y_given)


@pytest.mark.parametrize("kind", ["layer", "cell"])
def test_masks_given_in_eval_are_not_applied_and_a_warning_says_so(kind):
    """In training given masks act (all-zero ones change the output); in eval (Eq. 3's test phase) they are
    not applied, and a warning says so rather than ignoring them silently."""
    torch.manual_seed(0)
    if kind == "layer":
        m, x = recdrop.LSTM(3, 8, recurrent_dropout=0.5), torch.randn(5, 2, 3)
        zeros = [{t: torch.zeros_like(k) for t, k in d.items()} for d in m.draw_masks(5, 2)]
    else:
        m, x = recdrop.LSTMCell(3, 8, recurrent_dropout=0.5), torch.randn(2, 3)
        zeros = {"semeniuta": torch.zeros(2, 8)}

    def c_or_out(**kw):  # a layer's output, a cell's c
        return m(x, **kw)[0 if kind == "layer" else 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning in training
        in_training = c_or_out(masks=zeros)
    m.eval()
    with pytest.warns(UserWarning, match=r"masks given in eval mode are not applied: .*call \.train\(\)"):
        in_eval = c_or_out(masks=zeros)
    torch.testing.assert_close(in_eval, c_or_out())  # (recdrop's own code where masks are given, else torch.nn's)
    assert (in_training - in_eval).abs().max() > 0.01


def test_cell_per_sequence_mask_is_kept_until_reset():
    torch.manual_seed(0)
    cell = recdrop.LSTMCell(3, 32, recurrent_dropout=0.5, scheme="moon", sampling="per-sequence", scaling="paper")
    x = torch.randn(4, 3)
    h1, c1 = cell(x)
    h2, _ = cell(x, (h1, c1))
    assert torch.equal(h1 == 0, h2 == 0)
    cell.reset_masks()
    h3, _ = cell(x)
    assert not torch.equal(h1 == 0, h3 == 0)
    with pytest.raises(ValueError, match="reset_masks"):
        cell(torch.randn(5, 3))


def test_cell_per_step_mask_is_fresh_every_call():
    torch.manual_seed(0)
    cell = recdrop.GRUCell(3, 64, recurrent_dropout=0.5, scheme="moon", sampling="per-step", scaling="paper")
    x = torch.randn(4, 3)
    assert not torch.equal(cell(x) == 0, cell(x) == 0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_a_layers_generator_draws_all_its_masks_and_a_cells_too(kind):
    """With ``generator`` set, what a layer draws (its recurrent masks, and torch.nn's dropout between
    stacked layers) is the generator's alone: torch's global seed changes nothing; without it, it does."""
    torch.manual_seed(0)
    layer = getattr(recdrop, kind)(3, 4, num_layers=2, dropout=0.5, recurrent_dropout=0.3).train()
    cell = getattr(recdrop, kind + "Cell")(3, 4, recurrent_dropout=0.5).train()
    x, h = torch.randn(5, 2, 3), torch.randn(2, 4)
    state = (h, h) if kind == "LSTM" else h

    def outputs(global_seed):
        for m, seed in ((layer, 1), (cell, 2)):
            if m.generator is not None:
                m.generator.manual_seed(seed)
        torch.manual_seed(global_seed)
        out = cell(x[0], state)
        return layer(x)[0], out[0] if isinstance(out, tuple) else out
    assert not torch.equal(outputs(0)[0], outputs(1)[0])  # torch's global generator, without one
    layer.recurrent_dropout = 0.0  # the dropout between layers alone: it draws from the generator too
    layer.generator, cell.generator = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    (a, c), (b, d) = outputs(0), outputs(1)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(c, d, rtol=0, atol=0)
    layer.recurrent_dropout = 0.3
    torch.testing.assert_close(outputs(0)[0], outputs(1)[0], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_draw_masks_draws_from_the_layers_generator_as_its_forward_does(kind):
    """``forward(x, masks=m.draw_masks(T, B))`` is the forward that draws its own masks, generator set or not."""
    m = getattr(recdrop, kind)(3, 4, recurrent_dropout=0.5).train()
    m.generator = torch.Generator()
    x = torch.randn(5, 2, 3)
    m.generator.manual_seed(0)
    torch.manual_seed(1)
    own = m(x)[0]
    m.generator.manual_seed(0)
    torch.manual_seed(2)  # the global generator is not drawn from
    torch.testing.assert_close(m(x, masks=m.draw_masks(5, 2))[0], own, rtol=0, atol=0)
    given = torch.Generator().manual_seed(0)  # a generator passed to draw_masks is drawn from instead
    m.generator.manual_seed(5)
    assert all(torch.equal(a[t], b[t]) for a, b in zip(m.draw_masks(5, 2, generator=given),
                                                       m.draw_masks(5, 2, generator=torch.Generator().manual_seed(0)))
               for t in a)

