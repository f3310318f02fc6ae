# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment it needs (.venv) from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# compat mode: a plain path in a .pth file. The default editable finder hook costs ~150 ms at every
	# start of refagent, and an editor waits on that before its first answer.
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/minimal_client.py "Hello! What can you do?"

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check refagent tests benchmarks examples
	$(VENV)/bin/ruff format --check refagent tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict refagent

check: lint typecheck test

bench: $(STAMP)
	$(PY) benchmarks/startup.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
