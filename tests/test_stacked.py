"""A group of language models as one model (``recdrop.stacked``, issue 46): each run computes, draws,
clips and steps as it does alone; a member's parameters are views of its slice and its checkpoint holds
only that slice; one step's host work (its aten ops) hardly grows with the number of runs."""
import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from recdrop.data import data_root
from recdrop.models import Dropout, LanguageModel, language_models_nll, set_generator
from recdrop import updates
from recdrop.stacked import StackedLanguageModels
from recdrop.store import save_checkpoints

V, E, H, T, B = 11, 4, 5, 7, 3
# every target, both samplings (and a mix of them on one target), both scalings, forward dropout or not
SETTINGS = [Dropout(0.25, "semeniuta", "per-step", "paper", 0.2, 0.5), Dropout(0.0, input=0.0, output=0.5),
            Dropout(0.5, "gal", "per-sequence", "paper"), Dropout(0.25, "gal+semeniuta", "per-step", "inverted"),
            Dropout(0.25, "moon", "per-sequence", "inverted", 0.2, 0.0), Dropout(),
            Dropout(0.5, "semeniuta", "per-sequence", "paper")]


def twins(dtype=torch.float64, device="cpu"):
    """The same models twice, each with a generator of its own seed: one set to stack, one to run alone."""
    torch.manual_seed(0)
    models = [LanguageModel(V, E, H, d, 0.05).to(device, dtype).train() for d in SETTINGS]
    alone = [LanguageModel(V, E, H, d, 0.05).to(device, dtype).train() for d in SETTINGS]
    for pair in (models, alone):
        for r, m in enumerate(pair):
            set_generator(m, torch.Generator(device).manual_seed(10 + r))
    for a, m in zip(alone, models):
        a.load_state_dict(m.state_dict())
    return models, alone


