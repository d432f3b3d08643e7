"""Typed experiment configs with named scales (``ci``, ``quick``, ``reduced``, ``paper``).

A config is a frozen dataclass whose defaults are the ``paper`` settings; each experiment's
``SCALES`` maps the other scale names to overrides. ``Config.at_scale("quick", epochs=3)`` checks
the scale and every override (unknown field, wrong type) with a clear error.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import typing
from typing import Any, ClassVar, Dict, Optional, Tuple

from .masks import SAMPLINGS, SCALINGS, SCHEMES, check_choice, check_rate

# Smallest first. ``reduced``: the paper's model, optimiser and schedule with cuts of data, size or
# epochs chosen so that the claims can be tested on a CPU (``lm_tables.fit_table``'s conditions); not
# every experiment has it.
# Temporal Order's keeps the paper's model but trains with Adam: the paper's SGD does not leave
# chance within a CPU budget (see TemporalOrderConfig.SCALES).
SCALE_NAMES = ("ci", "quick", "reduced", "paper")


def _type_ok(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in (tuple, list):
        return isinstance(value, (tuple, list))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _is_float_hint(hint) -> bool:
    """``float`` or ``Optional[float]``."""
    if typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return float in args and all(a in (float, type(None)) for a in args)
    return hint is float


@functools.lru_cache(maxsize=None)
def _float_fields(cls) -> Tuple[str, ...]:
    """The fields of config class ``cls`` whose type is ``float`` (or ``Optional[float]``)."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if _is_float_hint(hints[f.name]))


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """Base of every experiment's config. Subclasses set ``experiment`` and ``SCALES``."""

    experiment: ClassVar[str] = ""
    SCALES: ClassVar[Dict[str, Dict[str, Any]]] = {"paper": {}}
    POSITIVE: ClassVar[Tuple[str, ...]] = ()  # fields that must be at least 1
    # How a chapter's config table shows a value that stands for something other than itself (0: all)
    SHOWN_AS: ClassVar[Dict[str, Dict[Any, str]]] = {}
    # Fields added after records were stored, each with the value every earlier record was trained
    # with: a config holding that value hashes as if the field did not exist (``run_id``), so the
    # earlier records keep their ids, and ``from_record`` gives their configs that value back.
    ADDED: ClassVar[Dict[str, Any]] = {}

    scale: str = "paper"  # which preset this config came from (part of the run id)

    @classmethod
    def at_scale(cls, scale: str, **overrides):
        """The config of ``scale`` with ``overrides`` applied; ValueError on anything unknown."""
        if scale not in cls.SCALES:
            raise ValueError(f"scale={scale!r} is not valid for {cls.experiment}; allowed values: "
                             f"{', '.join(map(repr, cls.SCALES))}")
        return cls(scale=scale).replace(**{**cls.SCALES[scale], **overrides})

    def replace(self, **changes):
        """A copy with ``changes``, each checked against the fields and their types."""
        hints = typing.get_type_hints(type(self))
        names = [f.name for f in dataclasses.fields(self)]
        for key, value in changes.items():
            if key not in names:
                raise ValueError(f"{key!r} is not a parameter of {type(self).__name__}; "
                                 f"its parameters are: {', '.join(names)}")
            if not _type_ok(value, hints[key]):
                raise ValueError(f"{type(self).__name__}.{key} must be of type "
                                 f"{getattr(hints[key], '__name__', hints[key])}, got {value!r}")
        changes = {k: tuple(v) if isinstance(v, list) else v for k, v in changes.items()}
        return dataclasses.replace(self, **changes)  # __post_init__ validates

    def __post_init__(self):
        # An int in a float field becomes a float, so that ``lr=1`` and ``lr=1.0`` are one config and
        # one run id (json.dumps writes the int as ``1``). No stored record holds an int there, so no
        # stored run id changes.
        for name in _float_fields(type(self)):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        if self.scale not in SCALE_NAMES:
            raise ValueError(f"scale={self.scale!r} is not valid; allowed values: {', '.join(map(repr, SCALE_NAMES))}")
        self._check_dropout_fields()
        for name in self.POSITIVE:
            if getattr(self, name) < 1:
                raise ValueError(f"{type(self).__name__}.{name} must be positive (>= 1), got {getattr(self, name)!r}")
        self.validate()

    def _check_range(self, name: str, low: Optional[float] = None, high: Optional[float] = None, *,
                     low_open: bool = False, high_open: bool = False, finite: bool = False) -> None:
        """ValueError naming the field, its value and the allowed range unless ``low <= value <= high``
        (``<`` where open; a bound of None is no bound; ``finite``: not inf). NaN is never in range."""
        value = getattr(self, name)
        ok = ((low is None or (value > low if low_open else value >= low))
              and (high is None or (value < high if high_open else value <= high))
              and (not finite or math.isfinite(value)))
        if ok:
            return
        if low is not None and high is not None:
            allowed = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            allowed = f"{'>' if low_open else '>='} {low}"
        else:
            allowed = f"{'<' if high_open else '<='} {high}"
        if finite:
            allowed += " and finite"
        raise ValueError(f"{type(self).__name__}.{name} must be {allowed}, got {value!r}")

    def _check_limit(self, name: str, minimum: int, why: str) -> None:
        """A limit on how much of a split to use: 0 (the whole split) or at least ``minimum`` (``why``)."""
        value = getattr(self, name)
        if value < 0 or 0 < value < minimum:
            raise ValueError(f"{type(self).__name__}.{name} must be 0 (the whole split) or at least {minimum} "
                             f"({why}), got {value!r}")

    def _check_dropout_fields(self) -> None:
        """The fields every experiment shares: rates in [0, 1), and the scheme, sampling and scaling names."""
        names = {f.name for f in dataclasses.fields(self)}
        for name in ("recurrent_dropout", "input_dropout", "output_dropout"):
            if name in names:
                check_rate(f"{type(self).__name__}.{name}", getattr(self, name))
        for name, allowed in (("scheme", SCHEMES), ("sampling", SAMPLINGS), ("scaling", SCALINGS)):
            if name in names:
                check_choice(f"{type(self).__name__}.{name}", getattr(self, name), allowed)

    def validate(self) -> None:
        """Subclasses check value ranges here (raise ValueError)."""

    def to_dict(self) -> Dict[str, Any]:
        return {"experiment": self.experiment, **dataclasses.asdict(self)}

    def id_dict(self) -> Dict[str, Any]:
        """``to_dict`` less the added fields (``ADDED``) that hold the value of the records before them."""
        return {k: v for k, v in self.to_dict().items() if not (k in self.ADDED and v == self.ADDED[k])}

    @classmethod
    def from_record(cls, config: Dict[str, Any]):
        """The config of a stored record's ``config``; a field added after it was stored takes the
        value it was trained with (``ADDED``), not today's default."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {**cls.ADDED, **{k: v for k, v in config.items() if k != "experiment"}}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"a stored {cls.experiment} config has fields {cls.__name__} does not know: "
                             f"{', '.join(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def run_id(config: ExperimentConfig, seed: int) -> str:
    """A short, stable hash of the canonical config and the seed: the key of a run's record."""
    blob = json.dumps({"config": config.id_dict(), "seed": int(seed)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
