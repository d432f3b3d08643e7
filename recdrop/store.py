"""The results store: one JSON record per finished run, and checkpoints in a cache outside git.

Records live in ``data/runs/<experiment>/<scale>/<run_id>.json`` (committed). A record is written
last and atomically (a temp file in the same folder, then ``os.replace``): its presence means the
run is done, and an interrupted write never leaves a broken record. Checkpoints live under
``$RECDROP_CACHE`` (default ``~/.cache/recdrop``) and are never committed.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import pickle
import platform
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from . import route
from .cpu_products import cpu_fields, cpu_name
from .paths import DATA_DIR, REPO_ROOT, cache_dir
from .progress import say
from .records import Record

DEFAULT_RUNS = DATA_DIR / "runs"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(path: Path, state: Dict[str, Any]) -> None:
    save_checkpoints([(path, state)])


def save_checkpoints(items: List[Tuple[Path, Dict[str, Any]]]) -> None:
    """Write each (path, state) checkpoint: every file whole in a temp file first, then all renamed in
    place, so that a group's checkpoints all move on together but for the instant of the
    renames."""
    temps = []
    try:
        for path, state in items:
            buf = io.BytesIO()
            torch.save(_own_storage(state), buf)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            temps.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(buf.getvalue())
                f.flush()
                os.fsync(f.fileno())
        for tmp, path in temps:
            os.replace(tmp, path)
    finally:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _own_storage(value):
    """``value`` with each tensor that views part of a larger storage (a member's slice of a group's
    stacked parameters, ``recdrop.stacked``) copied into its own: torch.save writes a tensor's whole
    storage, and a member's checkpoint would hold the group's."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.untyped_storage().nbytes() > value.nbytes else value
    if isinstance(value, dict):
        own = copy.copy(value)  # its type and attributes (a state_dict's ``_metadata``)
        for k, v in value.items():
            own[k] = _own_storage(v)
        return own
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_own_storage(v) for v in value)
    return value


class CorruptCheckpointError(RuntimeError):
    pass


# A checkpoint of the older format holds NumPy arrays (an RNG state) and torch's version string besides
# tensors and plain values: constructors of data, allowed so that it still loads.
LEGACY_CHECKPOINT_GLOBALS = [np.zeros(1).__reduce__()[0], np.ndarray, np.dtype, type(np.dtype("uint32")),
                             torch.torch_version.TorchVersion]


def load_checkpoint(path: Path) -> Dict[str, Any]:
    """A checkpoint, read with ``torch.load(weights_only=True)``: a file that holds anything but
    tensors, plain values (and the legacy data above) is refused, so loading one cannot run code."""
    try:
        with torch.serialization.safe_globals(LEGACY_CHECKPOINT_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        what = next((line.strip() for line in str(e).splitlines() if "Unsupported global" in line), None)
        if what is None:  # not a checkpoint at all
            raise CorruptCheckpointError(f"checkpoint {path} cannot be read (UnpicklingError: {str(e)[:200]}); "
                                         "delete it to restart that run from scratch") from e
        # it holds an object that a checkpoint never holds: do not load it
        raise CorruptCheckpointError(f"checkpoint {path} holds more than tensors and plain values ({what}); it is not "
                                     "loaded, since loading it could run code: delete it to restart that run from "
                                     "scratch") from e
    except Exception as e:  # truncated or overwritten: say which file, and how to recover
        raise CorruptCheckpointError(f"checkpoint {path} cannot be read ({type(e).__name__}: {e}); "
                                     "delete it to restart that run from scratch") from e


def hardware(device: str = "cpu", threads: Optional[int] = None) -> str:
    """The GPU name, or the CPU model with its family and model number (a name such as "AMD EPYC" covers
    generations several times apart in speed) and thread count (torch's now, or ``threads``)."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    model = cpu_name(cpu_fields(), platform.processor() or platform.machine())
    threads = threads or torch.get_num_threads()
    return f"{model} ({threads} thread{'' if threads == 1 else 's'})"


@functools.lru_cache(maxsize=None)
def git_commit() -> str:
    """The commit of the code running, with ``-dirty`` if recdrop/ had uncommitted changes. Read once
    per process, when this module is imported (the code that runs is the code imported), and kept."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO_ROOT, check=True).stdout.strip()
    try:
        sha = git("rev-parse", "--short=10", "HEAD")
        dirty = git("status", "--porcelain", "--", "recdrop")
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


git_commit()  # at import: later edits to the checkout do not change what this process runs


def environment(device: str) -> Dict[str, Any]:
    """Hardware, versions and commit of the code running now, for a run record, and recdrop's switches
    where any is set (``route.switches``)."""
    env: Dict[str, Any] = {"hardware": hardware(device), "device": str(device), "torch": str(torch.__version__),
                           "python": platform.python_version(), "commit": git_commit()}
    switches = route.switches()
    if switches:
        env["switches"] = switches
    return env


def is_clean_commit(commit: str) -> bool:
    """Whether ``commit`` (as ``git_commit`` gives it) names code that a commit holds exactly."""
    return commit != "unknown" and not commit.endswith("-dirty")


def unclean_commits(record: Union[Record, Dict[str, Any]]) -> List[str]:
    """The commits behind ``record`` (a ``Record``, or a dict with its commit and segments, such as a
    checkpoint's) that are not clean: its own, the one it was resumed from, and each stretch's."""
    if isinstance(record, Record):
        record = record.json()
    commits = [record.get("commit", "unknown")] + [s.get("commit", "unknown") for s in record.get("segments", [])]
    if "resumed_from_commit" in record:
        commits.append(record["resumed_from_commit"])
    return sorted({c for c in commits if not is_clean_commit(c)})


class DirtyTreeError(RuntimeError):
    """A record from uncommitted code, refused by a store that can be committed."""


def inside_git_tree(path: os.PathLike) -> bool:
    """Whether ``path`` (or the folder it would be made in) lies inside a git work tree."""
    p = Path(path).resolve()
    return any((q / ".git").exists() for q in (p, *p.parents))


NO_LOCKS = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}  # a file system without flock


