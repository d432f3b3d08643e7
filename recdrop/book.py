"""Build the book: execute every notebook with papermill from the stored records, then Jupyter Book.

    python -m recdrop.book            # render the best stored scale of each table, build HTML
    python -m recdrop.book --scale ci --train   # train the `ci` grids, then build from them

Each notebook is executed into ``book/executed/`` (not committed) with ``scale`` set to the scale its
chapter shows (``chapter_scale``: for a table, the largest at which every cell has run; else the
largest with stored runs; ``paper`` > ``reduced`` > ``quick`` > ``ci``) and ``train=False``; a
table with no stored runs at all is rendered at ``quick`` scale with every cell marked "not yet
run"; several notebooks at once (``--jobs``: each in its own kernel). Then ``jupyter-book build``
runs with warnings as errors on a clean ``_build``.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .config import SCALE_NAMES
from .experiments import CHAPTERS, EXPERIMENTS
from .paths import REPO_ROOT
from .report import stored_seeds, verdict_rows
from .store import RunStore
from .sweep import stored_rows

NOTEBOOKS = {name: c.notebook for name, c in CHAPTERS.items()}  # chapter -> notebook, in book order


def complete_scale(experiment: str, grid: str = "table", store: RunStore | None = None) -> str | None:
    """The largest scale at which every cell of the paper's table has run (``report.verdict_rows`` of
    the experiment's comparison: the checks beyond the paper, like Table 3's batch size, not needed),
    or every cell of ``grid`` for an experiment without one; None where no scale is complete."""
    e = EXPERIMENTS[experiment]
    for scale in reversed(SCALE_NAMES):
        rows = stored_rows(experiment, scale, grid, store)
        if not rows:
            continue
        if e.comparison is not None:
            if all(j.ran for j in verdict_rows(e.comparison(rows))["verdict"]):
                return scale
        elif {r.config for r in rows} == {r.config for r in rows if r.done}:
            return scale
    return None


def chapter_scale(name: str, store: RunStore | None = None) -> str | None:
    """The scale chapter ``name`` shows: for a table's chapter (``Chapter.complete``) the largest scale
    where every cell of its table has run (``complete_scale``), where there is one; else the largest
    scale with stored runs of its grids (with enough seeds in a cell), or None. Records that match no
    cell of a grid (a scale since redefined) do not count."""
    chapter = CHAPTERS[name]
    if chapter.complete and chapter.grids:
        full = complete_scale(*chapter.grids[0], store=store)
        if full:
            return full
    for scale in reversed(SCALE_NAMES):  # largest first: a grid's rows are built only for the scales tried
        if any(scale not in EXPERIMENTS[e].config.SCALES for e, _ in chapter.grids):
            continue  # a chapter drawing on several experiments shows a scale that all of them have
        for experiment, grid in chapter.grids:
            rows = stored_rows(experiment, scale, grid, store) or []
            seeds_per_cell = Counter(r.config for r in rows if r.record)
            if seeds_per_cell and max(seeds_per_cell.values()) >= chapter.min_seeds:
                return scale
    return None


def chapter_seeds(name: str, scale: str, store: RunStore | None = None) -> list[int]:
    """The seeds chapter ``name`` shows at ``scale``: every seed stored there for its grids' experiments."""
    return sorted({s for e, _ in CHAPTERS[name].grids for s in stored_seeds(e, scale, store)})


def notebook_scale(name: str) -> str:
    """The scale a chapter is rendered at: ``chapter_scale``, else quick."""
    return chapter_scale(name) or "quick"


def execute_notebooks(scale: str | None = None, train: bool = False, jobs: int = 1) -> None:
    """Execute every chapter's notebook into ``book/executed/``, ``jobs`` at once."""
    out_dir = REPO_ROOT / "book" / "executed"
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TQDM_DISABLE", "1")
    work = []
    for experiment, nb in NOTEBOOKS.items():
        params = {"scale": scale or notebook_scale(experiment), "train": train}
        if not train and CHAPTERS[experiment].grids:  # every seed stored at that scale
            params["seeds"] = chapter_seeds(experiment, params["scale"])
        work.append((nb, params, out_dir / Path(nb).name))
    if jobs <= 1:
        for item in work:
            execute_notebook(*item)
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for _ in pool.map(execute_notebook, *zip(*work)):
            pass  # an error in one is raised here


def execute_notebook(nb: str, params: dict, out: Path) -> None:
    """One notebook executed by papermill with ``params``, into ``out``, as a page (``thin_page``)."""
    import papermill

    print(f"executing {nb} with {params}", flush=True)
    papermill.execute_notebook(str(REPO_ROOT / nb), str(out), parameters=params, kernel_name="python3",
                               cwd=str(REPO_ROOT), progress_bar=False)
    thin_page(out)


def thin_page(path: Path) -> None:
    """A rendered chapter shows its text, tables and figures: the parameters cells (the notebook's own and
    papermill's injected one) are removed (the stamp says the scale, seeds and hardware), and every other
    code cell's input is folded behind a toggle, for the reader who wants the one call behind a table."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = [t for t in cell.metadata.get("tags", []) if t != "hide-cell"]
        if cell.cell_type != "code":
            continue
        if "parameters" in tags or "injected-parameters" in tags:
            tags.append("remove-cell")
        elif not {"remove-cell", "remove-input", "hide-input"} & set(tags):
            tags.append("hide-input")
        cell.metadata["tags"] = tags
    nbformat.write(nb, path)


def build_html() -> Path:
    build = REPO_ROOT / "_build"
    shutil.rmtree(build, ignore_errors=True)  # incremental builds can hide warnings
    cmd = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(REPO_ROOT), "-W", "-n", "--keep-going"]
    subprocess.run(cmd, check=True, cwd=REPO_ROOT)
    return build / "html" / "index.html"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recdrop.book", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=SCALE_NAMES, help="render this scale for every table")
    ap.add_argument("--train", action="store_true", help="train missing runs (default: render stored ones)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="notebooks executed at once (default: one per CPU up to 4; one with --train)")
    args = ap.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    jobs = args.jobs or (1 if args.train else min(4, os.cpu_count() or 1))
    execute_notebooks(args.scale, args.train, jobs)
    index = build_html()
    print(f"the book is at {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
