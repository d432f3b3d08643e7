"""The two types the machinery above the trainer reads: a run's stored ``Record``, and a grid's ``Row``.

A ``Record`` is made from the JSON the trainer wrote by ``Record.from_json``, which checks its fields
(``RunStore.read`` reads the store's files so; the campaign's ``--unpack`` reads a pack's); a ``Row`` is
made by ``sweep.grid_rows`` (the campaign's ``Pending`` extends one it gives). Everything above (the
runner, reports, chapters, the book) reads their attributes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

# When cuDNN's TF32 was turned off by default (``train.set_precision``): before it, a run on a GPU whose
# layers took torch.nn's path (no recurrent dropout: cuDNN) computed in TF32 there, unrecorded
CUDNN_TF32_UNTIL = "2026-11-25T20:03:39"


def hardware_as_written_now(stored: str) -> str:
    """A stored ``hardware`` as ``store.hardware`` writes it now: records and benchmarks of one thread made
    before the singular say "(1 threads)"."""
    return str(stored).replace("(1 threads)", "(1 thread)")


@dataclasses.dataclass(frozen=True)
class Record:
    """A finished (or diverged) run as the store holds it, its fields those of the JSON file.

    An optional field is None where the file does not have it (the format writes no nulls), so that
    ``json()`` gives back the file's fields exactly. Shared by every reader of the file in a process
    (``RunStore.read`` parses it once): read it, do not change its dicts."""

    experiment: str
    run_id: str
    seed: int
    config: Dict[str, Any]  # ``ExperimentConfig.to_dict()``, as JSON holds it (tuples as lists)
    metrics: Dict[str, Any]  # the experiment's final numbers ({} where training diverged)
    curves: List[Dict[str, Any]]  # one dict an epoch
    wall_time_s: float
    finished: str  # UTC, ISO 8601
    commit: str  # of the code that ran its last stretch (``store.git_commit``)
    hardware: str
    device: str
    torch: str
    python: str
    diverged: Optional[Dict[str, Any]] = None  # where the loss stopped being finite: epoch, batch, loss
    segments: Optional[Tuple[Dict[str, Any], ...]] = None  # each stretch of a resumed run: hardware, commit, epochs
    resumed_from_commit: Optional[str] = None  # a resumed run's: the commit of its checkpoint (``segments`` has each)
    group: Optional[List[str]] = None  # the run ids it trained with as one group
    precision: Optional[str] = None  # "tf32" or "bf16" where not float32
    step: Optional[str] = None  # "cuda-graph" where the whole step was one CUDA graph
    path: Optional[str] = None  # the layers' path in training (``train.layer_paths``)
    switches: Optional[Dict[str, str]] = None  # recdrop's environment switches set (``route.switches``)

    @property
    def scale(self) -> str:
        return self.config["scale"]

    @property
    def stretches(self) -> Tuple[Dict[str, Any], ...]:
        """The record itself, then each stretch of its training: where hardware (as written now,
        ``hardware_as_written_now``), torch, commit and precision are read, so that a resumed run counts each."""
        return tuple({**part, "hardware": hardware_as_written_now(part["hardware"])} if "hardware" in part else part
                     for part in (self.json(), *(self.segments or ())))

    @property
    def precisions(self) -> Tuple[str, ...]:
        """The precision of each of its ``stretches``: the one a record names ("tf32", "bf16"), else
        "float32"; but "cudnn-tf32" for a run on a GPU finished before ``CUDNN_TF32_UNTIL`` without
        recurrent dropout, whose layers ran cuDNN's kernels with torch's default then, TF32. A stretch has
        no time of its own, so each is dated by the record's ``finished``: a resumed run whose early
        stretch ran before that time and whose last ran after would count that stretch as float32. No
        stored record is such a run, and no checkpoint from before then is kept to make one."""
        cudnn = self.finished < CUDNN_TF32_UNTIL and not self.config.get("recurrent_dropout")
        return tuple(part.get("precision") or ("cudnn-tf32" if cudnn and str(part.get("device", "")).startswith("cuda")
                                               else "float32") for part in self.stretches)

    @classmethod
    def from_json(cls, data: Dict[str, Any], source: str = "a run record") -> "Record":
        """The record a parsed JSON file holds; a ValueError naming ``source`` where a field is missing
        or unknown."""
        if not isinstance(data, dict):
            raise ValueError(f"{source} is not a JSON object but {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        missing = sorted(n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in data)
        if unknown or missing:
            raise ValueError(f"{source} is not a run record this code reads: "
                             + "; ".join(part for part in (f"unknown fields {unknown}" if unknown else "",
                                                           f"missing fields {missing}" if missing else "") if part))
        if "segments" in data:
            data = {**data, "segments": tuple(data["segments"])}
        return cls(**data)

    def json(self) -> Dict[str, Any]:
        """The record as its JSON file holds it (``from_json``'s inverse): the optional fields it has."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING or value is not None:
                out[f.name] = list(value) if f.name == "segments" else value
        return out


@dataclasses.dataclass
class Row:
    """One run of a grid: its cell's ``labels`` (``row["scheme"]`` reads one), seed, run id and config,
    and what the store holds of it (``stored``), and whether that finishes the run (``done``,
    ``RunStore.is_done``: a record of a diverged run counts; one from uncommitted code does not, in a
    store that is committed)."""

    labels: Dict[str, Any]
    seed: int
    run_id: str
    config: Any  # the run's ``ExperimentConfig``
    stored: Optional[Record] = None
    done: bool = False

    @property
    def record(self) -> Optional[Record]:
        """Its stored record where the run finished; None where it is not run, or diverged."""
        return None if self.stored is None or self.stored.diverged else self.stored

    @property
    def diverged(self) -> Optional[Dict[str, Any]]:
        """Where its training diverged (epoch, batch and loss); None where it did not, or is not run."""
        return self.stored.diverged if self.stored is not None else None

    @property
    def metrics(self) -> Dict[str, Any]:
        """Its record's metrics; {} where it has no finished record."""
        return self.record.metrics if self.record is not None else {}

    def __getitem__(self, label: str) -> Any:
        try:
            return self.labels[label]
        except KeyError:
            hint = f"; read row.{label}" if hasattr(self, label) else ""  # a run's field, not a label
            raise KeyError(f"{label!r} is not a label of this row "
                           f"(its labels: {', '.join(self.labels)}){hint}") from None

    def cell(self, keys) -> Tuple[Any, ...]:
        """The values of the labels ``keys``, in order."""
        return tuple(self.labels[k] for k in keys)
