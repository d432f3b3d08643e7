"""Where the repository's own files live: the checkout this package was imported from."""
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"  # the paper's numbers, our run records and benchmarks (never a dataset)


def cache_dir() -> Path:
    """Where checkpoints, and each machine's measured choices of library, go: ``$RECDROP_CACHE``, else
    ``~/.cache/recdrop``."""
    return Path(os.environ.get("RECDROP_CACHE") or Path.home() / ".cache" / "recdrop")
