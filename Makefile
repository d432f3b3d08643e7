# The README's two commands: `make book` (set up, then build the book) and `make test`
# (set up, then run the tests). `make setup` alone creates .venv with everything installed.
PY := .venv/bin/python
export RECDROP_DATA ?= $(abspath ../shared/data)

.PHONY: setup test demo bench
setup: .venv/.installed
.venv/.installed: pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # a CPU wheel; pyproject.toml keeps a range for users
	$(PY) -m pip install -q -e '.[test]'
	touch $@

test: setup
	TQDM_DISABLE=1 $(PY) -m pytest -q tests

demo: setup
	$(PY) -m recdrop.demo

bench: setup
	$(PY) benchmarks/bench_layers.py
