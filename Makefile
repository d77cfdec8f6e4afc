# Tempora — every entry point a user needs. `make install` builds .venv/ (editable install);
# every other target depends on it, so `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install test bench demo demo-models lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest -q tests

bench: install
	$(PY) bench/bench_sim.py
	$(PY) bench/bench_trace.py

demo-models: install
	$(PY) -m tempora_trace.models.train_demo --out src/tempora_trace/models/weights

lint: install
	$(PY) -m compileall -q src tests bench
	@! grep -rEn '^\s*(import torch|from torch)' src/tempora_sim src/tempora_schema && echo "tempora_sim/tempora_schema are torch-free"

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
