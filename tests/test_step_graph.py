"""A group's whole training step as one CUDA graph (issue 46, ``recdrop.step_graph``): on a GPU the
captured step trains as the eager step does (the same masks from each run's own generator, the same
updates, a learning rate changed between steps followed); off CUDA the stepper is the eager step; the
plain-SGD update from a tensor of rates is SGD's; an optimiser it cannot follow is refused."""
import pytest
import torch

from recdrop import graphs, step_graph, updates
from recdrop.experiments.word_lm import WordLMConfig, WordLMTask
from recdrop.models import set_generator
from recdrop.store import RunStore
from recdrop.train import mask_generator, optimise_group, seed_everything, train_group, train_run
from recdrop.updates import check_plain_sgd

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")


def word_lm_tasks(device, n=3):
    """``n`` word LMs at ci scale with recurrent and forward dropout, each built as the trainer builds it."""
    base = WordLMConfig.at_scale("ci")
    configs = [base.replace(recurrent_dropout=0.25, scheme="gal", sampling="per-sequence"),
               base.replace(recurrent_dropout=0.5, input_dropout=0.2, output_dropout=0.5, lr=0.5),
               base.replace(recurrent_dropout=0.25, scheme="moon", clip_norm=1.0)][:n]
    tasks = []
    for cfg in configs:
        seed_everything(0)
        task = WordLMTask(cfg, device, 0)
        set_generator(task.model, mask_generator(0, device))
        task.model.train()
        tasks.append(task)
    return tasks


def train_steps(tasks, stepper, starts, decay_at):
    """Each window's losses (R,) through ``stepper``, the learning rates divided by 1.5 before step ``decay_at``."""
    losses = []
    for i, start in enumerate(starts):
        if i == decay_at:
            for t in tasks:
                t.optimizer.param_groups[0]["lr"] /= 1.5
        losses.append(torch.stack([out["loss"] for out in stepper(start)]).clone())
    return torch.stack(losses)


def test_off_cuda_the_stepper_is_the_eager_group_step():
    a, b = word_lm_tasks("cpu"), word_lm_tasks("cpu")
    stepper = WordLMTask.group_stepper(a)
    assert not stepper.enabled and not stepper.captured
    starts = a[0].batches(0) * 2
    got = train_steps(a, stepper, starts, decay_at=2)
    eager = WordLMTask.group_stepper(b, graphed=False)
    want = torch.stack([torch.stack([o["loss"] for o in eager(s)]) for s in starts[:2]])
    for t in b:
        t.optimizer.param_groups[0]["lr"] /= 1.5
    want = torch.cat([want, torch.stack([torch.stack([o["loss"] for o in eager(s)]) for s in starts[2:]])])
    assert torch.equal(got, want)
    for ta, tb in zip(a, b):
        assert all(torch.equal(p, q) for p, q in zip(ta.model.parameters(), tb.model.parameters()))
        assert all(torch.equal(s, r) for s, r in zip(ta.state, tb.state))
    # the changed rate is followed: without it, the steps after it train otherwise
    c = word_lm_tasks("cpu")
    kept = train_steps(c, WordLMTask.group_stepper(c), starts, decay_at=None)
    assert torch.equal(kept[:3], got[:3]) and not torch.equal(kept[3:], got[3:])


def test_the_update_from_a_tensor_of_rates_is_sgds():
    """optimise_group with plain SGD from a tensor of rates, each run a stack of one: p - lr_r g after
    each run's clipping, as torch's ``clip_grad_norm_`` and ``torch.optim.SGD`` step."""
    a, b = word_lm_tasks("cpu", 2), word_lm_tasks("cpu", 2)
    window = a[0].train_data[:a[0].cfg.bptt + 1]
    lrs = step_graph.LearningRates([t.optimizer for t in b], "cpu")
    sgds = [updates.SGD(updates.of_one(t.model.parameters()), [t.optimizer]) for t in b]
    clips = torch.tensor([t.cfg.clip_norm for t in b])
    for tasks in (a, b):
        for t in tasks:
            t.model.eval()  # no masks: the two calls see the same losses
        loss = torch.stack([torch.nn.functional.cross_entropy(
            t.model(window[:-1], t._zero_state())[0].flatten(0, 1), window[1:].flatten()) for t in tasks])
        if tasks is a:
            for t in a:
                t.optimizer.zero_grad()
            loss.sum().backward()
            want = [torch.nn.utils.clip_grad_norm_(t.model.parameters(), t.cfg.clip_norm) for t in a]
            for t in a:
                t.optimizer.step()
        else:
            norms = optimise_group(b, loss, clips, sgds, lrs.tensor)
    torch.testing.assert_close(norms, torch.stack(want))
    assert lrs.tensor.tolist() == [t.optimizer.param_groups[0]["lr"] for t in b]
    for ta, tb in zip(a, b):
        for p, q in zip(ta.model.parameters(), tb.model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)


