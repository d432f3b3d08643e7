"""Each run's update written once (``recdrop.updates``): a run alone, its parameters a stack of one,
steps as torch's own optimiser, and goes on from that optimiser's state."""
import pytest
import torch

from recdrop import updates


def model_and_twin(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    twin = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    twin.load_state_dict(model.state_dict())
    return model, twin


def loss_of(model, step: int) -> torch.Tensor:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(step))
    return (model(x) ** 2).sum()


def test_a_run_alone_steps_as_torch_adam_and_goes_on_from_its_state():
    """Four steps of a stack of one against ``torch.optim.Adam`` in float32; after two, the update is made
    again from the optimiser's state (a resumed run): its moments and count carry on, and its
    ``state_dict`` is the optimiser's."""
    model, twin = model_and_twin()
    mine, theirs = torch.optim.Adam(model.parameters(), lr=0.01), torch.optim.Adam(twin.parameters(), lr=0.01)
    lrs = torch.tensor([0.01])
    for step in range(4):
        if step in (0, 2):
            adam = updates.Adam(updates.of_one(model.parameters()), [list(model.parameters())], [mine])
        for m, o in ((model, mine), (twin, theirs)):
            o.zero_grad()
            loss_of(m, step).backward()
        adam.count()
        adam.update(updates.of_one([p.grad for p in model.parameters()]), lrs)
        theirs.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
            assert float(mine.state[p]["step"]) == float(theirs.state[q]["step"]) == step + 1
            torch.testing.assert_close(mine.state[p]["exp_avg_sq"], theirs.state[q]["exp_avg_sq"])
    assert mine.state_dict()["state"].keys() == theirs.state_dict()["state"].keys()


def test_each_runs_clipping_is_clip_grad_norm():
    """``clip_`` of two runs stacked, one clipped and one under its threshold, and a run whose threshold is
    0 (not clipped): each as ``torch.nn.utils.clip_grad_norm_`` on that run's own gradients."""
    grads = [torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(1)), torch.randn(3, 6)]
    clips = torch.tensor([0.5, 100.0, 0.0])
    stacked = [g.clone() for g in grads]
    norms = updates.clip_(stacked, clips)
    for r in range(3):
        own = [torch.nn.Parameter(torch.zeros_like(g[r])) for g in grads]
        for p, g in zip(own, grads):
            p.grad = g[r].clone()
        want = torch.nn.utils.clip_grad_norm_(own, float(clips[r]) if clips[r] > 0 else float("inf"))
        torch.testing.assert_close(norms[r], want)
        for p, g in zip(own, stacked):
            torch.testing.assert_close(g[r], p.grad)
    assert norms[0] > 0.5 and not torch.equal(stacked[0][0], grads[0][0])  # the first run was clipped
    assert torch.equal(stacked[0][2], grads[0][2])  # the third not


def test_an_update_refuses_gradients_that_do_not_match_its_parameters():
    model, _ = model_and_twin()
    sgd = updates.SGD(updates.of_one(model.parameters()), [torch.optim.SGD(model.parameters(), lr=0.1)])
    with pytest.raises(ValueError, match="4 parameters got 3 gradients"):
        sgd.update(updates.of_one([torch.zeros_like(p) for p in model.parameters()][:3]), torch.tensor([0.1]))
