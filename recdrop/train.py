"""The trainer shared by every experiment: progress, checkpoints, resume, NaN checks, records.

An experiment supplies a ``Task`` (its model, optimiser, batches, one training step, an
evaluation); ``train_group`` trains a group of runs (a run alone is a group of one): it checks the
group, loads the runs that are done, and ``GroupTrainer`` starts the others and trains them in step
through ``GroupTraining``, the loop (``run``: for each epoch ``train_epoch``, for each batch
``train_batch``; then ``end_epoch`` and a checkpoint). A checkpoint (model, optimiser, task state, RNG states,
position, curves) is written atomically after every epoch and every ``checkpoint_every_s``
seconds inside one, so a later call resumes an interrupted run, which ends with the same metrics as
an uninterrupted one (same seed, CPU). The finished record is written last.
"""
from __future__ import annotations

import contextlib
import functools
import math
import random
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

import numpy as np
import torch

from . import cpu_kernels, cpu_products, graphs, route, updates
from .config import ExperimentConfig, run_id
from .layers import RecurrentLayer
from .models import set_generator
from .progress import bar as progress_bar, say
from .records import Record
from .store import CorruptCheckpointError, RunStore, environment, load_checkpoint, save_checkpoints, utc_now

DEVICES = ("cpu", "cuda")
# float32 products throughout; TF32 tensor-core products on a GPU; or the training forward under bfloat16
# autocast (``autocast``: products in bf16, weights, gradients, optimiser state and cell state in float32)
PRECISIONS = ("float32", "tf32", "bf16")


def set_precision(precision: str, device: str) -> None:
    """Float32 products everywhere (cuDNN's TF32, on by torch's default, off too), TF32 on a GPU, or
    bf16 autocast (``autocast``): an option, recorded in each record (``precision``) where it is used."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not valid; allowed values: {', '.join(map(repr, PRECISIONS))}")
    if precision == "tf32" and not str(device).startswith("cuda"):
        raise ValueError(f"precision='tf32' is a GPU's tensor-core format; device={device!r} computes in float32")
    if str(device).startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"


def set_task_precision(task: "Task", precision: str) -> None:
    """Train ``task`` at ``precision``: under bf16 its recurrent layers run recdrop's own loop where no
    dropout acts too, whose cell state stays float32 under autocast (torch.nn's would carry bf16)."""
    task.precision = precision
    if precision == "bf16":
        for m in task.model.modules():
            if isinstance(m, RecurrentLayer):
                m.torch_kernels = False


def layer_paths(model: torch.nn.Module) -> Optional[str]:
    """The paths its recurrent layers' last calls took (``layers.RecurrentLayer.route``), e.g.
    "fused+triton+graphs", and on a CPU the libraries of its float32 products (``cpu_products.chosen``),
    e.g. "fused; CPU products: onednn"; None where no layer has run."""
    found = sorted({str(m.last_route) for m in model.modules()
                    if isinstance(m, RecurrentLayer) and m.last_route is not None})
    on_cpu = any(p.device.type == "cpu" for p in model.parameters())
    products = cpu_products.chosen() if found and on_cpu else ""
    return "; ".join(found + ([f"CPU products: {products}"] if products else [])) or None


def add_precision_options(parser) -> None:
    """The command lines' ``--precision`` (and ``--tf32``, another spelling of ``--precision tf32``)."""
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="float32 (default); tf32: a GPU's products in TF32; bf16: each training forward under "
                             "bfloat16 autocast (the language models); recorded in each record")
    parser.add_argument("--tf32", action="store_true", help="the same as --precision tf32")


def precision_option(args) -> str:
    """The precision ``add_precision_options``' options ask for."""
    if args.tf32 and args.precision not in (None, "tf32"):
        raise ValueError(f"--tf32 and --precision {args.precision} ask for two precisions")
    return "tf32" if args.tf32 else args.precision or "float32"


def autocast(precision: str, device) -> contextlib.AbstractContextManager:
    """Where a training step's forward runs (not its backward, its update or an evaluation): under
    ``torch.autocast`` to bfloat16 with ``precision="bf16"`` (its cache off, which a CUDA graph's capture
    needs), else as it is."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, cache_enabled=False)


def flushing_denormals() -> bool:
    """Whether this thread's CPU arithmetic computes denormal floats (below 1.2e-38) as zero now."""
    return float(torch.tensor([1e-39]) * 1.0) == 0.0  # torch has a setter, not a getter


@contextlib.contextmanager
def denormals_flushed(device: str):
    """On a CPU, denormal floats computed as zero while training (FTZ and DAZ, as a GPU's fast math
    does), and the former mode restored afterwards. The carried cell state of a unit dropped for a
    whole sequence (a per-sequence mask) decays geometrically into them, and a CPU may take a slow
    microcode assist for each product with one. A value below 1.2e-38 changes no float32 sum of values
    of the sizes a network computes."""
    if not str(device).startswith("cpu"):
        yield
        return
    before = flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


class NonFiniteLossError(FloatingPointError):
    """A NaN or infinite training loss; the last good checkpoint is kept."""


class GroupMemberError(RuntimeError):
    """Some runs of a group could not start (a checkpoint that does not load, say); the others trained."""


class BudgetExhausted(RuntimeError):
    """The run reached its deadline: its checkpoint is saved, and the next call resumes it."""


