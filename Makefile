# Two entry points for a fresh machine (only Python 3.11+ needed):
#   make demo   create .venv, install, replay the bundled real sessions (exact, mask:10, default)
#   make test   create .venv, install, start test services, run ruff, mypy and pytest
# CI (.ci/run) runs `make test` with every service required, then `make replay-check`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck pytest replay-check clean

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

# pytest's exit status is kept; a run that collects no test (5) fails like any other.
pytest: $(BIN)/.installed
	@echo "scripts/with-services.sh $(BIN)/pytest -q"
	@scripts/with-services.sh $(BIN)/pytest -q; status=$$?; \
	case $$status in \
	  0) ;; \
	  1) echo "pytest: tests failed" >&2 ;; \
	  5) echo "pytest: no tests collected, counted as a failure" >&2 ;; \
	  *) echo "pytest: exit $$status (interrupted, internal or usage error)" >&2 ;; \
	esac; \
	exit $$status

test: lint typecheck pytest

# The hand-written scenarios and a strict sample of ../shared/corpus (see the script).
replay-check: $(BIN)/.installed
	$(BIN)/ctxwarden replay --scenarios --strict
	scripts/replay-sample.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