def test_a_tensor_of_rates_refuses_an_optimiser_it_cannot_follow():
    p = [torch.nn.Parameter(torch.zeros(2))]
    check_plain_sgd(torch.optim.SGD(p, lr=0.1))
    for bad in (torch.optim.SGD(p, lr=0.1, momentum=0.9), torch.optim.SGD(p, lr=0.1, weight_decay=1e-4),
                torch.optim.Adam(p)):
        with pytest.raises(ValueError, match="plain SGD"):
            check_plain_sgd(bad)
    with pytest.raises(ValueError, match="plain SGD"):  # checked once, where the update is made
        updates.SGD(updates.of_one(p), [torch.optim.Adam(p)])


def test_suspended_graphs_run_the_plain_loops_in_every_thread(monkeypatch):
    """Inside ``graphs.suspended`` no loop is graphed, in the caller's thread nor in another (the autograd
    engine runs a GPU's backward on its own); outside it they are again."""
    import threading

    monkeypatch.setattr(graphs, "_on_one_cuda_device", lambda tensors: True)  # as if on a GPU
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    t = torch.zeros(1)
    seen = []

    def other_thread():
        seen.append(graphs.graphs_usable([t]))
    assert graphs.graphs_usable([t])
    with graphs.suspended():
        assert not graphs.graphs_usable([t])
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert seen == [False] and graphs.graphs_usable([t])


class Replaying:
    """A stand-in for ``step_graph.CudaGraphs`` on the CPU: the warm-up and each replay run the step
    eagerly, a capture runs nothing; it counts its captures and replays."""
    made = []

    def __init__(self, device):
        self.captures = self.replays = 0
        Replaying.made.append(self)

    def warm(self, fn):
        return fn()

    def capture(self, body, generators):
        self.captures += 1
        return body

    def replay(self, body):
        self.replays += 1
        return body()

    def settle(self):
        pass


@pytest.fixture
def stand_in_graphs(monkeypatch):
    monkeypatch.setattr(step_graph, "capturable", lambda device: True)
    monkeypatch.setattr(step_graph, "CudaGraphs", Replaying)
    Replaying.made = []
    return Replaying.made


def test_the_trainer_captures_a_groups_step_once_and_records_it(stand_in_graphs, tmp_path, monkeypatch):
    """The trainer's path of a captured step, on the CPU: one capture per group after the warm-up, every
    later step a replay, the update read from the tensor of rates (plain SGD), the records the eager
    ones' to float64's rounding, saying ``step: cuda-graph``."""
    torch.set_default_dtype(torch.float64)
    try:
        base = WordLMConfig.at_scale("ci").replace(epochs=3)
        runs = [(base.replace(recurrent_dropout=0.25, scheme="gal"), 0), (base.replace(lr=0.5, lr_decay=4.0), 0)]
        monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
        graphed = train_group(WordLMTask, runs, store=RunStore(tmp_path / "graphed"), progress=False)
        monkeypatch.setattr(step_graph, "capturable", lambda device: False)
        monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache-eager"))
        eager = train_group(WordLMTask, runs, store=RunStore(tmp_path / "eager"), progress=False)
    finally:
        torch.set_default_dtype(torch.float32)
    steps = 3 * len(WordLMTask(base, "cpu", 0).batches(0))
    train_steps = [b for b in stand_in_graphs if b.captures or b.replays]  # the group's (evaluations: too short)
    assert len(train_steps) == 1 and train_steps[0].captures == 1
    assert train_steps[0].replays == steps - step_graph.WARMUP
    assert len(graphed) == len(eager) == len(runs)  # every member each way: zip stops at the shorter
    for g, e in zip(graphed, eager):
        assert g.step == "cuda-graph" and "step" not in e.json()
        assert [c["lr"] for c in g.curves] == [c["lr"] for c in e.curves]  # the schedule followed
        for a, b in zip(g.curves, e.curves):
            assert a["train_ppl"] == pytest.approx(b["train_ppl"], rel=1e-9)
            assert a["valid_ppl"] == pytest.approx(b["valid_ppl"], rel=1e-9)


def test_a_capture_that_fails_warns_puts_the_generators_back_and_steps_eagerly(stand_in_graphs, monkeypatch):
    def failing(self, body, generators):
        for g in generators:
            torch.rand(3, generator=g)  # a capture that moved the generators before it failed
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(Replaying, "capture", failing)
    a, b = word_lm_tasks("cpu"), word_lm_tasks("cpu")
    stepper = WordLMTask.group_stepper(a)
    eager = WordLMTask.group_stepper(b, graphed=False)
    starts = a[0].batches(0) * 2
    for i, start in enumerate(starts):
        if i == step_graph.WARMUP:
            with pytest.warns(UserWarning, match="could not be captured.*operation not permitted"):
                got = stepper(start)
        else:
            got = stepper(start)
        want = eager(start)
        assert torch.allclose(torch.stack([o["loss"] for o in got]), torch.stack([o["loss"] for o in want]),
                              rtol=1e-6)
    assert not stepper.enabled and not stepper.captured and "RuntimeError" in stepper.failure


