# Two entry points for a fresh machine (only Python 3.11+ needed):
#   make demo   create .venv, install, condense the bundled real sessions
#   make test   create .venv, install, start test services, run ruff, mypy and pytest
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/ctxwarden demo

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests benchmarks

typecheck: $(BIN)/.installed
	$(BIN)/mypy

pytest: $(BIN)/.installed
	scripts/with-services.sh $(BIN)/pytest -q

test: lint typecheck pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
