"""The sweep runner: fill a paper table's grid of runs, skipping finished ones, resuming the rest.

    python -m recdrop.sweep temporal_order --scale quick --device cpu --jobs 2 --seeds 0

From a notebook: ``run_grid("temporal_order", "quick", train=False)`` only loads what is stored.
Several worker processes may share one device (``jobs``); each writes its own records atomically,
so runs never clobber each other and a killed sweep loses no finished record.

On several machines, ``engine="ray"`` (``--engine ray``) hands the runs to a Ray cluster
(``RAY_ADDRESS``, or a local one), and ``engine="submitit"`` to SLURM through submitit (or to local
processes where there is no SLURM; ``RECDROP_SUBMITIT_CLUSTER``, ``RECDROP_SUBMITIT_DIR`` and
``RECDROP_SLURM_PARTITION`` adjust it). Either way each worker trains into its own local store
and returns the finished record, and the driver writes it here, so no shared file system is
assumed for the results. Ray and submitit carry arguments and results between the driver and its
own workers by pickle (submitit through files in ``RECDROP_SUBMITIT_DIR``): the one place where the
project unpickles, and only what its own processes wrote; keep that folder private.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import psutil
import torch

from . import experiments
from .config import SCALE_NAMES, run_id
from .estimates import expected_seconds, resumable
from .records import Record, Row
from .progress import bar as progress_bar, say
from .report import stored_seeds
from .runner import Job, check_jobs, run_groups, run_job, worker_threads
from .store import DEFAULT_RUNS, RunStore, cache_dir, git_commit, hardware
from .train import add_precision_options, check_device, precision_option, set_precision


def check_seeds(seeds) -> List[int]:
    """``seeds`` as a list: a non-empty list of distinct non-negative ints; else a ValueError (a seed twice
    would train one run twice, and two workers would race for it). A bare int is refused: ``seeds=3`` reads as
    three seeds but would be seed 3 alone."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        many = f", for {seeds} seeds {list(range(seeds))}" if seeds > 1 else ""
        raise ValueError(f"seeds is a list of seeds, got the int {seeds}: for seed {seeds} alone give [{seeds}]{many}")
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        hint = " (papermill's -p gives a string: give a list with -y 'seeds: [0, 1]')" if isinstance(seeds, str) else ""
        raise ValueError(f"seeds must be a non-empty list of non-negative ints, got {seeds!r}{hint}")
    twice = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if twice:
        raise ValueError(f"seeds must be distinct, got {list(seeds)!r}: {', '.join(map(str, twice))} more than once")
    return list(seeds)


def fuse_groups(experiment: str, rows: Sequence[Row], fuse: Union[bool, int] = False,
                device: str = "cpu") -> List[List[Row]]:
    """``rows`` (``grid_rows``) as the groups that train together: each alone where ``fuse`` is False;
    else the runs that can share one model (``Task.group_key``: one model shape and batch order), in
    groups of at most ``fuse`` runs (True: no cap), in the order of their first run. A ValueError
    where ``fuse`` is not True, False or a positive int, where the experiment's runs cannot share a
    model, or where a group would not fit the device's memory (``Task.group_bytes``, estimated
    before any run starts)."""
    if fuse is False:
        return [[r] for r in rows]
    if isinstance(fuse, bool):
        cap = len(rows) or 1
    elif isinstance(fuse, int) and fuse >= 1:
        cap = fuse
    else:
        raise ValueError(f"fuse must be True, False or a group size of at least 1, got {fuse!r}")
    make_task, _ = experiments.get(experiment)
    keys = [make_task.group_key(r.config, r.seed) for r in rows]
    if rows and None in keys:
        raise ValueError(f"--fuse: the runs of {experiment} cannot share one model (its task trains one run at a "
                         "time); run them without --fuse")
    by_key: Dict[Any, List[Row]] = {}
    for key, row in zip(keys, rows):
        by_key.setdefault(key, []).append(row)
    groups = [members[i:i + cap] for members in by_key.values() for i in range(0, len(members), cap)]
    free = free_memory(device)
    for members in groups:
        need = make_task.group_bytes(members[0].config, len(members))
        if need is not None and free is not None and need > 0.9 * free:
            per_run = need / len(members)
            raise ValueError(f"--fuse: a group of {len(members)} runs of {experiment} needs about "
                             f"{need / 2**30:.1f} GiB (estimated) where {device} has {free / 2**30:.1f} GiB free; "
                             f"cap the groups at {max(1, int(0.9 * free // per_run))} runs (--fuse N)")
    return groups


