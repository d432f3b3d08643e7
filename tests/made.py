"""Records and rows made by hand for the tests of what reads them: only the fields a test cares about
need giving; the rest get plain values."""
import itertools

from recdrop.records import Record, Row

_ids = itertools.count()

RECORD_DEFAULTS = {"experiment": "x", "run_id": "r", "seed": 0, "config": {"scale": "paper"}, "metrics": {},
                   "curves": [], "wall_time_s": 1.0, "finished": "2026-01-01T00:00:00+00:00", "commit": "abc",
                   "hardware": "cpu", "device": "cpu", "torch": "2.13", "python": "3.11"}


def record(**fields) -> Record:
    """A ``Record`` with ``fields``, the required ones it lacks filled in."""
    return Record.from_json({**RECORD_DEFAULTS, **fields})


_record = record  # ``row``'s keyword of that name hides it


def row(seed=0, run_id=None, config=None, record=None, diverged=None, done=None, **labels) -> Row:
    """A ``Row`` as ``grid_rows`` makes one, from a grid row's old dict form: ``record`` a dict of the record's
    fields (or a ``Record``, or None), ``diverged`` where a stored record says the run diverged; the other
    keywords are the cell's labels. A row without ``run_id`` gets one of its own."""
    if isinstance(record, dict):
        record = _record(**{"seed": seed, **record})
    if diverged:
        record = _record(seed=seed, diverged=diverged)
    run_id = run_id if run_id is not None else f"run{next(_ids)}"
    return Row(labels, seed, run_id, config, record, record is not None if done is None else done)


def stored(store, experiment: str, grid_row: Row, **fields) -> Record:
    """Write a record of ``grid_row``'s run (``fields`` beside the plain values) into ``store``; the record."""
    rec = record(experiment=experiment, run_id=grid_row.run_id, seed=grid_row.seed,
                 config={"scale": grid_row.config.scale}, **fields)
    store.save(rec)
    return rec