class Task:
    """What an experiment gives the trainer. Subclasses set ``model`` and ``optimizer`` in
    ``__init__(config, device, seed)`` and implement the methods below. The trainer steps and evaluates
    a group of runs (a run alone is a group of one) through ``group_stepper`` and ``group_evaluate``:
    a task whose runs train one at a time implements ``train_step`` and ``evaluate``, which those call;
    a task whose runs fuse overrides those two instead."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    progress_metric: str = ""  # the metric shown on the progress bar
    # The config fields that may differ among the runs of one fused group (``group_stepper``); none: the
    # task's runs train one at a time. Where ``batches`` depends on the seed, a group has one seed.
    FUSABLE_FIELDS: Tuple[str, ...] = ()
    batches_depend_on_seed: bool = True
    # Whether its training step's forward runs under ``autocast(self.precision, device)``: a task that
    # does accepts ``precision="bf16"``; the trainer sets ``precision`` on each task it builds.
    autocasts: bool = False
    precision: str = "float32"

    @staticmethod
    def check_data(config: ExperimentConfig) -> None:
        """Verify the data a run of ``config`` reads, without reading it (``data.files.DatasetError`` names a
        missing or corrupt dataset file; the word vectors' error a missing package or file): the sweep
        calls it before any run starts. Nothing by default (a task whose data is synthetic)."""

    @classmethod
    def group_key(cls, config: ExperimentConfig, seed: int):
        """What the runs of one group share: the config less ``FUSABLE_FIELDS`` (and the seed where it
        orders the batches); None where the task trains one run at a time."""
        if not cls.FUSABLE_FIELDS:
            return None
        shared = {k: v for k, v in config.to_dict().items() if k not in cls.FUSABLE_FIELDS}
        return repr(sorted(shared.items())), (seed if cls.batches_depend_on_seed else None)

    @classmethod
    def group_bytes(cls, config: ExperimentConfig, runs: int) -> Optional[int]:
        """About how many bytes a group of ``runs`` runs of ``config`` takes to train; None where not
        estimated (a task that trains one run at a time)."""
        return None

    @classmethod
    def group_stepper(cls, tasks: Sequence["Task"]) -> Callable[[Any], List[Dict[str, Any]]]:
        """One optimisation step of each of ``tasks`` (one run's each, all of one ``group_key``) as a
        function of the batch, giving each run's outputs as ``train_step``'s (floats or 0-d tensors); the
        trainer makes it once for as long as the group stands. By default a group of one: its
        ``train_step``. A task whose runs fuse overrides this (and ``group_evaluate``) to compute them as
        one model, and then needs no ``train_step`` or ``evaluate``; on a GPU its stepper may be a
        ``step_graph.StepGraph``."""
        if len(tasks) != 1:
            raise ValueError(f"{cls.__name__} trains one run at a time, got a group of {len(tasks)}")
        task = tasks[0]
        return lambda batch: [task.train_step(batch)]

    def batches(self, epoch: int) -> Sequence[Any]:
        """The training batches of ``epoch``: deterministic given the seed and the epoch."""
        raise NotImplementedError

    def train_step(self, batch) -> Dict[str, float]:
        """One optimisation step of a run alone; returns at least {"loss": ...}, plus sums to average per
        epoch."""
        raise NotImplementedError

    def optimise(self, loss: torch.Tensor, clip_norm: float = 0.0) -> torch.Tensor:
        """One step of ``self.optimizer`` on ``loss``: gradients from zero, scaled to a global norm of
        ``clip_norm`` where it is positive and exceeded (Pascanu et al. 2013; what ``clip_grad_norm_``
        does), then the update. Returns the global gradient norm before clipping."""
        clip = torch.tensor([clip_norm], dtype=next(self.model.parameters()).dtype, device=loss.device)
        return optimise_group([self], loss.reshape(1), clip)[0]

    def evaluate(self, epoch: int, train_stats: Dict[str, float]) -> Dict[str, float]:
        """The epoch's metrics (``train_stats`` holds the means of train_step's outputs)."""
        raise NotImplementedError

    @classmethod
    def group_evaluate(cls, tasks: Sequence["Task"], epoch: int,
                       train_stats: Sequence[Dict[str, float]]) -> List[Dict[str, Any]]:
        """Each of ``tasks``' metrics of the epoch (a group's, in eval mode, under no_grad): by default each
        one's ``evaluate``; a task whose runs fuse evaluates them as one model."""
        return [t.evaluate(epoch, s) for t, s in zip(tasks, train_stats)]

    def end_epoch(self, epoch: int, metrics: Dict[str, float]) -> None:
        """Learning-rate schedules and the like."""

    def like_epoch(self, epoch: int) -> int:
        """An epoch whose batch count ``epoch``'s is about, for the progress bar's total and ETA and
        the segments' epoch fractions: by default epoch 0 (every epoch alike)."""
        return 0

    def final_metrics(self, curves: List[Dict[str, float]]) -> Dict[str, float]:
        """The record's headline metrics; by default the last epoch's."""
        return dict(curves[-1])

    def state_dict(self) -> Dict[str, Any]:
        """Task state beyond model and optimiser (learning rate, carried hidden state...)."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass

    def begin(self) -> None:
        """Work a run does once before its first epoch (sentiment's pre-training): the trainer calls it on
        a run that starts, not on one that resumes (its checkpoint holds the result, in ``state_dict``)."""


def optimise_group(tasks: Sequence[Task], losses: torch.Tensor, clip_norms: torch.Tensor,
                   steps: Optional[Sequence[updates.Update]] = None,
                   lrs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``Task.optimise`` for each of ``tasks`` (one run's each), ``losses[r]`` the loss of run r: one
    backward of their sum (each run's parameters get its own loss's gradient), then each run, its
    parameters a stack of one (``updates.of_one``), clips by its own global norm where ``clip_norms[r]``
    is positive (``updates.clip_``) and updates: by ``steps[r]`` at the rate ``lrs[r]``
    (``updates.SGD`` or ``updates.Adam``, their host's part counted by the caller), or else by its own
    optimiser's step (the RMSProps of ``optim``). Returns each run's gradient norm before clipping ``(R,)``."""
    for t in tasks:
        t.optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    shared = set()  # a group's b_ih and b_hh enter as one sum, and their gradients can share one storage:
    for t in tasks:  # clipping in place would scale it twice, so each gradient gets its own
        for p in t.model.parameters():
            if p.grad is not None:
                storage = p.grad.untyped_storage().data_ptr()
                if storage in shared:
                    p.grad = p.grad.clone()
                else:
                    shared.add(storage)
    norms = []
    for r, t in enumerate(tasks):
        grads = updates.of_one([p.grad for p in t.model.parameters() if p.grad is not None])
        norms.append(updates.clip_(grads, clip_norms[r:r + 1]))
        if steps is None:
            t.optimizer.step()
        else:
            steps[r].update(grads, lrs[r:r + 1])
    return torch.cat(norms)


def check_device(device: str, available: bool = True) -> str:
    """``device`` if it names a device ('cpu', 'cuda', 'cuda:N'); with ``available``, one this machine has."""
    if isinstance(device, torch.device):
        device = str(device)
    kind, sep, index = str(device).partition(":")
    if not isinstance(device, str) or kind not in DEVICES or (sep and (kind == "cpu" or not index.isdigit())):
        raise ValueError(f"device={device!r} is not valid; allowed values: 'cpu', 'cuda', 'cuda:N'")
    if available and kind == "cuda" and not torch.cuda.is_available():
        why = (f"this torch ({torch.__version__}) is a CPU-only build: install a CUDA build of it (pip install "
               f"--force-reinstall torch=={torch.__version__.split('+')[0]} --index-url "
               "https://download.pytorch.org/whl/cu130, the CUDA version the driver takes; README, 'Rerunning a "
               "notebook with papermill')" if torch.version.cuda is None else "no CUDA device is available here")
        raise ValueError(f"device={device!r} was asked for but {why}; or use device='cpu'")
    if available and kind == "cuda" and index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"device={device!r} was asked for but this machine has {torch.cuda.device_count()} CUDA "
                         f"device(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return str(device)


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """The generator of an epoch's shuffling, fixed by the run's seed and the epoch (so that a resumed
    run shuffles as an uninterrupted one does)."""
    return torch.Generator().manual_seed(seed * 100_003 + epoch)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _rng_state() -> Dict[str, Any]:
    """Python's, NumPy's, torch's (and CUDA's) RNG states as tensors and plain values, so that a
    checkpoint loads with ``torch.load(weights_only=True)``."""
    _, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos), "has_gauss": int(has_gauss),
                       "cached_gaussian": float(cached_gaussian)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    if isinstance(n, dict):
        np.random.set_state(("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    else:  # NumPy's own state tuple, its keys an array (``store.LEGACY_CHECKPOINT_GLOBALS`` loads one)
        np.random.set_state(n)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():  # the GPUs this machine has (a run may move to one with fewer)
        torch.cuda.set_rng_state_all(state["cuda"][:torch.cuda.device_count()])


def _restore(task, ck: Dict[str, Any], path) -> None:
    """Put a checkpoint's model, optimiser, task and RNG states in place; one that does not fit this run's
    model (its shapes or format changed) is a CorruptCheckpointError naming the file."""
    try:
        missing = {"model", "optimizer", "task", "rng", "epoch", "batch", "curves", "sums", "elapsed"} - set(ck)
        if missing:
            raise KeyError(f"it has no {', '.join(sorted(missing))}")
        task.model.load_state_dict(ck["model"])
        task.optimizer.load_state_dict(ck["optimizer"])
        task.load_state_dict(ck["task"])
        _set_rng_state(ck["rng"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        why = " ".join(str(e).split())[:300]
        raise CorruptCheckpointError(f"checkpoint {path} does not fit this run ({type(e).__name__}: {why}); "
                                     "delete it to restart that run from scratch") from e


MASK_SEED_OFFSET = 2**32  # the masks' stream, apart from torch.manual_seed(seed)'s, which initialises


def mask_seed(seed: int, position: Optional[Tuple[int, int]] = None) -> int:
    """The seed of a run's own generator of its dropout masks (``mask_generator``); at a ``position``
    (epoch, batch), of a stream of that position's own: where a checkpoint's generator state does not fit
    this device, the masks go on from it."""
    if position is None:
        return MASK_SEED_OFFSET + seed
    return MASK_SEED_OFFSET + seed + 1_000_003 * (1 + position[0] * 100_003 + position[1])  # primes: streams apart


def mask_generator(seed: int, device: str) -> torch.Generator:
    """A run's own generator of its dropout masks, recurrent and forward: seeded from its seed
    (apart from the stream that initialises its weights), so that what it draws does not depend on the
    runs it trains beside."""
    return torch.Generator(device=torch.device(device)).manual_seed(mask_seed(seed))


class Run:
    """One run of a group: its config, seed, task, generator, checkpoint and curves so far. A run trained
    alone is a group of one; each run of a group checkpoints and records as it would alone."""

    def __init__(self, make_task: Type[Task], config: ExperimentConfig, seed: int, device: str,
                 store: RunStore, env: Dict[str, str]):
        self.config, self.seed = config, seed
        self.rid = run_id(config, seed)
        self.name = config.experiment
        self.ckpt_path = store.checkpoint_path(self.name, self.rid)
        self.env = dict(env)
        seed_everything(seed)  # the run's initialisation, as alone
        self.task = make_task(config, device, seed)
        set_task_precision(self.task, self.env.get("precision", "float32"))
        self.generator = mask_generator(seed, device)
        set_generator(self.task.model, self.generator)
        self.epoch, self.batch, self.curves, self.sums, self.elapsed, self.segments = 0, 0, [], {}, 0.0, []
        self.rng: Optional[Dict[str, Any]] = None  # the global RNG state its checkpoint holds
        ck = load_checkpoint(self.ckpt_path) if self.ckpt_path.exists() else None
        if ck is not None and not store.accepts_checkpoint(ck):
            warnings.warn(f"checkpoint {self.ckpt_path} holds training by uncommitted code, whose record {store.root} "
                          f"would refuse: run {self.name}/{self.rid} starts from scratch, and its new checkpoints "
                          "replace that one")
            ck = None
        if ck is None:
            self.task.begin()  # a stage of a run that starts, its masks from the run's own generator
        else:
            _restore(self.task, ck, self.ckpt_path)
            kind = torch.device(device).type
            if "generator" in ck and ck.get("generator_device", "cpu") == kind:
                self.generator.set_state(ck["generator"])
            else:  # no generator state in the checkpoint, or one of another kind of device: none fits
                self.generator.manual_seed(mask_seed(seed, (ck["epoch"], ck["batch"])))
                if "generator" in ck:
                    warnings.warn(f"run {self.name}/{self.rid} resumes on a {kind} from a checkpoint of a "
                                  f"{ck.get('generator_device', 'cpu')}: its masks go on from a generator seeded "
                                  "from its seed and position (its segments say where it moved)")
            self.rng = ck["rng"]
            self.epoch, self.batch, self.curves, self.sums, self.elapsed = (ck["epoch"], ck["batch"], ck["curves"],
                                                                            ck["sums"], ck["elapsed"])
            self.env["resumed_from_commit"] = ck.get("commit", "unknown")
            self.segments = ck.get("segments", [])
        self.spent = 0.0  # this process's share of the wall time, in seconds
        self.diverged: Optional[str] = None  # the error message, where its training loss stopped being finite

    @property
    def position(self) -> Tuple[int, int]:
        return self.epoch, self.batch


def train_run(make_task: Type[Task], config: ExperimentConfig, seed: int = 0, **options) -> Record:
    """Train one run of ``config`` with ``seed`` (or load its record where it is done,
    ``GroupTrainer.done``): a group of one (``train_group``, whose keyword ``options`` it takes). A run
    whose training loss stops being finite is recorded as diverged, and ``NonFiniteLossError`` says
    where; a later call loads that record (its ``diverged`` says where) and raises nothing."""
    errors: Dict[str, str] = {}
    (record,) = train_group(make_task, [(config, seed)], errors=errors, **options)
    if errors:
        raise NonFiniteLossError(errors[record.run_id])
    return record


@dataclass(frozen=True)
class Options:
    """How a group trains (``train_group``'s keywords, whose defaults are these): where its records go,
    how it reports, how often it checkpoints, the callback tests stop it with, its bar's line, when its
    time is up, how many steps' outputs wait on their device before the host reads them
    (``StepOutputs``), and whether a run another process trains is waited for rather than refused."""

    store: RunStore
    progress: bool = True
    checkpoint_every_s: float = 180.0
    callback: Optional[Callable[[str, int, int], None]] = None
    position: int = 0
    deadline: Optional[float] = None
    read_every: Optional[int] = None
    wait: bool = False


def train_group(make_task: Type[Task], members: Sequence[Tuple[ExperimentConfig, int]], *,
                device: str = "cpu", store: Optional[RunStore] = None, progress: bool = Options.progress,
                checkpoint_every_s: float = Options.checkpoint_every_s,
                callback: Optional[Callable[[str, int, int], None]] = Options.callback,
                position: int = Options.position, deadline: Optional[float] = Options.deadline, rerun: bool = False,
                errors: Optional[Dict[str, str]] = None, precision: str = "float32",
                read_every: Optional[int] = Options.read_every, wait: bool = Options.wait) -> List[Record]:
    """Train the runs ``members`` ((config, seed) each) as one group, one model with a leading run
    dimension where there are several (``Task.group_stepper``), and return each one's record in order.

    Each run keeps everything its own: initialisation and masks from its own seed, optimiser,
    schedule, clipping, checkpoint and record (the same run id and format as alone, plus ``group``,
    the run ids it trained beside). Runs that are done are loaded (``GroupTrainer.done``); a run that
    diverges is recorded as it would be alone and leaves the group, and the others go on. Where the
    runs' checkpoints stand at different places, the runs behind train until they reach the next ones,
    then on together.

    ``callback(event, epoch, batch)`` is called after every batch ("batch") and epoch ("epoch"); tests
    use it to interrupt a run. At ``deadline`` (a ``time.time()`` value) every run saves its
    checkpoint and ``BudgetExhausted`` is raised; the next call resumes them. A run resumed on other
    hardware or code lists each stretch in its record's ``segments``. With ``rerun``, a stored record
    made by other code than this (another commit) is trained again, even one the store keeps, and
    replaced when the new one is finished.
    ``errors``, where given, gets run id -> message for each run that diverged in this call.
    ``precision`` "tf32" lets a GPU's products run in TF32, "bf16" runs each training forward under bf16
    autocast where the task allows it (``set_precision``, ``autocast``), and the records say so.
    ``read_every`` steps' outputs wait on their device before the host reads them (default: ``READ_EVERY``
    off a CPU, every step on one); the records are the same whatever it is. A run that another process is
    training is a ``RunInUseError``, or with ``wait``, waited for and then loaded where it finished.
    """
    device = check_device(device)
    set_precision(precision, device)
    members = [(c, int(s)) for c, s in members]
    check_group(make_task, members, precision)
    options = Options(store or RunStore(), progress, checkpoint_every_s, callback, position, deadline, read_every,
                      wait)
    trainer = GroupTrainer(make_task, device, precision, options, rerun)
    records = trainer.done(members)
    todo = [m for m in members if run_id(*m) not in records]
    if todo:
        try:
            records.update(trainer.train(todo))
        finally:
            if errors is not None:
                errors.update(trainer.diverged)
    return [records[run_id(*m)] for m in members]


def check_group(make_task: Type[Task], members: Sequence[Tuple[ExperimentConfig, int]],
                precision: str) -> None:
    """A ValueError where ``members`` cannot train as one group at ``precision``."""
    if precision == "bf16" and not make_task.autocasts:
        raise ValueError(f"precision='bf16' is not available for {make_task.__name__!r}: its "
                         "training step has no autocast (Task.autocasts); use 'float32' or 'tf32'")
    if not members:
        raise ValueError("a group needs at least one run")
    rids = [run_id(c, s) for c, s in members]
    if len(set(rids)) < len(rids):
        raise ValueError(f"a group holds the same run twice: {sorted(r for r in rids if rids.count(r) > 1)}")
    keys = {make_task.group_key(c, s) for c, s in members}
    if len(members) > 1 and (None in keys or len(keys) > 1):
        raise ValueError(f"these {len(members)} runs cannot train as one group: "
                         + ("their task trains one run at a time" if None in keys else
                            "they differ in more than the fields a group lets differ (Task.FUSABLE_FIELDS) or in a "
                            "seed that orders their batches"))


class GroupTrainer:
    """Trains the runs of one group that are not done (``done``): holds them against other processes,
    starts each (from its checkpoint where it has one), and trains them in step (``catch_up``). With
    ``rerun``, a record made by other code than this (another commit) does not count as done."""

    def __init__(self, make_task: Type[Task], device: str, precision: str, options: Options,
                 rerun: bool = False):
        self.make_task, self.device, self.precision = make_task, device, precision
        self.options, self.rerun = options, rerun
        self.diverged: Dict[str, str] = {}  # run id -> message, for each run that diverged
        self.failed: Dict[str, str] = {}  # run id -> why it could not start
        self.alone = False  # whether the group is one run: its errors are its own

    @functools.cached_property
    def env(self) -> Dict[str, Any]:
        """What each record says of how its run trained: hardware, versions, the commit of the code that
        runs, and the precision where not float32. Taken once, where first asked for: not where every run
        is loaded (naming a GPU starts CUDA)."""
        env = environment(self.device)
        if self.precision != "float32":
            env["precision"] = self.precision
        return env

    def done(self, members: Sequence[Tuple[ExperimentConfig, int]]) -> Dict[str, Record]:
        """Run id -> stored record, for each of ``members`` whose record finishes it: one the store keeps
        (``RunStore.done_record``), and with ``rerun``, one made by this code."""
        store = self.options.store
        found = {run_id(c, s): store.done_record(c.experiment, c.scale, run_id(c, s)) for c, s in members}
        return {rid: record for rid, record in found.items()
                if record is not None and (not self.rerun or record.commit == self.env["commit"])}

    def train(self, todo: List[Tuple[ExperimentConfig, int]]) -> Dict[str, Record]:
        """Train ``todo`` to their end; run id -> record. A run another process finished meanwhile is loaded."""
        store, (config, seed) = self.options.store, todo[0]
        what = f"run {config.experiment}/{run_id(config, seed)}"
        if self.options.deadline is not None and time.time() >= self.options.deadline:
            raise BudgetExhausted(what + (f" and {len(todo) - 1} more" if len(todo) > 1 else "")
                                  + ": the time budget ended before it started")
        store.refuse_unclean_code(self.env["commit"], f"{what} is")
        cpu_products.forget()  # the records name the libraries of this group's own products
        # one process a run; on a CPU, denormals computed as zero
        with store.hold_runs(config.experiment, [run_id(c, s) for c, s in todo], self.options.wait), \
                denormals_flushed(self.device):
            records = self.done(todo)  # finished by another process since the first look
            todo = [(c, s) for c, s in todo if run_id(c, s) not in records]
            if self.uses_cpu_kernels(todo):
                cpu_kernels.compiled()  # built (once a machine) before any run's clock starts: not training time
            self.alone = len(todo) == 1
            runs = [r for r in (self.start(c, s) for c, s in todo) if r is not None]
            for r in runs:
                if self.options.progress and r.position != (0, 0):  # said, not left to a bar that starts part-way
                    say(f"{r.name} {r.rid}: resumes at epoch {r.epoch + 1} of {r.config.epochs}, batch "
                        f"{r.batch + 1}, from its checkpoint in {r.ckpt_path.parent}")
            try:
                records.update(self.catch_up(runs))
            finally:
                graphs.clear()  # the CUDA graphs of this group's shapes hold GPU memory the next group needs
        if self.failed:
            raise GroupMemberError(f"{len(self.failed)} of {len(todo)} runs could not start (the others went on):\n"
                                   + "\n".join(f"  {rid}: {why}" for rid, why in self.failed.items()))
        return records

    def uses_cpu_kernels(self, todo: List[Tuple[ExperimentConfig, int]]) -> bool:
        """Whether ``todo``'s layers take the C++ kernels (``cpu_kernels.usable``): on a CPU, with the kernels
        switched on, outside autocast, and with recurrent dropout in some run (else torch.nn's forward runs)."""
        return (torch.device(self.device).type == "cpu" and route.switched_on("RECDROP_CPU_KERNELS")
                and self.precision != "bf16" and any(getattr(c, "recurrent_dropout", 0) for c, _ in todo))

    def start(self, config: ExperimentConfig, seed: int) -> Optional[Run]:
        """The run of ``config`` and ``seed``, from its checkpoint where it has one.
        A corrupt checkpoint is the run's fault, not the group's: the others go on (a run alone raises)."""
        try:
            return Run(self.make_task, config, seed, self.device, self.options.store, self.env)
        except CorruptCheckpointError as e:
            if self.alone:
                raise
            self.failed[run_id(config, seed)] = str(e)
            return None

    def catch_up(self, runs: List[Run]) -> Dict[str, Record]:
        """Train ``runs`` to their end: those furthest behind first, until they reach the next ones (their
        checkpoints), then on together; run id -> record of each that finished or diverged."""
        order = [r.rid for r in runs]
        records: Dict[str, Record] = {}
        while runs:
            first = min(r.position for r in runs)
            behind = [r for r in runs if r.position == first]
            ahead = [r.position for r in runs if r.position != first]
            try:
                for record in GroupTraining(behind, self.options, min(ahead) if ahead else None).run():
                    records[record.run_id] = record
            finally:  # a run that diverged before a later error (the budget's) is said so too
                self.diverged.update({r.rid: r.diverged for r in behind if r.diverged})
            caught_up = [self.start(r.config, r.seed) for r in behind if r.rid not in records]
            runs = sorted([r for r in runs if r not in behind] + [r for r in caught_up if r is not None],
                          key=lambda r: order.index(r.rid))  # the members' order, as given
        return records


READ_EVERY = 64  # steps whose outputs a GPU holds before the host reads them (``StepOutputs``)


class StepOutputs:
    """A group's step outputs since the host last read them, left where they were computed: the trainer
    reads them every ``read_every`` steps, before each checkpoint and at each epoch's end, so that the
    host does not wait for the device after every step. Read, they are each run's outputs of
    each step, in order, as floats: a run's sums and its first non-finite loss are what they are when
    read at every step."""

    def __init__(self, read_every: Optional[int] = None):
        self.read_every = read_every
        self.steps: List[Tuple[int, int, List[Dict[str, Any]]]] = []  # (epoch, batch, outputs) a step
        self.rows: List[Optional[torch.Tensor]] = []  # each step's tensors among its outputs, stacked (None: none)

    def __len__(self) -> int:
        """How many steps' outputs are held, not yet read."""
        return len(self.steps)

    @property
    def due(self) -> bool:
        """Whether to read now: ``read_every`` steps kept; by default ``READ_EVERY``, or at every step where
        reading costs no wait (on a CPU, or floats already), so that there a run stops at the step where it
        diverges."""
        if self.read_every is not None:
            return len(self.steps) >= self.read_every
        row = self.rows[-1] if self.rows else None
        return len(self.steps) >= READ_EVERY or row is None or row.device.type == "cpu"

    def add(self, epoch: int, batch: int, outs: Sequence[Dict[str, Any]]) -> None:
        """Keep the outputs of the step at (epoch, batch): a tensor stays on its device (a place in this
        step's row), a float as it is."""
        tensors: List[torch.Tensor] = []
        kept = []
        for out in outs:
            slots = {}
            for k, v in out.items():
                if isinstance(v, torch.Tensor):
                    slots[k] = len(tensors)
                    tensors.append(v.detach().reshape(()))
                else:
                    slots[k] = float(v)
            kept.append(slots)
        # one stack a step for the group (a copy a run is a kernel launch a run: host work)
        self.rows.append(torch.stack(tensors) if tensors else None)
        self.steps.append((epoch, batch, kept))

    def read(self) -> List[Tuple[int, int, List[Dict[str, float]]]]:
        """Every step's (epoch, batch, each run's outputs as floats), in one transfer; then empty."""
        rows = [r for r in self.rows if r is not None]
        values = torch.cat(rows).double().tolist() if rows else []
        steps, at = [], 0
        for (epoch, batch, kept), row in zip(self.steps, self.rows):
            n = 0 if row is None else row.numel()
            got = values[at:at + n]
            at += n
            steps.append((epoch, batch, [{k: got[v] if isinstance(v, int) else v for k, v in slots.items()}
                                         for slots in kept]))
        self.steps, self.rows = [], []
        return steps


class GroupTraining:
    """The training loop of a group of runs that stand at one place (epoch, batch): each epoch's batches
    through the group's step (``Task.group_stepper``, made once for as long as the group stands), the
    outputs read in batches of steps (``StepOutputs``), a checkpoint every ``checkpoint_every_s`` seconds
    and after each epoch, each run's record at its end. A run whose loss stops being finite is recorded
    where it did, as it would be alone, and leaves the group. ``run()`` trains to the end, or to ``until``
    (epoch, batch), where the runs checkpoint and stop, to go on with the runs already there."""

    def __init__(self, runs: List[Run], options: Options, until: Optional[Tuple[int, int]] = None):
        self.live = list(runs)  # the runs training now
        self.lead = runs[0]
        self.task_type = type(self.lead.task)
        self.store, self.options, self.until = options.store, options, until
        self.start = self.lead.position
        self.group = [r.rid for r in runs] if len(runs) > 1 else None
        self.batch_counts: Dict[int, int] = {}
        self.finished: List[Record] = []  # the records of the runs that finished or diverged, as stored
        self.stepper = None
        self.outputs = StepOutputs(options.read_every)
        self.t_start = self.clock = time.perf_counter()
        self.last_checkpoint = time.monotonic()
        if len(runs) == 1 and self.lead.rng is not None:
            _set_rng_state(self.lead.rng)  # a run alone resumes the global RNG too (nothing of a group draws from it)

    def expected_batches(self, epoch: int) -> int:
        """About how many batches ``epoch`` has: those of the epoch it is like (``Task.like_epoch``)."""
        like = self.lead.task.like_epoch(epoch)
        if like not in self.batch_counts:
            self.batch_counts[like] = len(self.lead.task.batches(like))
        return self.batch_counts[like]

    def with_this_segment(self, run: Run, epoch: int, batch: int) -> List[Dict[str, Any]]:
        """The stretches of training so far: earlier ones, then this process's, in epochs (fractions
        for a stretch that began or ended inside an epoch) and seconds."""
        def at(e: int, b: int) -> float:
            return round(e + b / max(1, self.expected_batches(e)), 4) if b else float(e)
        segment = {k: run.env[k] for k in ("hardware", "device", "torch", "commit", "precision", "step", "path",
                                           "switches") if k in run.env}
        if self.group:
            segment["group"] = self.group
        return run.segments + [{**segment, "from_epoch": at(*self.start), "to_epoch": at(epoch, batch),
                                "wall_s": round(time.perf_counter() - self.t_start, 2)}]

    def tick(self) -> None:
        """Share the wall time since the last tick among the runs training now."""
        now = time.perf_counter()
        for r in self.live:
            r.spent += (now - self.clock) / len(self.live)
        self.clock = now

    def checkpoint(self, epoch: int, batch: int) -> None:
        """The checkpoints of the runs training now at (epoch, batch), the files renamed in place together;
        first the outputs of the steps so far are read, so that a run that has diverged keeps its last good one."""
        self.settle()
        self.tick()
        self.last_checkpoint = time.monotonic()
        save_checkpoints([(run.ckpt_path, {
            "model": run.task.model.state_dict(), "optimizer": run.task.optimizer.state_dict(),
            "task": run.task.state_dict(), "rng": _rng_state(), "generator": run.generator.get_state(),
            "generator_device": run.generator.device.type,
            "epoch": epoch, "batch": batch, "curves": run.curves, "sums": run.sums,
            "elapsed": run.elapsed + run.spent, "run_id": run.rid, "commit": run.env["commit"],
            "segments": self.with_this_segment(run, epoch, batch)}) for run in self.live])

    def make_record(self, run: Run, metrics: Dict[str, Any], epoch: int, batch: int, **extra) -> Dict[str, Any]:
        """The run's record, with its curves so far, as training stands at (epoch, batch)."""
        self.tick()
        record = {"experiment": run.name, "run_id": run.rid, "seed": run.seed, "config": run.config.to_dict(),
                  "metrics": metrics, "curves": run.curves, **extra,
                  "wall_time_s": round(run.elapsed + run.spent, 2), **run.env, "finished": utc_now()}
        if self.group:
            record["group"] = self.group
        if run.segments:  # resumed: say on what hardware and code each stretch of training ran
            record["segments"] = self.with_this_segment(run, epoch, batch)
        return record

    def settle(self) -> None:
        """Read the outputs of the steps since the last read: each run's sums grow by them, in order; a run
        whose loss was not finite at a step is recorded as diverged there and leaves the group."""
        for epoch, b, values in self.outputs.read():
            for r, out in zip(list(self.live), values):  # each step's outputs, in the order of the runs then
                if r.diverged:
                    continue
                loss = out["loss"]
                if not math.isfinite(loss):  # a result too: recorded, so that it is not retried forever
                    self.record_divergence(r, epoch, b, loss)
                    continue
                for k, v in out.items():
                    r.sums[k] = r.sums.get(k, 0.0) + v
                r.sums["_n"] = r.sums.get("_n", 0) + 1
        if any(r.diverged for r in self.live):
            self.live = [r for r in self.live if not r.diverged]
            self.stepper = release(self.stepper)

    def record_divergence(self, r: Run, epoch: int, b: int, loss: float) -> None:
        where = {"epoch": epoch + 1, "batch": b + 1, "loss": str(loss)}
        path = self.store.save(self.make_record(r, {}, epoch, b, diverged=where))
        r.diverged = (f"run {r.name}/{r.rid} (seed {r.seed}): training loss is {loss} at epoch {epoch + 1}, batch "
                      f"{b + 1}; it is recorded as diverged in {path}, and its last good checkpoint is kept at "
                      f"{r.ckpt_path}")
        self.finished.append(self.store.load(r.name, r.config.scale, r.rid))

    def step(self, batch) -> List[Dict[str, Any]]:
        """One step of the runs training now; each run's outputs (tensors left unread)."""
        made = self.stepper is None
        if made:  # the step of the runs training now, made once for as long as they stand
            self.stepper = self.task_type.group_stepper([r.task for r in self.live])
        outs = self.stepper(batch)
        if made:  # the records say which path the layers took (training, as this group stands)
            for r in self.live:
                path = layer_paths(r.task.model)
                if path:
                    r.env["path"] = path
        if getattr(self.stepper, "captured", False) and "step" not in self.lead.env:
            for r in self.live:  # the records say how the step ran (the warm-up's few steps ran eagerly)
                r.env["step"] = "cuda-graph"
        return outs

    def run(self) -> List[Record]:
        """Train from where the runs stand to their end, or to ``until``; the records of the runs that
        finished or diverged, as stored. At the deadline every run checkpoints and ``BudgetExhausted`` is
        raised."""
        epochs = self.lead.config.epochs
        bar = self.progress_bar()
        position = self.start
        try:
            while self.live and position[0] < epochs and position != self.until:
                position = self.train_epoch(*position, bar)
        finally:
            bar.close()
            release(self.stepper)
        if position[0] == epochs and position != self.until:
            for r in self.live:
                record = self.make_record(r, r.task.final_metrics(r.curves), epochs, 0)
                self.finished.append(self.store.read(self.store.save(record)))
                r.ckpt_path.unlink(missing_ok=True)
        return self.finished

    @property
    def label(self) -> str:
        """The runs training now, as the bar and the messages name them: the lead's id, "+ n" for the others."""
        return self.lead.rid if len(self.live) == 1 else f"{self.lead.rid} +{len(self.live) - 1}"

    def progress_bar(self):
        """The group's bar over every batch of training, from where it stands; a ValueError where the
        training split gives no batch."""
        lead, epochs, (start_epoch, start_batch) = self.lead, self.lead.config.epochs, self.start
        if self.expected_batches(0) == 0:
            raise ValueError(f"run {lead.name}/{lead.rid}: its training split gives no batch of {lead.config}; use "
                             "more data or smaller batches")
        return progress_bar(total=sum(map(self.expected_batches, range(epochs))),
                            initial=sum(map(self.expected_batches, range(start_epoch))) + start_batch,
                            disable=not self.options.progress, desc=f"{lead.name} {self.label}",
                            position=self.options.position, leave=self.options.position == 0, dynamic_ncols=True)

    def train_epoch(self, epoch: int, first: int, bar) -> Tuple[int, int]:
        """Train epoch ``epoch`` from batch ``first`` to its end (then evaluate, checkpoint and call back),
        or to ``until``, or while a run is left; where the runs then stand."""
        batches = self.lead.task.batches(epoch)
        for r in self.live:
            r.task.model.train()
            if first == 0:
                r.sums = {}
        b = first
        while b < len(batches) and self.live and (epoch, b) != self.until:
            self.train_batch(epoch, b, batches, bar)
            b += 1
        if (epoch, b) == self.until:
            return self.until
        self.settle()
        if self.live:
            self.end_epoch(epoch, bar)
            self.checkpoint(epoch + 1, 0)
            if self.options.callback:
                self.options.callback("epoch", epoch, len(batches))
        return epoch + 1, 0

    def train_batch(self, epoch: int, b: int, batches: Sequence[Any], bar) -> None:
        """One step of the runs training now on batch ``b``; then, as due, the reads of its outputs, the
        callback, and the checkpoint at the deadline (raising ``BudgetExhausted``), at ``until`` or at the
        interval."""
        self.outputs.add(epoch, b, self.step(batches[b]))
        if self.outputs.due:
            self.settle()
            if not self.live:
                return
        bar.update(1)
        if self.options.callback:
            self.options.callback("batch", epoch, b)
        at = (epoch, b + 1)
        if self.options.deadline is not None and time.time() >= self.options.deadline:
            self.checkpoint(*at)
            if self.live:
                raise BudgetExhausted(f"run {self.lead.name}/{self.label}: stopped at the time budget in epoch "
                                      f"{epoch + 1}, batch {b + 1}; its checkpoint in {self.lead.ckpt_path.parent} "
                                      "resumes it")
        elif at == self.until or (time.monotonic() - self.last_checkpoint > self.options.checkpoint_every_s
                                  and b + 1 < len(batches)):
            self.checkpoint(*at)

    def end_epoch(self, epoch: int, bar) -> None:
        """Each run's means of its step outputs over the epoch, its evaluation, its curves and schedule."""
        stats = []
        for r in self.live:
            n = r.sums.pop("_n")
            stats.append({k: v / n for k, v in r.sums.items()})
            r.task.model.eval()
        with torch.no_grad():
            evaluated = self.task_type.group_evaluate([r.task for r in self.live], epoch, stats)
        for r, train_stats, metrics in zip(self.live, stats, evaluated):
            metrics = {"epoch": epoch + 1, **metrics}
            r.curves.append(metrics)
            r.task.end_epoch(epoch, metrics)
            if r is self.lead and self.lead.task.progress_metric:
                bar.set_postfix(epoch=epoch + 1, loss=f"{train_stats['loss']:.4g}", **{
                    self.lead.task.progress_metric: f"{metrics.get(self.lead.task.progress_metric, float('nan')):.4g}"})
            r.sums = {}


def release(stepper) -> None:
    """Give back what a group's step holds (a CUDA graph's memory), before the next group needs it."""
    if hasattr(stepper, "release"):
        stepper.release()