def free_memory(device: str) -> Optional[int]:
    """Bytes free on ``device`` now (a GPU's, or this machine's available memory: what it can give without
    swapping, the page cache included, not only its unused pages); None where unknown."""
    if str(device).startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0] if torch.cuda.is_available() else None
    return psutil.virtual_memory().available


def _run_remote(experiment: str, config, seed: int, device: str, threads: int) -> Record:
    """A Ray or submitit task: train into a store kept on the worker (so a finished run survives a driver that
    dies before saving it, and a resubmitted run is loaded, not retrained) and return the record. A record
    there from other code than the worker's is trained again (``rerun``), not handed back."""
    store = RunStore(cache_dir() / "worker-runs")
    return run_job(Job(experiment, ((config, seed),), device, str(store.root), threads, rerun=True))[0]


def _ray_results(todo: Sequence[Row], experiment: str, device: str, jobs: int) -> Iterator[Tuple[Row, Callable]]:
    """Each of ``todo``'s runs handed to a Ray cluster (``_run_remote``), as it ends: (row, its result)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), num_cpus=None if os.environ.get("RAY_ADDRESS") else jobs,
                 include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=1, num_gpus=1 if device.startswith("cuda") else 0)(_run_remote)
    pending = {remote.remote(experiment, r.config, r.seed, device, 1): r for r in todo}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        yield pending.pop(done[0]), functools.partial(ray.get, done[0])


def _submitit_results(todo: Sequence[Row], experiment: str, device: str,
                      jobs: int) -> Iterator[Tuple[Row, Callable]]:
    """Each of ``todo``'s runs handed to SLURM through submitit (``_run_remote``), as it ends: (row, its result)."""
    import submitit

    folder = os.environ.get("RECDROP_SUBMITIT_DIR") or str(cache_dir() / "submitit")
    executor = submitit.AutoExecutor(folder=folder, cluster=os.environ.get("RECDROP_SUBMITIT_CLUSTER") or None)
    params = dict(timeout_min=int(os.environ.get("RECDROP_SUBMITIT_TIMEOUT_MIN", 24 * 60)), cpus_per_task=1,
                  gpus_per_node=1 if device.startswith("cuda") else 0, slurm_array_parallelism=jobs)
    if os.environ.get("RECDROP_SLURM_PARTITION"):
        params["slurm_partition"] = os.environ["RECDROP_SLURM_PARTITION"]
    executor.update_parameters(**params)
    with executor.batch():  # one SLURM job array
        submitted = [(executor.submit(_run_remote, experiment, r.config, r.seed, device, 1), r) for r in todo]
    by_job = {job.job_id: r for job, r in submitted}
    poll_s = 1 if executor.cluster == "local" else 10
    for job in submitit.helpers.as_completed([job for job, _ in submitted], poll_frequency=poll_s):
        yield by_job[job.job_id], job.result


REMOTE_ENGINES = {"ray": _ray_results, "submitit": _submitit_results}


ENGINES = ("local", *REMOTE_ENGINES)


def set_stored(store: RunStore, row: Row, record: Optional[Record]) -> None:
    """``row`` now holds ``record``, its run's stored record (or None), and whether that is done."""
    row.stored, row.done = record, store.is_done(record)


