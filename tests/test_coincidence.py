"""When Moon's and Semeniuta's schemes compute the same thing (issue 10, item 3).

With a per-sequence 0/1 mask m, the paper's scaling and c_0 = 0, in training:
Moon       c_t = m * (f_t c_{t-1} + i_t g_t)
Semeniuta  c_t = f_t c_{t-1} + i_t (m * g_t)
A kept unit (m = 1) evolves identically; a dropped one (m = 0) stays at 0 under Moon, and under
Semeniuta c_t = f_t c_{t-1} = 0 by induction from c_0 = 0. So the two are equal, and h_t too. The
coincidence breaks with per-step masks, with inverted scaling (1/(1-p) compounds through c under
Moon), with a non-zero initial state, and at test time, where Moon's (1-p) compounds over steps.
"""
import pytest
import torch

import recdrop


def _run(scheme, sampling="per-sequence", scaling="paper", training=True, c0_value=0.0, masks=None):
    torch.manual_seed(0)
    m = recdrop.LSTM(3, 5, recurrent_dropout=0.5, scheme=scheme, sampling=sampling, scaling=scaling).double()
    m.train(training)
    x = torch.randn(20, 4, 3, dtype=torch.float64)
    h0 = torch.zeros(1, 4, 5, dtype=torch.float64)
    c0 = torch.full_like(h0, c0_value)
    return m(x, (h0, c0), masks=masks if training else None)[0]


def _mask(sampling):
    g = torch.Generator().manual_seed(1)
    shape = (20, 4, 5) if sampling == "per-step" else (4, 5)
    return torch.bernoulli(torch.full(shape, 0.5, dtype=torch.float64), generator=g)


def test_moon_and_semeniuta_coincide_with_per_sequence_masks_paper_scaling_and_zero_state():
    mask = _mask("per-sequence")
    moon = _run("moon", masks=[{"moon": mask}])
    ours = _run("semeniuta", masks=[{"semeniuta": mask}])
    torch.testing.assert_close(moon, ours, rtol=0, atol=1e-12)


@pytest.mark.parametrize("change", ["per-step masks", "inverted scaling", "non-zero initial state", "test time"])
def test_the_coincidence_breaks(change):
    sampling = "per-step" if change == "per-step masks" else "per-sequence"
    kw = dict(sampling=sampling, scaling="inverted" if change == "inverted scaling" else "paper",
              training=change != "test time", c0_value=0.7 if change == "non-zero initial state" else 0.0)
    mask = _mask(sampling)
    moon = _run("moon", masks=[{"moon": mask}], **kw)
    ours = _run("semeniuta", masks=[{"semeniuta": mask}], **kw)
    assert (moon - ours).abs().max() > 1e-3
