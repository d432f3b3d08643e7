"""One runner of groups of runs, for the sweep and the campaign alike.

A ``Job`` says what a worker needs to train one group (a run alone is a group of one); ``run_job``
trains it in the calling process; ``run_groups`` runs the jobs of a list of groups, one at a time in
this process or ``jobs`` at a time in spawned worker processes, and hands each of a group's rows on
as the group ends: with its record where the run is done (``RunStore.done_record``: a member that
finished before its group failed keeps its record), else with the error that stopped it.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import experiments
from .config import ExperimentConfig, run_id
from .records import Record, Row
from .store import RunStore
from .train import BudgetExhausted, train_group


@dataclasses.dataclass(frozen=True)
class Job:
    """One group's training, as a worker process receives it."""

    experiment: str
    members: Tuple[Tuple[ExperimentConfig, int], ...]  # (config, seed) of each run
    device: str
    store_root: str
    threads: int  # torch's threads in the worker
    position: int = 0  # of its progress bar
    progress: bool = False
    deadline: Optional[float] = None  # a time.time() at which its runs checkpoint and stop
    start_by: Optional[float] = None  # a time.time() after which it does not start (it would not end by deadline)
    rerun: bool = False  # train again a stored record made by other code (another commit), even one the store keeps
    precision: str = "float32"
    wait: bool = False  # for a run that another process trains, rather than refuse it

    @classmethod
    def of_group(cls, experiment: str, index: int, group: Sequence, jobs: int, device: str, store: RunStore,
                 **settings) -> "Job":
        """The job of a call's ``index``-th group (runs with their ``config`` and ``seed``), the groups trained
        ``jobs`` at a time: torch's threads of one of ``jobs`` workers (``worker_threads``), its bar on its
        worker's line below the call's; ``settings`` the other fields."""
        return cls(experiment, tuple((r.config, r.seed) for r in group), device, str(store.root),
                   worker_threads(jobs), position=1 + index % jobs, **settings)


def check_jobs(jobs) -> int:
    """``jobs``, the number of worker processes: a positive int; else a ValueError."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive int, got {jobs!r}")
    return jobs


def worker_threads(jobs: int) -> int:
    """Torch threads for each of ``jobs`` worker processes: the machine's CPUs shared out (one at least);
    one worker keeps torch's own default."""
    return max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else torch.get_num_threads()


def run_job(job: Job) -> List[Record]:
    """Train ``job``'s runs in this process, as one group (``train.train_group``); each one's record. A
    run that diverges gives its stored "diverged" record, with a warning. Past ``job.start_by`` it starts
    nothing (``BudgetExhausted``)."""
    if job.start_by is not None and time.time() > job.start_by:
        raise BudgetExhausted(f"{job.experiment}: {len(job.members)} run(s) not started: they would not end "
                              "within the time budget")
    torch.set_num_threads(job.threads)
    make_task, _ = experiments.get(job.experiment)
    errors: Dict[str, str] = {}
    records = train_group(make_task, list(job.members), device=job.device, store=RunStore(job.store_root),
                          progress=job.progress,
                          position=job.position, deadline=job.deadline, rerun=job.rerun, errors=errors,
                          precision=job.precision, wait=job.wait)
    for message in errors.values():  # a result: its record says where
        warnings.warn(message, RuntimeWarning)
    return records


def run_groups(groups: Sequence[Sequence[Row]], jobs: int, job_of: Callable[[int, Sequence[Row]], Job],
               store: RunStore, took: Callable[[Row, Record], None],
               failed: Callable[[Row, Exception], None]) -> None:
    """Train each group of rows (``run_job(job_of(i, group))``, the job's members the rows' runs in
    order), ``jobs`` groups at a time in spawned worker processes (in this one where ``jobs`` is 1). As
    a group ends, each of its rows goes to ``took(row, record)``, or, where the group raised before that
    run was done, to ``failed(row, error)``: the other groups go on."""
    def settle(group: Sequence[Row], job: Job, result: Callable[[], List[Record]]) -> None:
        try:
            records = result()
        except Exception as e:  # at a budget, or a failure: the group's finished members keep their records
            for row, (config, seed) in zip(group, job.members):
                record = store.done_record(job.experiment, config.scale, run_id(config, seed))
                if record is not None:
                    took(row, record)
                else:
                    failed(row, e)
            return
        for row, record in zip(group, records):
            took(row, record)
    jobs_of = [job_of(i, group) for i, group in enumerate(groups)]
    if jobs == 1:
        for group, job in zip(groups, jobs_of):
            settle(group, job, lambda: run_job(job))
        return
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_job, job): (group, job) for group, job in zip(groups, jobs_of)}
        for fut in as_completed(futures):
            settle(*futures[fut], fut.result)