def grid_rows(experiment: str, scale: str, seeds: Sequence[int] = (0,), grid: str = "table",
              only: Optional[Dict[str, Any]] = None, store: Optional[RunStore] = None,
              **overrides) -> List[Row]:
    """The runs of ``experiment``'s ``grid`` at ``scale``, for each seed, in the grid's order: a ``Row``
    per run, with the cell's labels, its seed, run id and config, and its stored record if any.
    ``only`` keeps the cells whose labels have these values (e.g. ``{"scheme": "moon"}``)."""
    _, grid_cells = experiments.get(experiment, grid)
    seeds = check_seeds(seeds)
    store = store or RunStore()
    cells = grid_cells(scale, **overrides)  # an override's value is checked by the config here
    if overrides:
        _check_overrides(experiment, grid, grid_cells(scale), overrides)
    if only is not None and not isinstance(only, dict):
        raise ValueError(f"only must be a dict of label -> value (e.g. {{'scheme': 'moon'}}), got {only!r}")
    if only:
        unknown = set(only) - set(cells[0][0])
        if unknown:
            raise ValueError(f"only: {sorted(unknown)} are not labels of {experiment}'s cells; "
                             f"its labels are: {', '.join(cells[0][0])}")
        kept = [(label, cfg) for label, cfg in cells if all(label[k] == v for k, v in only.items())]
        if not kept:
            values = {k: sorted({str(label[k]) for label, _ in cells}) for k in only}
            raise ValueError(f"only={only!r} keeps no cell of {experiment}'s {grid} grid at {scale}; the values are: "
                             + "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items()))
        cells = kept
    rows = []
    for label, cfg in cells:
        for seed in seeds:
            rid = run_id(cfg, seed)
            row = Row(dict(label), seed, rid, cfg)
            set_stored(store, row, store.find(experiment, cfg.scale, rid))
            rows.append(row)
    return rows


def _check_overrides(experiment: str, grid: str, cells: Sequence[Tuple[Dict[str, Any], Any]],
                     overrides: Dict[str, Any]) -> None:
    """Refuse an override of a config field the grid sets cell by cell: every cell would train its value
    under its own labels, and cells that differ only in it would be one run."""
    varied = {f.name for f in dataclasses.fields(cells[0][1])
              if len({repr(getattr(cfg, f.name)) for _, cfg in cells}) > 1}
    clash = sorted(set(overrides) & varied)
    if clash:
        raise ValueError(f"{', '.join(clash)}: {experiment}'s {grid} grid sets {'it' if len(clash) == 1 else 'them'} "
                         f"cell by cell, so an override would mislabel its runs; pick cells by their labels "
                         f"instead (only=, the sweep's --only: {', '.join(cells[0][0])})")


def stored_scales(experiment: str, grid: str = "table", store: Optional[RunStore] = None,
                  up_to: Optional[str] = None) -> Iterator[Tuple[str, List[Row]]]:
    """(scale, ``grid_rows`` at every seed stored there) for each scale of ``experiment`` with stored
    records, largest first (``up_to`` at most); scales its config no longer has are passed over."""
    store = store or RunStore()
    scales = SCALE_NAMES[:SCALE_NAMES.index(up_to) + 1] if up_to else SCALE_NAMES
    for scale in reversed(scales):
        rows = stored_rows(experiment, scale, grid, store)
        if rows is not None:
            yield scale, rows


def stored_rows(experiment: str, scale: str, grid: str = "table",
                store: Optional[RunStore] = None) -> Optional[List[Row]]:
    """``grid_rows`` of ``experiment`` at ``scale`` for every seed stored there; None where no record is
    stored at that scale or its config no longer has it."""
    store = store or RunStore()
    if scale not in experiments.EXPERIMENTS[experiment].config.SCALES or not store.has_records(experiment, scale):
        return None
    return grid_rows(experiment, scale, stored_seeds(experiment, scale, store), grid, store=store)


def check_data(experiment: str, scale: str, seeds: Sequence[int] = (0,), grids: Sequence[str] = ("table",),
               train: bool = True, store: Optional[RunStore] = None) -> None:
    """Where ``train`` is True and any of ``experiment``'s ``grids`` at ``scale`` has runs not in the store, the
    data they read verified (``Task.check_data``: a ``DatasetError`` naming a missing or corrupt dataset file, or
    the word vectors' error). A notebook that trains several experiments checks each first, so a missing
    dataset stops it before it has trained the others."""
    store = store or RunStore()
    if train:
        _check_data(experiment, [r for grid in grids for r in grid_rows(experiment, scale, seeds, grid, store=store)
                                 if not r.done])


def _check_data(experiment: str, todo: Sequence[Row]) -> None:
    """``Task.check_data`` of each distinct config among ``todo``."""
    task = experiments.get(experiment)[0]
    for config in {repr(r.config): r.config for r in todo}.values():
        task.check_data(config)


def run_grid(experiment: str, scale: str, seeds: Sequence[int] = (0,), device: str = "cpu", jobs: int = 1,
             train: bool = True, store: Optional[RunStore] = None, progress: bool = True, engine: str = "local",
             only: Optional[Dict[str, Any]] = None, grid: str = "table", fuse: Union[bool, int] = False,
             precision: str = "float32", **overrides) -> List[Row]:
    """Every cell of ``experiment``'s grid at ``scale`` for every seed: one row per run, as ``grid_rows``
    gives them (``Row.record`` None where not run and ``train`` is False, or where the run diverged).
    ``only`` keeps the cells whose labels have these values (e.g. ``{"scheme": "moon"}``). ``grid``
    names which of the experiment's grids: "table" (the paper's), "headline" or "conjecture". With
    ``fuse`` (True, or a cap on a group's size), the runs that can share one model train as one
    (``fuse_groups``; each still ends as its own record), ``jobs`` groups at a time. ``precision``
    "tf32" lets a GPU's products run in TF32, "bf16" runs each training forward under bf16 autocast
    (``train.set_precision``, ``train.autocast``; each record says so).

    Runs that are done (``RunStore.is_done``) are loaded, unfinished ones resumed from their checkpoint,
    the rest trained: in a store whose records are committed, that includes a run whose record came
    from uncommitted code. A run that diverges is recorded as such, with a warning.
    """
    device = _check_sweep(jobs, train, engine, device, precision)
    store = store or RunStore()
    rows = grid_rows(experiment, scale, seeds, grid, only, store, **overrides)
    todo = [r for r in rows if not r.done]
    if train and not todo and progress:  # a rerun that trains nothing says so, and where it read the runs from
        tracked = store.root.resolve() == DEFAULT_RUNS.resolve()  # the repository's: how to train them anew
        say(f"sweep {experiment} ({scale}): all {len(rows)} runs already in {store.root}; nothing to train"
            + (" (an empty RECDROP_RUNS trains them anew)" if tracked else ""))
    if not train or not todo:
        return rows
    if (fuse is not False or precision != "float32") and engine != "local":
        raise ValueError(f"fuse and precision are the local engine's; they run with engine='local', not {engine!r}")
    groups = fuse_groups(experiment, todo, fuse, device)  # its errors come before any run starts
    if engine == "local":  # (a remote worker reads its own machine's data)
        _check_data(experiment, todo)  # a missing dataset once, before any run starts
    store.refuse_unclean_code(git_commit(), f"{len(todo)} runs of {experiment} are")  # before any worker starts
    if progress and len(todo) < len(rows):  # said once, not left to a bar that starts part-way
        say(f"sweep {experiment} ({scale}): {len(rows) - len(todo)} of {len(rows)} runs already in {store.root}; "
            f"training the other {len(todo)} (any with a checkpoint resumes from it)")
    if progress and fuse is False and engine == "local":  # (a fused group's time is not its runs' summed)
        say(forecast(experiment, scale, todo, device, jobs, store))
    SweepTraining(experiment, scale, len(rows), todo, device, jobs, store, progress, precision).train(engine, groups)
    return rows


def _check_sweep(jobs: int, train: bool, engine: str, device: str, precision: str) -> str:
    """A ValueError for a bad argument of ``run_grid``, before anything is read; the device, checked."""
    check_jobs(jobs)
    if not isinstance(train, bool):
        raise ValueError(f"train must be True or False, got {train!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not valid; allowed values: {', '.join(map(repr, ENGINES))}")
    device = check_device(device, available=train)  # rendering stored runs needs no device
    if train:
        set_precision(precision, device)  # its errors before any run starts
    return device


class SweepTraining:
    """The training of a sweep's runs that have no record: a job a group, the sweep's bar over all its
    ``total`` runs, each finished record set on its row, and the failures, reported together at the end
    (the other runs go on: their records are worth having)."""

    def __init__(self, experiment: str, scale: str, total: int, todo: Sequence[Row], device: str, jobs: int,
                 store: RunStore, progress: bool, precision: str):
        self.experiment, self.todo, self.device, self.jobs, self.store = experiment, todo, device, jobs, store
        self.progress, self.precision = progress, precision
        self.bar = progress_bar(total=total, initial=total - len(todo), desc=f"sweep {experiment} ({scale})",
                                disable=not progress, position=0, dynamic_ncols=True)
        self.failures: List[Tuple[Row, Exception]] = []

    def train(self, engine: str, groups: Sequence[Sequence[Row]]) -> None:
        """Train ``groups`` (of ``todo``'s runs) on ``engine``; a RuntimeError naming each run that failed."""
        todo = self.todo
        try:
            if engine == "local":
                run_groups(groups, self.jobs, self.job, self.store, self.ran, self.failed)
            else:
                for row, result in REMOTE_ENGINES[engine](todo, self.experiment, self.device, self.jobs):
                    try:
                        record = result()
                        self.store.save(record)  # the driver writes the store
                    except Exception as e:
                        self.failed(row, e)
                    else:
                        self.ran(row, record)
        except KeyboardInterrupt:  # said where the notebook stops: its later cells run on nothing new
            done = sum(self.store.done_record(self.experiment, r.config.scale, r.run_id) is not None for r in todo)
            say(f"sweep {self.experiment}: interrupted with {done} of {len(todo)} runs finished and stored; the "
                "same call again trains the others, each that had started from its last checkpoint")
            raise
        finally:
            self.bar.close()
        if self.failures:
            raise RuntimeError(failures_report(self.failures, len(todo)))

    def job(self, i: int, group: Sequence[Row]) -> Job:
        """The ``i``-th group's job: its runs, their device and store, and its bar's line."""
        return Job.of_group(self.experiment, i, group, self.jobs, self.device, self.store, progress=self.progress,
                            precision=self.precision, wait=True)

    def ran(self, row: Row, record: Record) -> None:
        set_stored(self.store, row, record)
        self.bar.update(1)

    def failed(self, row: Row, error: Exception) -> None:
        self.failures.append((row, error))
        self.bar.update(1)


def forecast(experiment: str, scale: str, todo: Sequence[Row], device: str, jobs: int, store: RunStore) -> str:
    """Before a sweep trains ``todo``: about how long it should take, ``jobs`` at a time, by the runs like each
    trained alone on this kind of device, on this machine where it trained some (``estimates.expected_seconds``;
    a run with a checkpoint counts what it has left), stored in ``store`` and in the repository's tracked store
    (a scratch store has none)."""
    tracked = RunStore(DEFAULT_RUNS)
    also = [tracked] * (tracked.root.resolve() != store.root.resolve())
    on = hardware(device, worker_threads(jobs))  # this machine's runs like them first, where it has any

    def expected(row: Row) -> Optional[float]:
        path = store.checkpoint_path(experiment, row.run_id)
        return expected_seconds(experiment, row.config, store, path if resumable(path, store) else None, device,
                                alone=True, also=also, hardware=on)
    times = [expected(r) for r in todo]
    known = [t for t in times if t is not None]
    kind = device.split(":")[0]
    epochs = sorted({r.config.epochs for r in todo if isinstance(getattr(r.config, "epochs", None), int)})
    each = "" if not epochs else f" of {epochs[0]}" + (f" to {epochs[-1]}" if len(epochs) > 1 else "") + " epochs"
    head = f"sweep {experiment} ({scale}): {len(todo)} run{'s' * (len(todo) != 1)}{each} to train"
    if not known:
        return f"{head}; no stored run like them trained alone on {kind} to say how long they take"
    at_once = min(jobs, len(todo))
    total = max(sum(known) / min(at_once, len(known)), max(known))  # no sooner than its longest run
    took = f"{total / 60:.0f} min" if total < 5400 else f"{total / 3600:.1f} h"
    unknown = len(times) - len(known)
    return (f"{head}, about {took} running {at_once} at a time, going by the stored runs like them trained alone "
            f"on {kind}; another machine differs"
            + (f"; {unknown} of them have none like them, not counted" if unknown else ""))


def failures_report(failures: Sequence[Tuple[Row, Exception]], of: int) -> str:
    """The runs that failed, ``of`` this many tried: each error once (a missing dataset fails every run
    alike), with the ids of the runs it stopped, or the run's id and config where it stopped one."""
    by_error: Dict[str, List[Row]] = {}
    for row, e in failures:
        by_error.setdefault(f"{type(e).__name__}: {e}", []).append(row)
    lines = [f"{len(rows)} of them: {error}\n" + (f"    runs {', '.join(r.run_id for r in rows)}" if len(rows) > 1 else
                                                 f"    run {rows[0].run_id} {rows[0].config}")
             for error, rows in by_error.items()]
    return f"{len(failures)} of {of} runs failed (finished records are kept):\n  " + "\n  ".join(lines)


def _parse_overrides(items: Sequence[str], option: str = "--set") -> Dict[str, Any]:
    """``["key=value", ...]`` (the values of ``option``) as a dict, each value a Python literal where it parses
    as one."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{option} expects {'LABEL' if option == '--only' else 'KEY'}=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recdrop.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=sorted(experiments.EXPERIMENTS))
    ap.add_argument("--scale", default="quick")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes on the device (CPUs for a local Ray)")
    ap.add_argument("--engine", choices=ENGINES, default="local",
                    help="local processes, a Ray cluster, or SLURM via submitit")
    ap.add_argument("--grid", default="table", help="which grid: table (the paper's), headline, conjecture")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override config fields")
    ap.add_argument("--only", nargs="*", default=[], metavar="LABEL=VALUE", help="run only the cells with these labels")
    ap.add_argument("--fuse", nargs="?", type=int, const=True, default=False, metavar="N",
                    help="train the runs that can share one model as one, at most N to a group")
    add_precision_options(ap)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--forecast", action="store_true",
                    help="say how many runs are missing and about how long they take, and train nothing")
    args = ap.parse_args(argv)
    overrides = _parse_overrides(args.set)
    taken = sorted(set(overrides) & set(inspect.signature(run_grid).parameters))
    if taken:
        print(f"error: --set {', '.join(taken)}: not config fields but the sweep's own settings; use its options "
              "(see --help)", file=sys.stderr)
        return 1
    try:
        if args.forecast:
            if args.fuse is not False:
                raise ValueError("--forecast times runs trained alone; a fused group's time is not theirs summed")
            # a time for another machine's device too, but none past this machine's last GPU
            device = check_device(args.device, available=str(args.device).startswith("cuda")
                                  and torch.cuda.is_available())
            rows = run_grid(args.experiment, args.scale, args.seeds, device, args.jobs, train=False,
                            only=_parse_overrides(args.only, "--only") or None, grid=args.grid, **overrides)
            todo = [r for r in rows if not r.done]
            print(forecast(args.experiment, args.scale, todo, device, args.jobs, RunStore()) if todo else
                  f"sweep {args.experiment} ({args.scale}): all {len(rows)} runs are in {RunStore().root}; "
                  "nothing to train")
            return 0
        rows = run_grid(args.experiment, args.scale, args.seeds, args.device, args.jobs,
                        progress=not args.no_progress, engine=args.engine,
                        only=_parse_overrides(args.only, "--only") or None, grid=args.grid, fuse=args.fuse,
                        precision=precision_option(args), **overrides)
    except (ValueError, RuntimeError, FileNotFoundError, ImportError) as e:  # (a dataset or the word vectors missing)
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(rows)} runs of {args.experiment} at scale {args.scale} are in {RunStore().root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
