"""Shared fixtures: fixture requests, the bundled sessions and the optional full corpus."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import settings

from ctxwarden.io import bundled_sessions
from ctxwarden.memo import DEFAULT_MEMO_BUDGET, set_memo_budget
from ctxwarden.telemetry.logs import LIBRARY_LOGGERS

settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off"):
    # CI runs the same examples every time (a red CI must mean a change broke
    # something); runs elsewhere draw new ones, which is how hypothesis finds new bugs
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = Path(
    os.environ.get("CTXWARDEN_CORPUS", str(ROOT.parent / "shared" / "corpus" / "sessions"))
)


def corpus_files() -> list[Path]:
    """Every session of ../shared/corpus, or [] when it is not there."""
    if not CORPUS.is_dir():
        return []
    return sorted(CORPUS.glob("*.json.gz"))


def load_fixture(name: str) -> Any:
    return orjson.loads((FIXTURES / "requests" / name).read_bytes())


@pytest.fixture
def bundled() -> list[Path]:
    return bundled_sessions()


@pytest.fixture
def no_memo_budget() -> Iterator[None]:
    """No process memo budget during the test: each memo has its own bound."""
    set_memo_budget(None)
    try:
        yield
    finally:
        set_memo_budget(DEFAULT_MEMO_BUDGET)


def pytest_report_header(config: pytest.Config) -> str:
    files = corpus_files()
    if files:
        return f"ctxwarden corpus: {len(files)} sessions at {CORPUS}"
    return (
        f"ctxwarden corpus: NOT FOUND at {CORPUS}; "
        "corpus-wide tests run on the bundled sessions only"
    )


@pytest.fixture
def memory_engine() -> Iterator[Any]:
    from ctxwarden import Engine, EngineConfig

    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    yield engine
    engine.close()


@pytest.fixture
def restored_loggers() -> Iterator[None]:
    """Undo :func:`~ctxwarden.telemetry.logs.configure_json_logging` on the loggers it
    touches (a command's handler on a captured stream would outlive the test, and the
    function is idempotent: a later test would get that handler back)."""
    names = ("ctxwarden", *LIBRARY_LOGGERS)
    saved = {n: (logging.getLogger(n).level, logging.getLogger(n).propagate) for n in names}
    handlers = {n: list(logging.getLogger(n).handlers) for n in names}
    yield
    for name in names:
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers[name]
        logger.level, logger.propagate = saved[name]