@needs_cuda
def test_on_cuda_the_captured_step_trains_as_the_eager_step():
    """The graph replays draw each run's masks from its own generator as the eager steps do, follow a
    learning rate changed between replays, and leave the same weights, states and generators."""
    eager_tasks, graph_tasks = word_lm_tasks("cuda"), word_lm_tasks("cuda")
    eager = WordLMTask.group_stepper(eager_tasks, graphed=False)
    graphed = WordLMTask.group_stepper(graph_tasks)
    starts = eager_tasks[0].batches(0) * 5
    want = train_steps(eager_tasks, eager, starts, decay_at=step_graph.WARMUP + 3)
    got = train_steps(graph_tasks, graphed, starts, decay_at=step_graph.WARMUP + 3)
    assert graphed.captured, graphed.failure
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for te, tg in zip(eager_tasks, graph_tasks):
        for p, q in zip(te.model.parameters(), tg.model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
        for s, r in zip(te.state, tg.state):
            torch.testing.assert_close(r, s, rtol=1e-4, atol=1e-5)
    ge = [m.generator for t in eager_tasks for m in t.model.modules() if getattr(m, "generator", None) is not None]
    gg = [m.generator for t in graph_tasks for m in t.model.modules() if getattr(m, "generator", None) is not None]
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(ge, gg))
    graphed.release()


@needs_cuda
def test_on_cuda_the_graphed_evaluation_gives_the_eager_perplexities(monkeypatch):
    from recdrop.experiments import word_lm
    captured = []

    class Recording(step_graph.StepGraph):
        def release(self):
            captured.append(self.captured)
            super().release()
    monkeypatch.setattr(word_lm, "StepGraph", Recording)
    tasks = word_lm_tasks("cuda")
    for t in tasks:
        t.model.eval()
    data = torch.cat([tasks[0].valid_data] * 4)  # full windows enough to warm up and capture, and a short last one
    with torch.no_grad():
        graphed = WordLMTask.group_perplexities(tasks, data)
        monkeypatch.setenv("RECDROP_STEP_GRAPH", "0")
        eager = WordLMTask.group_perplexities(tasks, data)
    assert captured == [True, False]
    torch.testing.assert_close(torch.tensor(graphed), torch.tensor(eager), rtol=1e-5, atol=0.0)


@pytest.mark.parametrize("experiment,size", [("word_lm", 4), ("char_lm", 4), ("char_lm", 1)])
def test_a_group_on_a_gpus_way_ends_with_each_members_record_alone(experiment, size, stand_in_graphs, tmp_path,
                                                                   monkeypatch):
    """A GPU's way, on the CPU: the runs stacked, the step captured once and replayed (the char LM's last,
    smaller batch of each epoch eagerly; a char LM alone as a stack of one), the outputs read every few
    steps and at each checkpoint rather than at every step. Each member ends with the record of the same
    run trained alone the CPU's way (each run's own model, its own Adam or SGD, its outputs read at every
    step), to float64's rounding."""
    from test_fused_training import TASKS, close, members

    _, task = TASKS[experiment]
    runs = members(experiment)[-size:]  # alone: Moon's, with its own clipping threshold
    torch.set_default_dtype(torch.float64)
    try:
        with monkeypatch.context() as gpu_way:
            gpu_way.setenv("RECDROP_STACK_ON_CPU", "1")
            gpu_way.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
            group = train_group(task, runs, store=RunStore(tmp_path / "group"), progress=False, read_every=5)
        monkeypatch.setattr(step_graph, "capturable", lambda device: False)
        monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache-alone"))
        alone = [train_run(task, c, s, store=RunStore(tmp_path / "alone"), progress=False) for c, s in runs]
    finally:
        torch.set_default_dtype(torch.float32)
    steps = [b for b in stand_in_graphs if b.captures]
    assert len(steps) == 1 and steps[0].replays > 0  # the group's training step (the evaluations' too few)
    assert len(group) == len(alone) == len(runs)
    for g, a in zip(group, alone):
        assert g.step == "cuda-graph" and "step" not in a.json()
        assert close(g, a, rtol=1e-9), (g.metrics, a.metrics)