ON = ["cpu", pytest.param("cuda", id="on_cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                       reason="no GPU"))]


@pytest.mark.parametrize("device", ON)
def test_each_run_of_a_stacked_group_trains_as_its_model_alone(device):
    """Three steps of SGD with each run's own clipping threshold (none for one) and learning rate, from
    carried states: the losses, gradients and weights equal each model's own (``clip_grad_norm_``, then
    p - lr g) in float64, and so do the evaluation's losses."""
    models, alone = twins(device=device)
    stack = StackedLanguageModels(models)
    g = torch.Generator().manual_seed(1)
    tokens, targets = (torch.randint(V, (T, B), generator=g).to(device) for _ in range(2))
    states = tuple(torch.randn(len(models), B, H, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    lrs = torch.tensor([1.0, 0.5, 1.0, 1.0, 0.3, 1.0, 2.0], dtype=torch.float64, device=device)
    clips = torch.tensor([10.0, 0.1, 0.0, 1.0, 10.0, 0.05, 5.0], dtype=torch.float64, device=device)
    sgd = updates.SGD(stack.params, [torch.optim.SGD(m.parameters(), lr=1.0) for m in models])
    for _ in range(3):
        nll, (h, c) = stack.nll(tokens, states, targets)
        stack.zero_grad()
        (nll.sum() + c.sum()).backward()
        norms = updates.clip_(stack.grads(), clips)
        sgd.update(stack.grads(), lrs)
        for r, m in enumerate(alone):
            m.zero_grad()
            loss, (h_r, c_r) = language_models_nll([m], tokens, (states[0][r:r + 1], states[1][r:r + 1]), targets)
            (loss.sum() + c_r.sum()).backward()
            torch.testing.assert_close(nll[r:r + 1], loss, rtol=1e-12, atol=0)
            torch.testing.assert_close((h[r:r + 1], c[r:r + 1]), (h_r, c_r), rtol=1e-12, atol=1e-14)
            params = list(m.parameters())
            norm = torch.nn.utils.clip_grad_norm_(params, float(clips[r])) if clips[r] > 0 else \
                torch.nn.utils.get_total_norm([p.grad for p in params])
            torch.testing.assert_close(norms[r], norm, rtol=1e-12, atol=0)
            with torch.no_grad():
                for p in params:
                    p.add_(p.grad, alpha=-float(lrs[r]))
        for m, a in zip(models, alone):
            for (name, p), q in zip(m.named_parameters(), a.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-15, msg=name)
        states = (h.detach(), c.detach())
    for m in models + alone:
        m.eval()
    with torch.no_grad():
        nll, _ = StackedLanguageModels(models, bind=False).nll(tokens, states, targets, reduction="sum")
        each = [language_models_nll([a], tokens, (states[0][r:r + 1], states[1][r:r + 1]), targets,
                                    reduction="sum")[0] for r, a in enumerate(alone)]
    torch.testing.assert_close(nll, torch.cat(each), rtol=1e-12, atol=0)


def test_a_member_is_a_view_of_its_slice_and_its_checkpoint_holds_only_that(tmp_path):
    models, alone = twins(torch.float32)
    stack = StackedLanguageModels(models)
    with torch.no_grad():
        stack.w_out[2].fill_(3.0)
    assert bool((models[2].out.weight == 3.0).all()) and not bool((models[1].out.weight == 3.0).any())
    save_checkpoints([(tmp_path / "one.pt", {"model": models[2].state_dict()}),
                      (tmp_path / "alone.pt", {"model": alone[2].state_dict()})])
    group = sum(p.numel() * p.element_size() for p in stack.params)
    size, size_alone = (tmp_path / "one.pt").stat().st_size, (tmp_path / "alone.pt").stat().st_size
    assert abs(size - size_alone) < 64 and size < group  # the slice, not the group's storage
    loaded = torch.load(tmp_path / "one.pt", weights_only=True)["model"]
    assert bool((loaded["out.weight"] == 3.0).all()) and hasattr(loaded, "_metadata")
    copy = StackedLanguageModels(models, bind=False)
    with torch.no_grad():
        copy.w_out.zero_()
    assert bool((models[2].out.weight == 3.0).all())  # an evaluation's stack is a copy


def test_a_stacked_group_refuses_models_it_cannot_stack():
    models, _ = twins()
    with pytest.raises(ValueError, match="share their sizes"):
        StackedLanguageModels([models[0], LanguageModel(V, E, H + 1, Dropout(), 0.05).double()])
    with pytest.raises(TypeError, match="LanguageModel"):
        StackedLanguageModels([models[0], torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="at least one"):
        StackedLanguageModels([])
    set_generator(models[0], None)
    stack = StackedLanguageModels(models)
    with pytest.raises(ValueError, match="its own generator"):
        stack.nll(torch.zeros(T, B, dtype=torch.long), (torch.zeros(len(models), B, H, dtype=torch.float64),) * 2,
                  torch.zeros(T, B, dtype=torch.long))


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not (data_root() / "ptb").exists(), reason="PTB not available")
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_a_groups_step_dispatches_about_the_same_ops_for_26_runs_as_for_2(monkeypatch):
    """The aten ops of one word-LM group step on the stacked path (a GPU's, run here on the CPU with
    oneDNN off): only each run's mask draws grow with the runs. The first two runs between them draw
    every kind of mask (Gal's and ours per step with forward dropout, Moon's per sequence), so that
    every op the others bring is one a group of two has; the others are Table 2's cells. The decoder's
    loss runs in one chunk here: its chunks, as many as the logits need to stay within a memory bound,
    grow with the runs by design (``fused.group_decoder_nll``)."""
    from recdrop.experiments.word_lm import WordLMTask, grid

    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    monkeypatch.setenv("RECDROP_CPU_KERNELS", "0")  # a GPU's torch ops, not the CPU's C++ kernels
    monkeypatch.setattr("recdrop.fused.DECODER_CHUNK", 2**40)
    cells = [c for _, c in grid("ci")]
    first = [cells[0].replace(recurrent_dropout=0.25, scheme="gal+semeniuta", input_dropout=0.2, output_dropout=0.5),
             cells[0].replace(recurrent_dropout=0.5, scheme="moon", sampling="per-sequence")]
    counts = {}
    for runs in (1, 2, 8, 26):
        tasks = []
        for r, cfg in zip(range(runs), itertools.chain(first, cells)):
            tasks.append(WordLMTask(cfg, "cpu", 0))
            set_generator(tasks[-1].model, torch.Generator().manual_seed(r))
        step = WordLMTask.group_stepper(tasks)
        with torch.backends.mkldnn.flags(enabled=False):
            step(0)
            mode = _CountOps()
            with mode:
                step(cells[0].bptt)
        counts[runs] = mode.count
    print("aten ops per group step:", counts)  # at 1 run the run's own model (torch.nn's LSTM where no dropout)
    assert counts[26] <= 1.2 * counts[2], counts


def test_a_stacked_adam_steps_each_run_as_its_own_adam_and_its_state_is_the_members():
    """Three steps of Adam at each run's own learning rate and clipping threshold, the runs stacked,
    against each model's own ``torch.optim.Adam`` after ``clip_grad_norm_``: weights and moments equal in
    float64; each member optimiser's state is its slice (views), so its state_dict is what it is alone; a
    group formed again from the members goes on from their moments and step counts."""
    models, alone = twins()
    lrs = torch.tensor([1e-3, 2e-3, 5e-4, 1e-3, 1e-2, 1e-3, 3e-3], dtype=torch.float64)
    clips = torch.tensor([10.0, 0.1, 0.0, 1.0, 10.0, 0.05, 5.0], dtype=torch.float64)
    opts = [torch.optim.Adam(m.parameters(), lr=float(lr)) for m, lr in zip(models, lrs)]
    opts_alone = [torch.optim.Adam(m.parameters(), lr=float(lr)) for m, lr in zip(alone, lrs)]
    g = torch.Generator().manual_seed(1)
    tokens, targets = (torch.randint(V, (T, B), generator=g) for _ in range(2))
    zero = torch.zeros(len(models), B, H, dtype=torch.float64)
    for round_ in range(2):  # the second: a group formed again from the members' states
        stack = StackedLanguageModels(models)
        adam = updates.Adam(stack.params, [list(m.parameters()) for m in models], opts)
        for _ in range(3 - round_):
            nll, _ = stack.nll(tokens, (zero, zero), targets)
            stack.zero_grad()
            nll.sum().backward()
            updates.clip_(stack.grads(), clips)
            adam.count()
            adam.update(stack.grads(), lrs)
            for r, (m, o) in enumerate(zip(alone, opts_alone)):
                o.zero_grad()
                loss, _ = language_models_nll([m], tokens, (zero[:1], zero[:1]), targets)
                loss.sum().backward()
                if clips[r] > 0:
                    torch.nn.utils.clip_grad_norm_(list(m.parameters()), float(clips[r]))
                o.step()
        for m, a, o, oa in zip(models, alone, opts, opts_alone):
            for p, q in zip(m.parameters(), a.parameters()):
                torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-13)
            mine, theirs = o.state_dict()["state"], oa.state_dict()["state"]
            for i in theirs:
                assert float(mine[i]["step"]) == float(theirs[i]["step"])
                torch.testing.assert_close(mine[i]["exp_avg_sq"], theirs[i]["exp_avg_sq"], rtol=1e-10, atol=1e-16)
            assert mine[0]["exp_avg"].untyped_storage().data_ptr() == adam.exp_avg[0].untyped_storage().data_ptr()
    with pytest.raises(ValueError, match="torch.optim.Adam with one group"):
        updates.Adam(StackedLanguageModels(models).params, [list(m.parameters()) for m in models],
                     [torch.optim.SGD(m.parameters(), lr=1.0) for m in models])
