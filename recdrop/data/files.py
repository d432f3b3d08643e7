"""Finding and verifying dataset files under ``$RECDROP_DATA``.

Datasets are never committed. Each loader names its files; ``verified_files`` finds them under
``$RECDROP_DATA/<dataset>/``, checks each against the SHA-256 sums shipped with recdrop
(``recdrop/data/SHA256SUMS``, the same as the data folder's), and fails with a message naming the
missing or corrupt file and where to get it. Given ``download_urls`` (a loader passes its public
mirror's when called with ``download=True``), a missing file is fetched, then verified like any other.
"""
from __future__ import annotations

import hashlib
import os
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, Optional

from ..paths import REPO_ROOT
from ..store import atomic_write_bytes

SUMS_FILE = Path(__file__).with_name("SHA256SUMS")


class DatasetError(FileNotFoundError):
    """A dataset file is missing or does not match its checksum."""


def data_root() -> Path:
    """``$RECDROP_DATA``, else ``../shared/data`` beside the repository."""
    env = os.environ.get("RECDROP_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def expected_sums() -> Dict[str, str]:
    sums = {}
    for line in SUMS_FILE.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.strip()] = digest
    return sums


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified_files(dataset: str, names: Iterable[str], source: str, root: Optional[Path] = None,
                   download_urls: Optional[Dict[str, str]] = None) -> Dict[str, Path]:
    """Paths of ``dataset``'s files ``names``, each verified against its SHA-256 sum.

    ``source`` says where the dataset comes from (shown when a file is missing);
    ``download_urls`` (name -> URL), when given, are fetched for missing files.
    """
    folder = Path(root) if root is not None else data_root() / dataset
    sums = expected_sums()
    paths = {}
    for name in names:
        path = folder / name
        if not path.exists() and download_urls and name in download_urls:
            with urllib.request.urlopen(download_urls[name]) as response:  # noqa: S310 (a public mirror)
                atomic_write_bytes(path, response.read())  # never a partial file under the final name
        if not path.exists():
            raise DatasetError(f"{dataset}: {path} is missing. Get it from {source} (see SOURCE.md in the "
                               f"dataset folder), put it in {folder}/, or set RECDROP_DATA to the folder that "
                               f"holds {dataset}/.")
        want = sums.get(f"{dataset}/{name}")
        if want is None:
            raise DatasetError(f"{dataset}/{name} has no checksum in {SUMS_FILE}")
        got = sha256(path)
        if got != want:
            raise DatasetError(f"{dataset}: {path} is corrupt or a different version (SHA-256 {got[:16]}..., "
                               f"expected {want[:16]}...). Replace it with the file from {source}.")
        paths[name] = path
    return paths
