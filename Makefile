# The README's two commands: `make book` (set up, then build the book) and `make test`
# (set up, then run the tests). `make setup` alone creates .venv with everything installed.
PY := .venv/bin/python
# torch is pinned to 2.13.0 (pyproject.toml keeps a range for users). PyPI serves its CUDA build, several
# GB; TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU wheel from PyTorch's own index.
TORCH_INDEX ?=
export RECDROP_DATA ?= $(abspath ../shared/data)

.PHONY: setup test book demo bench bench-cpu
setup: .venv/.installed
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# ruff over the Python files, notebooks aside (pyproject.toml's rules, lines up to 120); unit tests;
# every notebook at `ci` scale under nbval (training into a scratch store, so the committed records
# are untouched); the book build from the committed records; then every page of the built book in
# headless Chromium.
# The unit tests run in two workers (as many as the cores, up to 2), a file each at a time, one thread
# each, and list the slowest; the notebooks in two workers, a notebook each at a time; the book's
# notebooks as many at once as there are cores, up to 4.
test: setup
	$(PY) -m ruff check recdrop tests benchmarks examples book/_ext notebooks/conftest.py
	TQDM_DISABLE=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --maxprocesses=2 --dist loadfile --durations=40 \
	  tests --ignore=tests/browser
	scratch=$$(mktemp -d) && TQDM_DISABLE=1 OMP_NUM_THREADS=1 RECDROP_RUNS=$$scratch/runs \
	  RECDROP_CACHE=$$scratch/cache $(PY) -m pytest -q -n 2 --dist loadscope --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=600 notebooks/
	$(PY) -m recdrop.book
	$(PY) -m pytest -q tests/browser

# The main job: execute every notebook from the stored records and build the HTML book.
book: setup
	$(PY) -m recdrop.book

demo: setup
	$(PY) -m recdrop.demo

bench: setup
	$(PY) benchmarks/bench_layers.py

# The CPU benchmarks of the Performance page, under this CPU's kind, from a clean commit
bench-cpu: setup
	PY=$(PY) bash benchmarks/cpu.sh
