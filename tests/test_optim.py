"""RMSProp as the frameworks of 2016 defined it (recdrop/optim.py), against a hand computation of its
first steps, and the config field that chooses it (issue 34)."""
import io
import math

import pytest
import torch

from recdrop.optim import RMSProp2016, rmsprop

LR, RHO = 0.01, 0.9
G1, G2 = (0.5, -1e-4, 0.0), (-0.25, 2e-4, 3.0)  # two steps' gradients: large, tiny and zero


def steps(form, grads, theta0=(1.0, -2.0, 0.5)):
    """theta after each step of ``form`` on the loss g . theta, whose gradient is g whatever theta."""
    theta = torch.tensor(theta0, dtype=torch.float64, requires_grad=True)
    opt = rmsprop([theta], form, LR, RHO)
    out = []
    for g in grads:
        opt.zero_grad()
        (torch.tensor(g, dtype=torch.float64) * theta).sum().backward()
        opt.step()
        out.append(theta.detach().clone().tolist())
    return out


def hand(theta0, grads, eps, inside, r0):
    """r = rho r + (1 - rho) g^2; theta -= lr g / D, D = sqrt(r + eps) or sqrt(r) + eps: written out."""
    theta, r, out = list(theta0), [r0] * len(theta0), []
    for g in grads:
        for i, gi in enumerate(g):
            r[i] = RHO * r[i] + (1 - RHO) * gi * gi
            d = math.sqrt(r[i] + eps) if inside else math.sqrt(r[i]) + eps
            theta[i] -= LR * gi / d
        out.append(list(theta))
    return out


@pytest.mark.parametrize("form, eps, inside, r0", [("rmsprop-lasagne", 1e-6, True, 0.0),
                                                   ("rmsprop-tf1", 1e-10, True, 1.0),
                                                   ("rmsprop-torch", 1e-8, False, 0.0)])
def test_each_form_matches_a_hand_computation_of_two_steps(form, eps, inside, r0):
    theta0 = (1.0, -2.0, 0.5)
    torch.testing.assert_close(torch.tensor(steps(form, [G1, G2], theta0), dtype=torch.float64),
                               torch.tensor(hand(theta0, [G1, G2], eps, inside, r0), dtype=torch.float64),
                               rtol=1e-12, atol=1e-15)


def test_first_step_by_hand_in_numbers():
    """The first step on a gradient of 0.5 and one of 1e-4, with the numbers written out."""
    (lasagne,), (torch_form,), (tf1,) = (steps(f, [G1]) for f in ("rmsprop-lasagne", "rmsprop-torch", "rmsprop-tf1"))
    # Lasagne: 0.01 * 0.5 / sqrt(0.1 * 0.25 + 1e-6) and 0.01 * 1e-4 / sqrt(0.1 * 1e-8 + 1e-6)
    assert 1.0 - lasagne[0] == pytest.approx(0.005 / math.sqrt(0.025001), rel=1e-12)  # 0.0316221...
    assert -2.0 - lasagne[1] == pytest.approx(-1e-6 / math.sqrt(1.001e-6), rel=1e-12)  # -0.00099950...
    # torch: 0.01 * 1e-4 / (sqrt(1e-9) + 1e-8): about sqrt(10) * lr on a gradient of 1e-4
    assert -2.0 - torch_form[1] == pytest.approx(-1e-6 / (math.sqrt(1e-9) + 1e-8), rel=1e-12)  # -0.0316128...
    # TF 1 starts its mean square at 1: 0.01 * 0.5 / sqrt(0.9 + 0.025 + 1e-10)
    assert 1.0 - tf1[0] == pytest.approx(0.005 / math.sqrt(0.925 + 1e-10), rel=1e-12)
    # what issue 34 is about: torch's first step on a tiny gradient is 30 times Lasagne's
    assert abs(-2.0 - torch_form[1]) > 30 * abs(-2.0 - lasagne[1])
    assert lasagne[2] == torch_form[2] == tf1[2] == 0.5  # a zero gradient moves nothing


def test_lr_schedule_and_state_round_trip_through_a_weights_only_checkpoint():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = rmsprop(model.parameters(), "rmsprop-lasagne", LR, RHO)
    x = torch.randn(8, 4)

    def step(m, o):
        o.zero_grad()
        m(x).pow(2).sum().backward()
        o.step()
    step(model, opt)
    for g in opt.param_groups:
        g["lr"] *= 0.99  # the tasks' per-epoch decay
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ck = torch.load(buf, weights_only=True)
    twin = torch.nn.Linear(4, 3)
    twin.load_state_dict(ck["model"])
    twin_opt = rmsprop(twin.parameters(), "rmsprop-lasagne", LR, RHO)
    twin_opt.load_state_dict(ck["opt"])
    step(model, opt)
    step(twin, twin_opt)
    assert twin_opt.param_groups[0]["lr"] == pytest.approx(LR * 0.99)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bad_arguments_are_clear_errors():
    p = [torch.zeros(2, requires_grad=True)]
    with pytest.raises(ValueError, match="optimizer='adam' is not valid; allowed values: 'rmsprop-lasagne'"):
        rmsprop(p, "adam", LR, RHO)
    for bad in (dict(lr=0.0), dict(lr=0.1, rho=1.0), dict(lr=0.1, eps=-1.0)):
        with pytest.raises(ValueError, match="RMSProp2016: .* is out of range"):
            RMSProp2016(p, **bad)
    sparse = torch.nn.Embedding(5, 2, sparse=True)
    opt = RMSProp2016(sparse.parameters(), lr=0.1)
    sparse(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


def test_the_trainer_step_clips_to_the_global_norm_and_reports_the_norm_before_clipping():
    from recdrop.train import Task

    task = Task()
    task.model = torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in task.model.parameters()]
    task.optimizer = torch.optim.SGD(task.model.parameters(), lr=1.0)
    loss = (task.model(torch.ones(4, 3)) * 100).sum()
    norm = task.optimise(loss, clip_norm=0.5)
    assert norm > 100  # before clipping
    moved = float(torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(task.model.parameters(), before))))
    assert moved == pytest.approx(0.5, rel=1e-5)  # one SGD step of lr 1 on gradients scaled to norm 0.5
    task.optimise((task.model(torch.ones(1, 3)) * 1e-3).sum(), clip_norm=0.5)  # under the threshold: untouched
    g = torch.cat([p.grad.flatten() for p in task.model.parameters()])
    torch.testing.assert_close(g, torch.cat([torch.full((6,), 1e-3), torch.full((2,), 1e-3)]))


@pytest.mark.parametrize("experiment", ["ner", "sentiment"])
def test_tables_4_and_5_train_with_lasagnes_rmsprop_and_clip_at_5_recording_how_often(experiment, tmp_path,
                                                                                   monkeypatch):
    from recdrop.experiments import EXPERIMENTS
    from recdrop.store import RunStore
    from recdrop.train import train_run

    pytest.importorskip("seqeval")
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    e = EXPERIMENTS[experiment]
    cfg = e.config.at_scale("ci")
    assert (cfg.optimizer, cfg.clip_norm) == ("rmsprop-lasagne", 5.0)
    try:
        rec = train_run(e.task, cfg.replace(clip_norm=1e-6), store=RunStore(tmp_path), progress=False)
    except FileNotFoundError as err:
        pytest.skip(f"dataset missing: {err}")
    assert all(c["clipped"] == 1.0 and c["grad_norm"] > 1e-6 for c in rec.curves)  # every step clipped
