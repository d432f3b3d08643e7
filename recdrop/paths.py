"""Where the repository's own files live: the checkout this package was imported from."""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"  # the paper's numbers, our run records and benchmarks (never a dataset)