class RunInUseError(RuntimeError):
    """The run is being trained elsewhere: two trainings of one run would overwrite each other's checkpoints."""


_READ: Dict[Path, Tuple[str, Record]] = {}  # path -> (its text, the record parsed): RunStore.read


class RunStore:
    """Finished-run records, keyed by run id (a hash of config + seed)."""

    def __init__(self, root: Optional[os.PathLike] = None):
        self.root = Path(root) if root is not None else Path(os.environ.get("RECDROP_RUNS") or DEFAULT_RUNS)

    def path(self, experiment: str, scale: str, rid: str) -> Path:
        return self.root / experiment / scale / f"{rid}.json"

    def checkpoint_dir(self) -> Path:
        """This store's checkpoints: ``<cache>/checkpoints/<key>``, the key a hash of the store's resolved
        root, so that a scratch store (a rerun into ``RECDROP_RUNS=/tmp/...``) neither resumes another
        store's run, trained by other code, nor deletes its checkpoint on finishing. ``STORE`` in it
        names the root."""
        root = str(self.root.resolve())
        return cache_dir() / "checkpoints" / hashlib.sha256(root.encode()).hexdigest()[:10]

    def checkpoint_path(self, experiment: str, rid: str) -> Path:
        return self.checkpoint_dir() / experiment / f"{rid}.pt"

    @contextlib.contextmanager
    def hold_runs(self, experiment: str, rids: Sequence[str], wait: bool = False) -> Iterator[None]:
        """While training ``rids``: an exclusive lock on each (``<rid>.lock`` beside its checkpoint, by
        ``fcntl.flock``), so that no two processes train one run and write its checkpoint in turn. A run
        another process holds is a RunInUseError, or with ``wait``, is waited for (said first), so that two
        sweeps sharing a store each get the run its first trainer finishes. The locks are taken in run id
        order, so that two groups that share runs cannot wait on each other. The system frees a lock with
        its process, also one that is killed; the files stay, empty of meaning. Where the file system has
        no such locks (some network ones), a warning says so and training goes on."""
        with contextlib.ExitStack() as held:
            named = self.checkpoint_dir() / "STORE"  # which store the hashed folder is, for whoever looks
            if not named.exists():
                named.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(named, f"{self.root.resolve()}\n".encode())
            for rid in sorted(rids):
                path = self.checkpoint_path(experiment, rid).with_suffix(".lock")
                path.parent.mkdir(parents=True, exist_ok=True)
                lock = held.enter_context(open(path, "a+"))
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    lock.seek(0)
                    holder = f"run {experiment}/{rid} is being trained by another process ({lock.read().strip()})"
                    if not wait:
                        raise RunInUseError(f"{holder}, and the two would overwrite each other's checkpoint "
                                            f"{path.with_suffix('.pt')}; let that one end or stop it first") from None
                    say(f"{holder}: waiting for it to end")
                    fcntl.flock(lock, fcntl.LOCK_EX)
                except OSError as e:
                    if e.errno not in NO_LOCKS:
                        raise
                    warnings.warn(f"{path.parent} cannot be locked ({e.strerror}): nothing stops another process from "
                                  f"training run {experiment}/{rid} at the same time")
                    continue
                lock.truncate(0)
                lock.write(f"pid {os.getpid()} on {platform.node()}, since {utc_now()}")
                lock.flush()
            yield

    def refuse_unclean_code(self, commit: str, what: str) -> None:
        """Before ``what`` ("run x is", "3 runs are") starts: a DirtyTreeError where this store's records are
        committed and ``commit``, the code's, is not clean (the store would refuse their records)."""
        if inside_git_tree(self.root) and not is_clean_commit(commit):
            raise DirtyTreeError(f"{what} not started: the code is not a clean commit ({commit}), and the store "
                                 f"{self.root} refuses records of it. Commit recdrop/ and run from a worktree pinned "
                                 "at a commit, or point RECDROP_RUNS at a scratch folder outside git")

    def accepts_checkpoint(self, checkpoint: Dict[str, Any]) -> bool:
        """Whether a run may resume ``checkpoint`` into this store: one whose records are committed takes
        no training by uncommitted code (it would refuse the record)."""
        stretches = {"commit": checkpoint.get("commit", "unknown"), "segments": checkpoint.get("segments", [])}
        return not (inside_git_tree(self.root) and unclean_commits(stretches))

    def is_done(self, record: Optional[Record]) -> bool:
        """Whether a stored ``record`` (None: no record) finishes its run: it is one this store would keep
        now. A store whose records are committed keeps only records of clean code, so a run whose record
        came from uncommitted code is not done (it trains again); a scratch store keeps what any code made."""
        return record is not None and not (inside_git_tree(self.root) and unclean_commits(record))

    def done_record(self, experiment: str, scale: str, rid: str) -> Optional[Record]:
        """The stored record of run ``rid`` where it finishes the run (``is_done``: a diverged run's too),
        else None."""
        record = self.find(experiment, scale, rid)
        return record if self.is_done(record) else None

    def has(self, experiment: str, scale: str, rid: str) -> bool:
        return self.path(experiment, scale, rid).exists()

    def load(self, experiment: str, scale: str, rid: str) -> Record:
        return self.read(self.path(experiment, scale, rid))

    def find(self, experiment: str, scale: str, rid: str) -> Optional[Record]:
        """The stored record of run ``rid``, or None where there is none."""
        return self.load(experiment, scale, rid) if self.has(experiment, scale, rid) else None

    @staticmethod
    def read(path: Path) -> Record:
        """The record at ``path``; one that is not JSON, or not a record, is a ValueError naming it. A
        process parses each record file once (a chapter and the landing page read the same records many
        times): the ``Record`` it gives is shared, for reading; a file whose text has changed is parsed again."""
        path = Path(path)
        text = path.read_text()
        cached = _READ.get(path)
        if cached is not None and cached[0] == text:
            return cached[1]
        try:
            record = Record.from_json(json.loads(text), f"run record {path}")
        except json.JSONDecodeError as e:
            raise ValueError(f"run record {path} is not valid JSON ({e}); delete it to rerun that run") from e
        _READ[path] = (text, record)
        return record

    def has_records(self, experiment: str, scale: str) -> bool:
        """Whether any record of ``experiment`` at ``scale`` is stored (none is read)."""
        return any((self.root / experiment / scale).glob("*.json"))

    def save(self, record: Union[Record, Dict[str, Any]]) -> Path:
        """Write ``record`` (a ``Record``, or the dict the trainer makes of one) atomically. A store inside
        a git work tree (records that can be committed, like ``data/runs``) refuses a record whose code was
        not a clean commit."""
        if isinstance(record, Record):
            record = record.json()
        path = self.path(record["experiment"], record["config"]["scale"], record["run_id"])
        unclean = unclean_commits(record)
        if unclean and inside_git_tree(self.root):
            raise DirtyTreeError(f"run record {path} is not written: it was made by code that is not a clean "
                                 f"commit ({', '.join(unclean)}). Commit recdrop/ and rerun it from a "
                                 "worktree pinned at that commit (from scratch: training by uncommitted code "
                                 "is not resumed into this store), or point RECDROP_RUNS at a scratch folder "
                                 "outside git")
        atomic_write_bytes(path, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
        return path

    def records(self, experiment: str, scale: Optional[str] = None) -> List[Record]:
        """Every stored record of ``experiment`` (at ``scale`` if given): diverged runs' too, and in a store
        whose records are committed, any of uncommitted code (``is_done`` tells those)."""
        folder = self.root / experiment
        pattern = f"{scale}/*.json" if scale else "*/*.json"
        return [self.read(p) for p in sorted(folder.glob(pattern))]