def test_a_member_that_diverges_between_reads_is_recorded_where_it_diverged(tmp_path, monkeypatch):
    """Outputs read every 4 steps: the run whose loss turns NaN at epoch 2, batch 3 is recorded there,
    with its one epoch of curves, as alone; its last good checkpoint is the one before; the others
    finish as alone; and no step reads a tensor on the host: only the reads do."""
    from torch.overrides import TorchFunctionMode

    from recdrop import train
    from test_fused_training import close, members

    class HostReads(TorchFunctionMode):
        count = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("tolist", "item", "__float__", "__bool__", "__int__"):
                HostReads.count += 1
            return func(*args, **(kwargs or {}))
    real_stepper = WordLMTask.group_stepper.__func__
    in_steps = []

    def stepper(cls, tasks, graphed=True):
        real_step = real_stepper(cls, tasks, graphed)

        def step(start):
            before = HostReads.count
            outs = real_step(start)
            for t, out in zip(tasks, outs):
                t.steps = getattr(t, "steps", 0) + 1
                if t.cfg.lr == 0.75 and t.steps == batches + 3:
                    out["loss"] = out["loss"] * float("nan")
            in_steps.append(HostReads.count - before)
            return outs
        return step
    monkeypatch.setattr(WordLMTask, "group_stepper", classmethod(stepper))
    monkeypatch.setenv("RECDROP_STACK_ON_CPU", "1")
    reads = []
    real_read = train.StepOutputs.read
    monkeypatch.setattr(train.StepOutputs, "read", lambda self: reads.append(len(self)) or real_read(self))
    runs = [(c.replace(bptt=10), s) for c, s in members("word_lm")[:2]]  # more batches an epoch than a read holds
    runs.insert(1, (runs[0][0].replace(lr=0.75), 0))
    batches = len(WordLMTask(runs[0][0], "cpu", 0).batches(0))
    errors = {}
    torch.set_default_dtype(torch.float64)
    try:
        monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
        with HostReads():
            group = train_group(WordLMTask, runs, store=RunStore(tmp_path / "group"), progress=False, errors=errors,
                                read_every=4)
        group_reads, group_steps = list(reads), list(in_steps)  # the group's (the runs alone read at every step)
        ckpt = torch.load(RunStore(tmp_path / "group").checkpoint_path("word_lm", group[1].run_id),
                          weights_only=True)
        monkeypatch.delenv("RECDROP_STACK_ON_CPU")
        monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache-alone"))
        alone = [train_run(WordLMTask, c, s, store=RunStore(tmp_path / "alone"), progress=False)
                 for c, s in runs[::2]]
    finally:
        torch.set_default_dtype(torch.float32)
    assert batches > 4 and group_steps and set(group_steps) == {0}
    epochs = len(group[0].curves)
    assert sum(group_reads) == len(group_steps) and max(group_reads) == 4  # each step's outputs read once, in fours
    assert len(group_reads) <= len(group_steps) / 4 + 2 * epochs  # and at each epoch's end and checkpoint
    assert list(errors) == [group[1].run_id]
    assert group[1].diverged == {"epoch": 2, "batch": 3, "loss": "nan"}
    assert len(group[1].curves) == 1 and group[1].metrics == {}
    assert (ckpt["epoch"], ckpt["batch"]) == (1, 0)  # the last good one, at the end of epoch 1
    for g, a in zip(group[::2], alone):
        assert not g.diverged and close(g, a, rtol=1e-9) and len(g.curves) == 2


@needs_cuda
def test_on_cuda_the_captured_char_lm_step_trains_as_the_eager_step():
    """The char LM's step on a GPU: its full batches replay one graph and each epoch's last, smaller batch
    runs eagerly between replays; the masks, Adam's updates and step counts, and a learning rate changed
    between steps follow the eager stacked step's."""
    from recdrop.experiments.char_lm import CharLMTask
    from test_fused_training import members

    def tasks():
        made = []
        for cfg, seed in members("char_lm"):
            seed_everything(seed)
            task = CharLMTask(cfg, "cuda", seed)
            set_generator(task.model, mask_generator(seed, "cuda"))
            task.model.train()
            made.append(task)
        return made
    eager_tasks, graph_tasks = tasks(), tasks()
    eager = CharLMTask.group_stepper(eager_tasks, graphed=False)
    graphed = CharLMTask.group_stepper(graph_tasks)
    batches = eager_tasks[0].batches(0) + eager_tasks[0].batches(1)
    assert batches[0].shape != batches[-1].shape  # a smaller last batch in each epoch
    want = train_steps(eager_tasks, eager, batches, decay_at=len(batches) // 2)
    got = train_steps(graph_tasks, graphed, batches, decay_at=len(batches) // 2)
    assert graphed.captured, graphed.graph.failure
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for te, tg in zip(eager_tasks, graph_tasks):
        for p, q in zip(te.model.parameters(), tg.model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6)
        assert [float(s["step"]) for s in te.optimizer.state_dict()["state"].values()] == \
            [float(s["step"]) for s in tg.optimizer.state_dict()["state"].values()] == [len(batches)] * 7
    graphed.release()
