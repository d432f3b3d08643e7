"""The replication campaign: walk a committed, ordered list of grids and run what is missing.

    python -m recdrop.campaign --for 2h30m --device cpu --jobs 2     # run, stop cleanly at the budget
    python -m recdrop.campaign --list                                # what is left, in order
    python -m recdrop.campaign --for 9m --device cuda --jobs 2 --pack $OUT       # on a lent GPU
    python -m recdrop.campaign --unpack DIR                          # bring a pack's files back, and stop
    python -m recdrop.campaign --unpack DIR --for 9m --device cuda --fuse 2   # ... then run from there

``data/campaign.toml`` lists (experiment, scale, grid, seeds), highest value first. A run counts as
done when the store would keep its record (``RunStore.is_done``; a diverged run's record counts): in
``data/runs``, which is committed, one from a clean commit; a record from uncommitted code is run
again and replaced. Runs with a checkpoint resume it. At the end of the budget every running run
saves its checkpoint and stops; the next call goes on from there. Entries may be kept to some
devices (the paper-scale language models to ``cuda``); a run with a checkpoint may resume anywhere,
and its record's ``segments`` say which stretch ran where.

A lent GPU returns only a few files from each command, so ``--pack DIR`` writes the records this
call finished and as many checkpoints of its unfinished runs as fit (in campaign order, the most valuable
first) into parts that fit what a lent GPU's command returns (``PART_BYTES``, ``MAX_PARTS``), with a manifest
of SHA-256 sums; a call whose records alone do not fit is an error. ``--unpack DIR`` checks them and puts
checkpoints in the cache and records in the store (which refuses records from unclean code: those
are reported, and the call exits non-zero). A local checkpoint further on than the pack's, or one
of a run with a clean record, is kept.

Environment: ``RECDROP_RUNS`` the store of records (default ``data/runs`` of this checkout: a bare
call trains into it, for an hour); ``RECDROP_CACHE`` the checkpoints, a folder per store (default
``~/.cache/recdrop``); ``RECDROP_DATA`` the datasets (default ``../shared/data``).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

from . import estimates, experiments
from .paths import DATA_DIR
from .progress import bar as progress_bar
from .progress import say
from .store import (CorruptCheckpointError, DirtyTreeError, RunInUseError, RunStore, atomic_write_bytes,
                    git_commit, hardware, load_checkpoint, unclean_commits)
from .records import Record, Row
from .runner import Job, check_jobs, run_groups, worker_threads
from .sweep import check_seeds, fuse_groups, grid_rows, set_stored
from .train import (DEVICES, PRECISIONS, BudgetExhausted, add_precision_options, check_device, precision_option,
                    set_precision)

CAMPAIGN = DATA_DIR / "campaign.toml"
PACK_NAME = "campaign-pack.tar"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One line of the campaign: a grid of an experiment at a scale, for some seeds."""

    experiment: str
    scale: str
    why: str  # the value of this entry, in a sentence
    grid: str = "table"
    seeds: Tuple[int, ...] = (0,)
    only: Optional[Dict[str, Any]] = None  # keep the cells with these labels
    devices: Tuple[str, ...] = DEVICES  # where its runs may start (a checkpoint resumes anywhere)
    precision: Optional[str] = None  # how its runs train (``train.PRECISIONS``); None: the command line's


@dataclasses.dataclass(kw_only=True)
class Pending(Row):
    """A run the campaign has still to do: a row of the entry's grid (``sweep.grid_rows``), with the entry
    it comes from, its place in the campaign's order, whether a checkpoint resumes it and whether a stored
    record of it is to be replaced; once it has run, its record (``stored``) or what stopped it (``error``)."""

    entry: Entry
    resumable: bool = False
    unclean_record: bool = False  # its stored record is of uncommitted code (``--list`` says so; it runs again)
    place: int = 0  # among the pending runs (``pending_runs``): the campaign's order, the most valuable first
    error: str = ""

    @classmethod
    def of(cls, row: Row, entry: Entry, resumable: bool, unclean_record: bool, place: int = 0) -> "Pending":
        return cls(**{f.name: getattr(row, f.name) for f in dataclasses.fields(Row)}, entry=entry,
                   resumable=resumable, unclean_record=unclean_record, place=place)

    @property
    def experiment(self) -> str:
        return self.entry.experiment

    def label(self) -> str:
        """The run as the command line lists it: experiment, scale, run id and its cell's labels."""
        cell = " ".join(f"{k}={v}" for k, v in {**self.labels, "seed": self.seed}.items())
        return f"{self.entry.experiment}/{self.entry.scale} {self.run_id} {cell}"


