"""Fixtures shared by the test modules."""
import pytest

from recdrop.store import RunStore


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A results store in a temporary folder, with checkpoints in one beside it."""
    monkeypatch.setenv("RECDROP_CACHE", str(tmp_path / "cache"))
    return RunStore(tmp_path / "runs")
