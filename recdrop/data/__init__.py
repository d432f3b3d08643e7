"""Dataset loaders, one module per dataset, with checksum verification shared by all (``files``)."""
from .files import DatasetError, data_root, verified_files

__all__ = ["DatasetError", "data_root", "verified_files"]
