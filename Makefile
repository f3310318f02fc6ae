# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Each creates the virtual environment it needs (.venv) from pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test js-deps lint typecheck check bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# compat mode: a plain path in a .pth file. The default editable finder hook costs ~150 ms at every
	# start of refagent, and an editor waits on that before its first answer.
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

# refagent fixes a real bug in a fresh copy of examples/demo-project, driven by a real ACP client. With no
# model configured it plays a built-in scripted session; with OPENAI_API_KEY or OPENAI_BASE_URL, the real model.
demo: $(STAMP)
	$(PY) -m refagent.client.demo --project examples/demo-project

test: $(STAMP)
	$(PY) -m pytest

# The third-party ACP clients tests/e2e/test_real_clients.py drives refagent from (acpx, the TypeScript SDK),
# at the versions pinned in tests/js/package-lock.json. Needs Node.js and npm; the tests skip without them.
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
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache tests/js/node_modules
