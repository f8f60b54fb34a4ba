# RSI Arena — `make demo` runs the arena on embedded defaults; `make test` runs the whole suite
# on the real parts (PostgreSQL, Redis, model servers, headless Chromium).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/arena
TEST_REDIS_URL ?= redis://127.0.0.1:6379/1
PYTEST_ARGS ?=
# The suite waits on servers, Slurm and subprocesses far more than on the two cores. Six
# saturated them (13,800 s of test time against 6,600 at four; probes and pages timed out).
TEST_WORKERS ?= 4

.PHONY: demo test test-fast venv services lint typecheck layers clean

# torch first, from the CPU wheel on disk: a looser pin would pull a multi-GB CUDA build.
# uv installs the same pinned tree as pip (constraints.txt) in ~12 s instead of ~130 s on a
# fresh machine; it does not read pip's configuration, so pip's find-links (where the CPU wheel
# is) is handed to it. Should uv fail, pip does the same install.
UV_VERSION := 0.13.9
FIND_LINKS = $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_PIP = $(BIN)/uv pip install --python $(BIN)/python --quiet -c constraints.txt $(FIND_LINKS:%=--find-links %)
PIP = $(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if $(PIP) uv==$(UV_VERSION) && $(UV_PIP) torch==2.13.0 && $(UV_PIP) -e '.[dev]'; then :; else \
	  echo "[venv] uv could not install the environment: installing with pip"; \
	  $(PIP) torch==2.13.0 && $(PIP) -e '.[dev]'; fi
	@touch $@

venv: $(STAMP)

demo: venv
	$(BIN)/python manage.py demo

services:
	bash infra/scripts/test-services.sh

# On TEST_WORKERS pytest-xdist workers, then the `serial` tests alone (infra/scripts/run-tests.sh).
test: venv services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) TEST_WORKERS=$(TEST_WORKERS) \
	  bash infra/scripts/run-tests.sh $(BIN)/python $(PYTEST_ARGS)

# The suite without the slow end-to-end tests, for a quick loop while editing.
test-fast: venv services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) TEST_WORKERS=$(TEST_WORKERS) \
	  TEST_MARK='not slow' bash infra/scripts/run-tests.sh $(BIN)/python $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy, strict on the pure modules listed in pyproject.toml ([tool.mypy]).
typecheck: venv
	$(BIN)/mypy
	$(BIN)/mypy --config-file mypy-apps.ini

# The import contracts in .importlinter (DESIGN.md section 3's dependency direction).
layers: venv
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache
