"""ARCHITECTURE.md held against the code (issue 47): every module it names exists, and it names every
module of the package."""
import importlib
import re
from pathlib import Path

import recdrop

ROOT = Path(recdrop.__file__).parent
PAGE = ROOT.parent / "ARCHITECTURE.md"


def package_modules():
    names = set()
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names - {"recdrop"}


def test_the_architecture_page_names_every_module_and_only_modules_that_exist():
    named = set(re.findall(r"`(recdrop(?:\.[A-Za-z_0-9]+)+)", PAGE.read_text()))
    modules = package_modules()
    # a name that is not a module is one of a module's functions or classes (``recdrop.train.train_group``)
    missing = [n for n in named - modules if n.rsplit(".", 1)[0] not in modules
               or not hasattr(importlib.import_module(n.rsplit(".", 1)[0]), n.rsplit(".", 1)[1])]
    assert not missing, "named on the page but not in the code: " + ", ".join(sorted(missing))
    assert not modules - named, "modules the page does not name: " + ", ".join(sorted(modules - named))


def test_the_files_the_page_points_to_exist():
    for path in re.findall(r"`((?:tests|data|book|benchmarks|recdrop)/[^`*<>]+)`", PAGE.read_text()):
        assert (ROOT.parent / path).exists(), path
