"""The memory-loss probes against Eqs. 17-19 on an LSTM whose gates are all 1 (the paper's
assumption), and against the layer's own output on a trained-looking one."""
import pytest
import torch

import recdrop
from recdrop.memory import cell_states, memory_trace, predicted_trace
from recdrop.verdicts import NOT_RUN

H, T, B, P = 8, 12, 5, 0.25


def open_gates_lstm(scheme, sampling="per-sequence", scaling="paper"):
    """Input, forget and output gates saturated at 1 and the candidate g_t = 0: c_t = c_{t-1}
    unless the dropout scales it."""
    m = recdrop.LSTM(3, H, recurrent_dropout=P, scheme=scheme, sampling=sampling, scaling=scaling)
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.bias_ih_l0[:3 * H] = 40.0  # i, f (torch's gate order i, f, g, o) ...
        m.bias_ih_l0[3 * H:] = 40.0  # ... and o
    return m


def test_cell_states_end_where_the_layer_ends():
    torch.manual_seed(0)
    for sampling in ("per-step", "per-sequence"):
        m = recdrop.LSTM(3, H, recurrent_dropout=0.3, scheme="moon", sampling=sampling)
        x = torch.randn(T, B, 3)
        masks = m.draw_masks(T, B)
        for train in (True, False):
            m.train(train)
            c = cell_states(m, x, masks=masks if train else None)
            _, (_, c_n) = m(x, masks=masks if train else None)
            torch.testing.assert_close(c[-1], c_n[0])
            assert c.shape == (T, B, H)


def test_moon_at_test_keeps_q_to_the_t_of_its_start_eq17():
    m = open_gates_lstm("moon").eval()
    trace = memory_trace(m, torch.randn(T, B, 3))
    torch.testing.assert_close(trace.double(), predicted_trace(T, P, training=False), rtol=1e-5, atol=1e-9)


def test_ours_and_gal_at_test_keep_all_of_it_eq19():
    for scheme in ("semeniuta", "gal"):
        m = open_gates_lstm(scheme).eval()
        trace = memory_trace(m, torch.randn(T, B, 3))
        torch.testing.assert_close(trace, torch.ones(T))


def test_moon_inverted_in_training_grows_the_kept_units_eq18():
    torch.manual_seed(1)
    m = open_gates_lstm("moon", scaling="inverted").train()
    x = torch.randn(T, B, 3)
    masks = m.draw_masks(T, B)
    delta = torch.randn(B, H)
    zero = torch.zeros(1, B, H)
    diff = cell_states(m, x, (zero, delta[None]), masks) - cell_states(m, x, (zero, zero), masks)
    kept = masks[0]["moon"]
    expected = predicted_trace(T, P, training=True).float()[:, None, None] * kept * delta
    torch.testing.assert_close(diff, expected, rtol=1e-3, atol=1e-5)  # float32 over 12 scalings


def test_ours_in_training_with_inverted_scaling_keeps_the_state():
    m = open_gates_lstm("semeniuta", sampling="per-step", scaling="inverted").train()
    torch.testing.assert_close(memory_trace(m, torch.randn(T, B, 3)), torch.ones(T))


def test_probes_reject_layers_they_cannot_trace():
    with pytest.raises(ValueError, match="one-layer"):
        cell_states(recdrop.LSTM(3, H, num_layers=2), torch.randn(T, B, 3))
    with pytest.raises(ValueError, match="recdrop.LSTM"):
        memory_trace(torch.nn.LSTM(3, H), torch.randn(T, B, 3))


def test_memory_loss_runs_train_what_table1_short_trains_and_record_the_probes(tmp_path, monkeypatch):
    """The memory-loss runs are Table 1's `short` runs (same config values, same seed: the same
    weights, the same test accuracy per epoch), with the probes added to the record."""
    from recdrop.experiments import memory_loss, memory_loss_chapter
    from recdrop.store import RunStore
    from recdrop.sweep import run_grid

    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    store = RunStore(tmp_path / "runs")
    only = {"scheme": "moon", "sampling": "per-sequence", "scaling": "paper"}
    mem = run_grid("memory_loss", "ci", store=store, progress=False, only=only)[0].record
    to = run_grid("temporal_order", "ci", store=store, progress=False, only={**only, "length": "short"})[0].record
    assert [c["test_acc"] for c in mem.curves] == [c["test_acc"] for c in to.curves]
    m = mem.metrics
    cfg = memory_loss.MemoryLossConfig.at_scale("ci")
    assert sorted(m["test_acc_by_length"]) == sorted(map(str, cfg.test_lengths))
    for phase in ("test", "train"):
        assert len(m["probe"][phase]["memory"]) == len(m["probe"][phase]["cell_norm"]) == cfg.probe_steps
    table = memory_loss_chapter.memory_table(run_grid("memory_loss", "ci", store=store, train=False, progress=False))
    assert (table.loc["moon per-sequence, paper scaling", f"test, t={cfg.probe_steps}"]
            == m["probe"]["test"]["memory"][-1])
    assert table.loc["moon per-sequence, paper scaling", "seeds"] == 1
    assert table.loc["moon per-sequence, paper scaling", f"test, t={cfg.probe_steps}, each seed"] == (
        f"{m['probe']['test']['memory'][-1]:.2g}")
    assert NOT_RUN in set(memory_loss_chapter.claims([])["on ours"])


def test_memory_loss_config_rejects_bad_probes():
    from recdrop.experiments.memory_loss import MemoryLossConfig

    with pytest.raises(ValueError, match="test_lengths"):
        MemoryLossConfig.at_scale("ci", test_lengths=(15, 3))
    with pytest.raises(ValueError, match="probe_steps"):
        MemoryLossConfig.at_scale("ci", probe_steps=0)