def load_campaign(path: os.PathLike = CAMPAIGN) -> List[Entry]:
    """The entries of a campaign file, checked: unknown keys, bad seeds or devices are errors."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"campaign file {path} cannot be read ({type(e).__name__}: {e})") from e
    fields = {f.name for f in dataclasses.fields(Entry)}
    items = raw.get("entry", [])
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError(f"{path}: each entry must be a table of its own, under a [[entry]] header (two "
                         f"brackets), got entry = {str(items)[:80]}")
    entries = []
    for i, item in enumerate(items, 1):
        unknown = set(item) - fields
        if unknown:
            raise ValueError(f"{path}: entry {i} has unknown keys {sorted(unknown)}; allowed: {sorted(fields)}")
        missing = {"experiment", "scale", "why"} - set(item)
        if missing:
            raise ValueError(f"{path}: entry {i} lacks {sorted(missing)}")
        devices = tuple(item.get("devices", DEVICES))
        if not devices or set(devices) - set(DEVICES):
            raise ValueError(f"{path}: entry {i}: devices must be a non-empty list of {DEVICES}, got {devices}")
        if item.get("precision", "float32") not in PRECISIONS:
            raise ValueError(f"{path}: entry {i}: precision must be one of {PRECISIONS}, got {item['precision']!r}")
        entries.append(Entry(**{**item, "seeds": tuple(check_seeds(item.get("seeds", [0]))), "devices": devices}))
    if not entries:
        raise ValueError(f"campaign file {path} has no [[entry]]")
    return entries


def pending_runs(entries: Sequence[Entry], device: str, store: RunStore) -> List[Pending]:
    """The runs still to do, in campaign order: those not done (``RunStore.is_done``). Runs of an entry
    kept to other devices are left out unless a checkpoint can resume them."""
    kind = str(device).partition(":")[0]
    seen, todo = set(), []
    for entry in entries:
        for row in grid_rows(entry.experiment, entry.scale, entry.seeds, entry.grid, entry.only, store):
            key = (entry.experiment, row.run_id)
            if key in seen or row.done:
                continue
            seen.add(key)
            resumable = estimates.resumable(store.checkpoint_path(entry.experiment, row.run_id), store)
            if kind in entry.devices or resumable:
                unclean = store.has(entry.experiment, row.config.scale, row.run_id)  # stored, and yet not done
                todo.append(Pending.of(row, entry, resumable, unclean, place=len(todo)))
    return todo


def pending_seconds(run: Pending, store: RunStore, device: Optional[str] = None,
                    hardware: Optional[str] = None) -> Optional[float]:
    """What a pending run should take (``estimates.expected_seconds``), on the hardware of the stored runs like
    it (with ``device``, only those that ran on that kind of device; with ``hardware``, those that ran on it
    where any did), or the part of it left where it resumes from its checkpoint."""
    return estimates.expected_seconds(run.experiment, run.config, store, store.checkpoint_path(
        run.experiment, run.run_id) if run.resumable else None, device, hardware=hardware)


# --fuse: off, on, one cap, "fit", or caps per experiment (``parse_fuse``) or per experiment and scale
# (``fitting_caps``)
Fuse = Union[bool, int, str, Dict[str, int], Dict[Tuple[str, str], int]]
MAX_GROUP = 26  # a table's cells


def fitting_caps(todo: Sequence[Pending], group_times: Sequence[Dict[str, Any]], budget_s: float,
                 precision: str) -> Dict[Tuple[str, str], int]:
    """``fuse="fit"``: each experiment's cap on its groups at each scale, (experiment, scale) -> cap, in the
    order of its first pending run: the largest group (at most the pending runs of that run's entry, so
    that no group runs ahead of the campaign's order, and ``MAX_GROUP``) that finishes in the time the
    groups before it leave, by ``group_times`` (``estimates.group_seconds``, from this machine's measurements
    at each scale it trains). An experiment and scale of which no group fits, or whose time is unknown, is
    left out: its runs go one at a time, where ``whole_runs`` lets them start."""
    caps: Dict[Tuple[str, str], int] = {}
    left = budget_s
    for run in todo:
        key = (run.experiment, run.config.scale)
        if key in caps:
            continue
        caps[key] = 0
        most = min(MAX_GROUP, sum(1 for r in todo if r.entry is run.entry))
        for size in range(most, 0, -1):
            t = estimates.group_seconds(group_times, run.experiment, run.entry.precision or precision, size,
                                        run.config.scale)
            if t is not None and t <= left:
                caps[key], left = size, left - t
                break
    return {key: cap for key, cap in caps.items() if cap}


def read_group_times(path: Optional[Path]) -> List[Dict[str, str]]:
    """The rows of a ``benchmarks/bench_groups.py`` CSV (none without a path)."""
    if path is None:
        return []
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise ValueError(f"--group-times {path} cannot be read ({e})") from e


def parse_fuse(values: Optional[Sequence[str]]) -> Fuse:
    """``--fuse``'s words as ``run_campaign``'s ``fuse``: absent, False; alone, True; ``N``, a cap;
    ``EXPERIMENT=N`` words, each experiment's cap; ``fit``, the caps that fit the budget (``fitting_caps``)."""
    if values is None:
        return False
    if not values:
        return True
    if values == ["fit"]:
        return "fit"
    if len(values) == 1 and values[0].isdigit():
        return int(values[0])
    caps = {}
    for word in values:
        name, _, n = word.partition("=")
        if name not in experiments.EXPERIMENTS or not n.isdigit() or int(n) < 1:
            raise ValueError(f"--fuse takes N or EXPERIMENT=N words (N at least 1, the experiments "
                             f"{', '.join(experiments.EXPERIMENTS)}), got {word!r}")
        caps[name] = int(n)
    return caps


def parse_budget(text: str) -> float:
    """Seconds in a budget such as ``2h30m``, ``9m``, ``45s`` or ``1h``."""
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*", str(text))
    if not m or not any(m.groups()):
        raise ValueError(f"time budget {text!r} is not valid; write it like 2h30m, 9m or 45s")
    h, mins, s = (float(g) if g else 0.0 for g in m.groups())
    if h * 3600 + mins * 60 + s <= 0:
        raise ValueError(f"time budget {text!r} is no time: nothing could run")
    return h * 3600 + mins * 60 + s


def run_campaign(entries: Sequence[Entry], device: str = "cpu", jobs: int = 1, budget_s: float = 3600.0,
                 store: Optional[RunStore] = None, progress: bool = True,
                 fuse: Fuse = False, precision: str = "float32", whole_runs: bool = False,
                 group_times: Sequence[Dict[str, Any]] = ()) -> Dict[str, List[Pending]]:
    """Run the pending runs in order with ``jobs`` worker processes until all are done or ``budget_s`` seconds
    have passed; then every running run checkpoints and stops. With ``fuse`` (True, a cap on a group's size, or
    each experiment's cap, ``{"char_lm": 6}``: the others one run at a time) the runs of an experiment that can
    share one model train as one group (``sweep.fuse_groups``), groups in the order of their first run. Each
    run trains at its entry's precision, else at ``precision``. Returns the rows by outcome: ``finished`` and
    ``diverged`` (recorded as such) with their stored record (``stored``); ``stopped`` (checkpoint saved in this
    call), ``failed`` and ``not_started`` (none saved in this call: one it would resume is as it was), with their
    ``error``. Its log (``log``, with or without bars) says what is pending, then each run as it settles. With
    ``whole_runs`` a group starts only where its expected time (``pending_seconds``, its members' summed; where
    a member's is unknown, the group's step as ``group_times`` measured it on this machine,
    ``estimates.group_seconds``; unknown: any, but none where ``group_times`` are given) ends within the budget:
    for a machine whose checkpoints do not outlive it, where a run stopped midway is lost. ``fuse="fit"``
    sizes the groups by ``group_times`` and needs ``whole_runs``, so that none starts that would not finish."""
    if fuse == "fit" and not (group_times and whole_runs):
        raise ValueError("--fuse fit (fuse='fit') sizes the groups by --group-times (group_times: none given, or "
                         "a file without rows), and needs --whole-runs (whole_runs=True) so that none starts that "
                         "would not finish")
    device = check_device(device)
    check_jobs(jobs)
    set_precision(precision, device)
    store = store or RunStore()
    store.refuse_unclean_code(git_commit(), "the campaign is")
    deadline = time.time() + budget_s
    todo = pending_runs(entries, device, store)
    if fuse == "fit":
        fuse = fitting_caps(todo, group_times, budget_s, precision)
        log(f"groups of at most {fuse or 'one run'}: the largest that finish in the time left, by --group-times")
    groups = campaign_groups(todo, fuse, device)
    call = _CampaignCall(todo, device, jobs, store, deadline, progress, precision, whole_runs, group_times)
    log(f"{len(todo)} runs pending in {len(groups)} groups, {jobs} at a time, until "
        f"{time.strftime('%H:%M UTC', time.gmtime(deadline))}")
    try:
        run_groups(groups, jobs, call.job, store, call.took, call.failed)
    finally:
        call.bar.close()
    return call.out


NEVER = 0.0  # a ``Job.start_by`` that every time.time() is past: the job does not start


class _CampaignCall:
    """One call of ``run_campaign`` as its groups train: the job each group runs as (``job``), and each run's
    outcome as it settles (``took``, ``failed``), kept in ``out`` and counted on the bar and in the log."""

    def __init__(self, todo: Sequence[Pending], device: str, jobs: int, store: RunStore, deadline: float,
                 progress: bool, precision: str, whole_runs: bool, group_times: Sequence[Dict[str, Any]]):
        self.todo, self.device, self.jobs, self.store, self.deadline = todo, device, jobs, store, deadline
        self.progress, self.precision, self.whole_runs, self.group_times = progress, precision, whole_runs, group_times
        self.out: Dict[str, List[Pending]] = {"finished": [], "diverged": [], "stopped": [], "failed": [],
                                              "not_started": []}
        self.bar = progress_bar(total=len(todo), desc=f"campaign on {device}", disable=not progress, position=0,
                                dynamic_ncols=True)
        self.on = hardware(device, worker_threads(jobs))  # as a record of its workers will name it
        self.checkpoints_before = {(r.experiment, r.run_id): self.checkpoint_file(r) for r in todo}

    def settled(self, run: Pending, outcome: str, how: str) -> None:
        """File a run under its outcome, and log it unless it never started."""
        self.out[outcome].append(run)
        self.bar.update(1)
        if outcome != "not_started":
            log(f"{outcome} {run.label()}{how}; {sum(map(len, self.out.values()))} of {len(self.todo)} settled")

    def took(self, run: Pending, record: Record) -> None:
        """A run that ended with a record: finished, or diverged (a record too)."""
        set_stored(self.store, run, record)
        outcome = "diverged" if record.diverged else "finished"
        self.settled(run, outcome, f" in {record.wall_time_s / 60:.0f} min")

    def failed(self, run: Pending, error: Exception) -> None:
        """A run that ended without a record: stopped at the budget (or never started), or failed."""
        if isinstance(error, BudgetExhausted):
            run.error = str(error)
            self.settled(run, "stopped" if self.saved_checkpoint(run) else "not_started", f": {run.error}")
        else:  # keep going: the other runs are worth having
            run.error = f"{type(error).__name__}: {error}"
            self.settled(run, "failed", f": {run.error}")

    def checkpoint_file(self, run: Pending) -> Optional[Tuple[int, int]]:
        """Which file the run's checkpoint is, (inode, modification time); None where it has none."""
        try:
            stat = self.store.checkpoint_path(run.experiment, run.run_id).stat()
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def saved_checkpoint(self, run: Pending) -> bool:
        """Whether the run saved a checkpoint in this call. ``BudgetExhausted`` also stops a run refused before it
        started (``Job.start_by``, a deadline passed) or left waiting for its group to catch up: its checkpoint is
        the file it was, as saving renames a new file in place (``store.save_checkpoints``)."""
        now = self.checkpoint_file(run)
        return now is not None and now != self.checkpoints_before.get((run.experiment, run.run_id))

    def start_by(self, group: List[Pending]) -> Optional[float]:
        """The latest time a group may start and still end within the budget (``whole_runs`` only); ``NEVER``
        where it is not known to finish on a machine that measured its groups, None where any time will do."""
        if not self.whole_runs:
            return None
        # a CPU's runs time no GPU's, and where this machine at this thread count has runs, theirs
        expected = [pending_seconds(r, self.store, self.device, self.on) for r in group]
        if None in expected and self.group_times:
            expected = [estimates.group_seconds(self.group_times, group[0].experiment,
                                                group[0].entry.precision or self.precision, len(group),
                                                group[0].config.scale)]
            if None in expected:  # not known to finish: on a machine that measured its groups, not started
                return NEVER
        return self.deadline - sum(expected) if None not in expected else None

    def job(self, i: int, group: List[Pending]) -> Job:
        """The worker's job for the ``i``-th group: its runs, at the group's precision, under the deadline."""
        return Job.of_group(group[0].experiment, i, group, self.jobs, self.device, self.store, progress=self.progress,
                            deadline=self.deadline, start_by=self.start_by(group),
                            precision=group[0].entry.precision or self.precision)


def log(line: str) -> None:
    """A timestamped line of the campaign's log, as each run settles: shown with or without the bars."""
    say(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} campaign: {line}")


def group_caps(fuse: Fuse, todo: Sequence[Pending]) -> Dict[Tuple[str, str], Union[bool, int]]:
    """Each (experiment, scale) of ``todo`` -> the cap on its groups (``sweep.fuse_groups``' ``fuse``; False:
    one run at a time), from any ``fuse`` but "fit" (``fitting_caps`` gives its caps by experiment and scale):
    one cap for all, or caps by experiment or by experiment and scale (the others, one run at a time). An
    experiment whose runs cannot share a model runs them one at a time."""
    caps = {}
    for e, scale in dict.fromkeys((r.experiment, r.config.scale) for r in todo):
        cap = fuse.get((e, scale), fuse.get(e, False)) if isinstance(fuse, dict) else fuse
        caps[e, scale] = cap if experiments.EXPERIMENTS[e].task.FUSABLE_FIELDS else False
    return caps


def campaign_groups(todo: Sequence[Pending], fuse: Fuse, device: str) -> List[List[Pending]]:
    """The pending runs as the groups that train together (``sweep.fuse_groups`` per experiment, precision
    and scale, capped by ``group_caps``): the runs that resume a checkpoint first within an experiment (so
    that they train together rather than each beside a run that must first catch up with it), the groups
    that resume first, then in the order of each group's first run."""
    caps = group_caps(fuse, todo)
    experiments_in_order = list(dict.fromkeys(r.experiment for r in todo))
    groups = []
    for e in experiments_in_order:
        mine = sorted((r for r in todo if r.experiment == e), key=lambda r: not r.resumable)  # stable
        # a group trains at one precision and scale
        for precision, scale in dict.fromkeys((r.entry.precision, r.config.scale) for r in mine):
            these = [r for r in mine if (r.entry.precision, r.config.scale) == (precision, scale)]
            groups += fuse_groups(e, these, caps[e, scale], device)
    order = {id(r): i for i, r in enumerate(todo)}
    return sorted(groups, key=lambda g: (not any(r.resumable for r in g), order[id(g[0])]))


def _tar_size(sizes: Sequence[int]) -> int:
    """Bytes of an uncompressed tar of files of these sizes: a 512-byte header and whole 512-byte
    blocks per file, two zero blocks at the end, padded to tarfile's 10240-byte records."""
    raw = sum(512 + -(-n // 512) * 512 for n in sizes) + 1024
    return -(-raw // tarfile.RECORDSIZE) * tarfile.RECORDSIZE


def _pack_size(sizes: Sequence[int]) -> int:
    """Bytes of a pack of files of these sizes: their tar, with the manifest that lists them."""
    manifest_bytes = 200 * len(sizes)  # per file listed, more than a name and a hex digest take
    return _tar_size([*sizes, manifest_bytes])


# What a lent GPU's command brings back: at most 8 files of 16 MiB, 64 MiB together. A pack takes 6 files
# of 10 MiB, leaving room for two more (a log, say) within both limits.
PART_BYTES, MAX_PARTS = 10 * 2**20, 6


def pack(out_dir: os.PathLike, runs: Sequence[Pending], records: Sequence[Record],
         store: RunStore, part_bytes: int = PART_BYTES, max_parts: int = MAX_PARTS) -> List[Path]:
    """Write ``records`` and the checkpoints of ``runs`` (in order, as many as fit) into a tar split
    into at most ``max_parts`` files of ``part_bytes``, with a manifest of SHA-256 sums. A ValueError,
    and nothing written, where the records alone do not fit."""
    room = part_bytes * max_parts
    files = {_member_name(rec): store.path(rec.experiment, rec.scale, rec.run_id).read_bytes() for rec in records}
    if _pack_size([len(d) for d in files.values()]) > room:
        raise ValueError(f"pack: the {len(records)} records take more than {max_parts} parts of "
                         f"{part_bytes / 2**20:g} MiB; nothing is packed")
    skipped = []
    for run in runs:
        path = store.checkpoint_path(run.experiment, run.run_id)
        if path.exists():
            if _pack_size([len(d) for d in files.values()] + [path.stat().st_size]) <= room:
                files[f"checkpoints/{run.experiment}/{run.run_id}.pt"] = path.read_bytes()
            else:
                skipped.append(path)
    manifest = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest, indent=1).encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    blob = buf.getvalue()
    out_dir = Path(out_dir)
    parts = []
    for k in range(0, len(blob), part_bytes):
        parts.append(out_dir / f"{PACK_NAME}.{k // part_bytes:03d}")
        atomic_write_bytes(parts[-1], blob[k:k + part_bytes])
    for path in skipped:
        print(f"pack: {path} did not fit in {max_parts} parts of {part_bytes / 2**20:g} MiB and stays behind",
              file=sys.stderr)
    print(f"pack: {len(records)} records and {len(files) - len(records)} checkpoints in {len(parts)} parts "
          f"({len(blob) / 2**20:.1f} MiB) under {out_dir}")
    return parts


_MEMBER = re.compile(r"(runs/\w+/\w+/[0-9a-f]{12}\.json|checkpoints/\w+/[0-9a-f]{12}\.pt)")


def _member_name(record: Record) -> str:
    """A record's name in a pack: its path in the store."""
    return f"runs/{record.experiment}/{record.scale}/{record.run_id}.json"


def _progress(checkpoint: Dict[str, Any]) -> Tuple[int, int]:
    """How far a loaded checkpoint got: (epoch, batch)."""
    return checkpoint["epoch"], checkpoint["batch"]


def unpack(in_dir: os.PathLike, store: Optional[RunStore] = None) -> Dict[str, Any]:
    """Check a pack against its manifest and its members' names, then put its checkpoints in the cache
    and its records in the store. Kept (counted in ``kept``): a record already stored from a clean
    commit, a local checkpoint further on than the pack's, and none is written for a run with such a
    record. Records go in first. Records the store refuses (from unclean code) and checkpoints that do
    not load are listed in ``refused``; the rest go in."""
    store = store or RunStore()
    members = _read_pack(in_dir)
    counts = {"records": 0, "checkpoints": 0, "kept": 0, "refused": []}
    records_first = sorted(members.items(), key=lambda item: (item[0].startswith("checkpoints/"), item[0]))
    for name, data in records_first:
        if name.startswith("checkpoints/"):
            _unpack_checkpoint(in_dir, name, data, store, counts)
        else:
            _unpack_record(name, data, store, counts)
    return counts


def _read_pack(in_dir: os.PathLike) -> Dict[str, bytes]:
    """The files of the pack in ``in_dir`` by name, once its parts join into a tar that matches its manifest."""
    parts = sorted(Path(in_dir).glob(f"{PACK_NAME}.[0-9][0-9][0-9]"))
    if not parts:
        raise FileNotFoundError(f"no {PACK_NAME}.NNN parts in {in_dir}")
    blob = b"".join(p.read_bytes() for p in parts)
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    except (tarfile.TarError, AttributeError) as e:
        raise ValueError(f"the pack in {in_dir} ({len(parts)} parts) is incomplete or corrupt ({e})") from e
    manifest = json.loads(members.pop("manifest.json", b"{}"))
    if set(manifest) != set(members):
        raise ValueError(f"the pack in {in_dir} does not match its manifest: {sorted(set(manifest) ^ set(members))}")
    for name, data in members.items():
        _check_member(in_dir, name, data, manifest[name])
    return members


def _check_member(in_dir: os.PathLike, name: str, data: bytes, sha256: str) -> None:
    """Refuse a pack's file that is not where a pack puts a record or checkpoint, whose sum differs from its
    manifest's, or that is a record of another run than its name says (or no record at all)."""
    if not _MEMBER.fullmatch(name):
        raise ValueError(f"the pack in {in_dir} holds an unexpected file {name!r}")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{name} in the pack in {in_dir} does not match its SHA-256 sum")
    if name.startswith("runs/"):
        try:
            holds = _member_name(Record.from_json(json.loads(data), name))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{name} in the pack in {in_dir} is not a run record ({type(e).__name__}: {e})") from e
        if holds != name:
            raise ValueError(f"{name} in the pack in {in_dir} holds the record of another run ({holds})")


def _has_clean_record(store: RunStore, experiment: str, rid: str) -> bool:
    """A record from clean code (a run id names one scale, and a checkpoint does not say which)."""
    return any(not unclean_commits(store.read(p)) for p in store.root.glob(f"{experiment}/*/{rid}.json"))


def _further_on(store: RunStore, local: Path, theirs: Tuple[int, int]) -> bool:
    """Whether the local checkpoint is one to keep: it loads, resumes here, and is further on."""
    if not local.exists():
        return False
    try:  # the pack's replaces an unreadable local one, and one that would not be resumed here
        ours = load_checkpoint(local)
        return store.accepts_checkpoint(ours) and _progress(ours) > theirs
    except (CorruptCheckpointError, KeyError, TypeError):
        return False


def _unpack_checkpoint(in_dir: os.PathLike, name: str, data: bytes, store: RunStore, counts: Dict[str, Any]) -> None:
    """Put a pack's checkpoint in the cache, counted in ``counts``: kept where its run has a clean record or the
    local one is further on; refused where it does not load, would not be resumed here (its code unclean),
    or another process is training its run."""
    _, experiment, file = name.split("/")
    rid = file.removesuffix(".pt")
    local = store.checkpoint_path(experiment, rid)
    if _has_clean_record(store, experiment, rid):
        counts["kept"] += 1
        return
    try:
        packed = load_checkpoint(io.BytesIO(data))
        theirs = _progress(packed)
    except (CorruptCheckpointError, KeyError, TypeError) as e:  # keep going: the rest is worth having
        counts["refused"].append(f"{name} in the pack in {in_dir} is not a checkpoint that loads "
                                 f"({type(e).__name__}: {e}); {local} is left as it was")
        return
    if not store.accepts_checkpoint(packed):  # a run would start afresh from it: a local one is worth more
        counts["refused"].append(f"{name} in the pack in {in_dir} is of code this store does not resume "
                                 f"(uncommitted); {local} is left as it was")
        return
    try:
        with store.hold_runs(experiment, [rid]):  # not under a run that another process is training
            if _further_on(store, local, theirs):
                counts["kept"] += 1
                return
            atomic_write_bytes(local, data)
    except RunInUseError as e:
        counts["refused"].append(f"{name} in the pack in {in_dir} is left out: {e}")
        return
    counts["checkpoints"] += 1


def _unpack_record(name: str, data: bytes, store: RunStore, counts: Dict[str, Any]) -> None:
    """Put a pack's record in the store, counted in ``counts``, and drop its run's checkpoint: kept where a
    clean record of the run is stored; refused where the store refuses it (from unclean code) or another
    process is training its run (whose record would replace this one when it ends)."""
    record = Record.from_json(json.loads(data), name)
    try:
        with store.hold_runs(record.experiment, [record.run_id]):
            if _has_clean_record(store, record.experiment, record.run_id):
                counts["kept"] += 1
                return
            store.save(record)
            store.checkpoint_path(record.experiment, record.run_id).unlink(missing_ok=True)
    except (DirtyTreeError, RunInUseError) as e:  # keep going: the other records are worth having
        counts["refused"].append(str(e))
        return
    counts["records"] += 1


def main(argv=None) -> int:
    args = _argument_parser().parse_args(argv)
    refused = []  # what of the pack did not go in (``unpack``): reported, and the exit status is 1
    try:
        check_device(args.device, available=not args.list)  # listing runs nothing: any valid device
        store = RunStore()
        if args.unpack:
            refused = _unpack_and_report(args.unpack, store)
            if args.budget is None and not args.list:  # bringing files back starts no runs unless asked to
                print("unpack: done; no campaign runs without --for")
                return 1 if refused else 0
        entries = load_campaign(args.file)
        if args.list:
            _print_pending(entries, args.device, store, args.file, hardware(args.device, worker_threads(args.jobs)))
            return 1 if refused else 0
        budget = parse_budget(args.budget or "1h")
        fuse = parse_fuse(args.fuse)
        started = time.time()
        out = run_campaign(entries, args.device, args.jobs, budget, store, progress=not args.no_progress,
                           fuse=fuse, precision=precision_option(args), whole_runs=args.whole_runs,
                           group_times=read_group_times(args.group_times))
    except (ValueError, RuntimeError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    _print_outcomes(out, started)
    if args.pack:
        unfinished = sorted(out["stopped"] + out["failed"], key=lambda r: r.place)  # the most valuable first
        try:
            pack(args.pack, unfinished, [r.stored for r in out["finished"] + out["diverged"]], store)
        except ValueError as e:  # the records are in the store still
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 1 if out["failed"] or refused else 0


def _argument_parser() -> argparse.ArgumentParser:
    """The command line's options (the module's docstring is its help)."""
    ap = argparse.ArgumentParser(prog="python -m recdrop.campaign", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--for", dest="budget", help="time budget, e.g. 2h30m or 9m (default 1h; with --unpack alone, "
                                                 "nothing runs)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda; an entry kept to other devices waits")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time, in worker processes (default 1)")
    ap.add_argument("--file", type=Path, default=CAMPAIGN, help="the campaign list (default data/campaign.toml)")
    ap.add_argument("--list", action="store_true", help="print the pending runs in order and exit")
    ap.add_argument("--pack", type=Path, metavar="DIR", help="afterwards, pack records and checkpoints into DIR")
    ap.add_argument("--unpack", type=Path, metavar="DIR", help="put a pack's checkpoints and records in place, first")
    ap.add_argument("--fuse", nargs="*", default=None, metavar="N",
                    help="train the runs that can share one model as one, at most N to a group; or each "
                         "experiment's cap, e.g. --fuse word_lm=2 char_lm=6 (the others one run at a time); or "
                         "'fit': the largest groups that finish in the budget, by --group-times")
    ap.add_argument("--whole-runs", action="store_true",
                    help="start a run only where its expected time (--list's) ends within the budget: on a machine "
                         "whose checkpoints do not outlive it")
    ap.add_argument("--group-times", type=Path, metavar="CSV",
                    help="with --whole-runs, a group's expected time where no stored run tells: this machine's "
                         "benchmarks/bench_groups.py rows")
    add_precision_options(ap)
    ap.add_argument("--no-progress", action="store_true")
    return ap


def _unpack_and_report(in_dir: Path, store: RunStore) -> List[str]:
    """Unpack a pack into ``store`` and print its counts and each refusal; returns the refusals."""
    counts = unpack(in_dir, store)
    refused = counts.pop("refused")
    print(f"unpack: {counts}")
    for message in refused:
        print(f"error: unpack: {message}", file=sys.stderr)
    return refused


def _print_pending(entries: Sequence[Entry], device: str, store: RunStore, campaign_file: Path,
                   on: str) -> None:
    """``--list``: the pending runs in order, each with its state and expected minutes (on hardware ``on``
    where it has stored runs like it, else on the hardware of those on ``device``'s kind, as the campaign
    plans), then their total."""
    print(f"# store {store.root} (RECDROP_RUNS); list {campaign_file}; "
          f"checkpoints {store.checkpoint_dir()} (in RECDROP_CACHE)\n"
          "# new: no record; resumes: from its checkpoint; reruns: its record is of uncommitted code; "
          f"minutes: its expected time on {on} where runs like it are stored there, else on the hardware of "
          f"the stored runs like it on a {device.split(':')[0].upper()} (?: none stored)")
    total, unknown = 0.0, 0
    for run in pending_runs(entries, device, store):
        state = "resumes" if run.resumable else "reruns" if run.unclean_record else "new"
        t = pending_seconds(run, store, device, hardware=on)
        total, unknown = total + (t or 0.0), unknown + (t is None)
        print(f"{state:8s} {'?' if t is None else f'{t / 60:.0f} min':>8s}  {run.label()}")
    print(f"about {total / 3600:.1f} hours of runs, one at a time, on {on} where it has runs like them, else on "
          "the hardware of their stored runs"
          + (f", and {unknown} run{'s' * (unknown > 1)} of no known cost (no stored run like "
             f"{'them' if unknown > 1 else 'it'} to time)" if unknown else ""))


def _print_outcomes(out: Dict[str, List[Pending]], started: float) -> None:
    """Each run by its outcome (a failed one with its error), then the counts and the time since ``started``."""
    for outcome, runs in out.items():
        for run in runs:
            print(f"{outcome:11s} {run.label()}" + (f"  ({run.error})" if outcome == "failed" else ""))
    print(f"campaign: {len(out['finished'])} finished, {len(out['diverged'])} diverged (recorded), "
          f"{len(out['stopped'])} stopped with a checkpoint, "
          f"{len(out['failed'])} failed, {len(out['not_started'])} not started, in {time.time() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
