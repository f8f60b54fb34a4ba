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

.PHONY: demo test test-fast venv services lint typecheck layers clean

# torch first, from the CPU wheel on disk: a looser pin would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	@touch $@

venv: $(STAMP)

demo: venv
	$(BIN)/python manage.py demo

services:
	bash infra/scripts/test-services.sh

test: venv services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

# The suite without the slow end-to-end tests, for a quick loop while editing.
test-fast: venv services
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

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
