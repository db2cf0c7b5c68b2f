"""A SQLite store whose write lock another connection holds (an operator's ``sqlite3``
shell in a transaction, a stuck process): a write waits ``store.timeout_seconds`` (the
busy timeout; it was a fixed 10 s), and that failure opens the store's breaker, so the
other store calls of the condense fail at once instead of each waiting again (a
condense took 30-70 s through the proxy). The breaker closes after breaker_seconds.
A constraint error, a damaged row or a removed file does not open it."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.config import StoreConfig
from ctxwarden.errors import ArtifactCorrupted, StoreError
from ctxwarden.store import SqliteStore, Store, open_store
from tests.passes.convo import FORCE, finds

TIMEOUT = 0.3
BOUND = 2.5
"""Seconds a condense may take with the lock held: one TIMEOUT and slack for a slow
machine (the fixed 10 s busy timeout took 10 s per write, at least 30 s)."""


@contextmanager
def write_locked(path: Path) -> Iterator[sqlite3.Connection]:
    """The write lock of the database at ``path`` held by another connection."""
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        other.execute("ROLLBACK")
        other.close()


def _timed(work: Any) -> tuple[float, Any]:
    started = time.monotonic()
    outcome = work()
    return time.monotonic() - started, outcome


def _failed_put(store: Store) -> float:
    """Seconds a put took to fail with a StoreError."""
    started = time.monotonic()
    with pytest.raises(StoreError, match="sqlite store failed to store an artifact"):
        store.put("t", "x")
    return time.monotonic() - started


def test_a_condense_under_a_held_lock_waits_one_timeout_then_recovers(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = {"path": str(path), "timeout_seconds": TIMEOUT, "breaker_seconds": 1.0}
    engine = Engine(EngineConfig(store=store, pipeline=FORCE))
    assert engine.condense(finds(3), session="s").changed
    with write_locked(path):
        # three new outputs to store, then the session state: four writes
        taken, locked = _timed(lambda: engine.condense(finds(6), session="s"))
        again, still = _timed(lambda: engine.condense(finds(7), session="s"))
    assert taken < BOUND, f"a condense under a held lock took {taken:.1f} s"
    assert again < BOUND, f"a condense with the breaker open took {again:.1f} s"
    for outcome, wire in ((locked, finds(6)), (still, finds(7))):
        assert outcome.request == wire and not outcome.changed  # sent as it came
        assert outcome.report["fallback_reason"].startswith("StoreError: sqlite store failed")
    time.sleep(1.2)  # the lock is gone and breaker_seconds passed
    after = engine.condense(finds(8), session="s")
    assert after.changed and after.report["fallback_reason"] is None
    assert not after.report["segment_failures"]
    engine.close()


def test_a_held_lock_fails_one_write_after_the_timeout_then_every_call_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, timeout=TIMEOUT, breaker_seconds=60)
    ref = store.put("t", "written before the lock")
    with write_locked(path):
        taken = _failed_put(store)
        assert TIMEOUT * 0.5 < taken < BOUND  # it waited for the lock, about once
        expected = "sqlite store failed to write session state: a call found the database"
        with pytest.raises(StoreError, match=expected):  # the breaker is open for writes
            store.put_state("t", "s0", b"state")
        # helper-138: a read refreshing last use skips the refresh under the lock at once
        taken, text = _timed(lambda: store.get("t", ref))
        assert text == "written before the lock" and taken < TIMEOUT
        assert store.missing("t", [ref, "cw:000000000000"]) == {"cw:000000000000"}
        with pytest.raises(StoreError, match="failed to write session state"):
            store.put_state("t", "s", b"state")
        with pytest.raises(StoreError, match="failed to collect garbage"):
            store.gc()
        # helper-137: pure reads never wait for a writer (WAL) and skip the breaker, so
        # the proxy's readiness probe (a state read) does not flap while a lock is held
        taken, state = _timed(lambda: store.get_state("t", "none"))
        assert state is None and taken < BOUND
        assert store.has("t", ref) and store.stats()["artifacts"] == 1
    with pytest.raises(StoreError, match="not tried again yet"):
        store.put("t", "y")  # open for breaker_seconds, lock or not
    store._breaker._open_until = 0.0  # breaker_seconds passed
    assert store.get("t", ref) == "written before the lock"
    store.put_state("t", "s", b"state")
    assert store.get_state("t", "s") == b"state"
    store.close()


def test_without_a_cooldown_every_call_waits_and_is_tried(tmp_path: Path) -> None:
    """A store made directly (breaker_seconds 0) tries every call, each bounded."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, timeout=TIMEOUT)
    with write_locked(path):
        for _ in range(2):
            taken = _failed_put(store)
            assert TIMEOUT * 0.5 < taken < BOUND
    store.put("t", "x")
    store.close()


def test_a_damaged_row_or_a_constraint_error_leaves_the_breaker_closed(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, timeout=TIMEOUT, breaker_seconds=60)
    ref = store.put("t", "an original")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("UPDATE artifacts SET body=? WHERE ref=?", (b"damaged", ref))
    with pytest.raises(ArtifactCorrupted):
        store.get("t", ref)
    other.execute("CREATE TRIGGER refuse BEFORE INSERT ON sessions BEGIN "
                  "SELECT RAISE(ABORT, 'refused'); END")  # fmt: skip
    with pytest.raises(StoreError, match="refused"):
        store.put_state("t", "s", b"state")  # a constraint error of a usable file
    other.execute("DROP TRIGGER refuse")
    other.close()
    store.put_state("t", "s", b"state")  # tried: the breaker stayed closed
    assert store.put("t", "an original") == ref  # and the damaged copy heals
    assert store.get("t", ref) == "an original"
    store.close()


@pytest.mark.parametrize(
    ("name", "opens"),
    [
        ("SQLITE_BUSY", True),
        ("SQLITE_BUSY_TIMEOUT", True),
        ("SQLITE_LOCKED", True),
        ("SQLITE_IOERR", True),
        ("SQLITE_IOERR_FSYNC", True),
        ("SQLITE_BUSY_SNAPSHOT", False),  # at once, no wait: the next write succeeds
        ("SQLITE_FULL", False),
        ("SQLITE_READONLY", False),
        ("SQLITE_CORRUPT", False),
        ("SQLITE_CONSTRAINT_PRIMARYKEY", False),
    ],
)
def test_which_errors_open_the_breaker(name: str, opens: bool) -> None:
    from ctxwarden.store.sqlite import _is_outage

    error = sqlite3.OperationalError("x")
    error.sqlite_errorname = name
    assert _is_outage(error) is opens
    integrity = sqlite3.IntegrityError("x")
    integrity.sqlite_errorname = name
    assert not _is_outage(integrity)


def test_open_store_gives_sqlite_the_configured_timeout_and_cooldown(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    config = StoreConfig(path=str(path), timeout_seconds=TIMEOUT, breaker_seconds=3)
    store = open_store(config)
    with write_locked(path):
        taken = _failed_put(store)
    assert taken < BOUND  # the fixed 10 s busy timeout is gone
    assert store._breaker.cooldown == 3  # type: ignore[attr-defined]
    store.close()
    from ctxwarden.store.sqlite import DEFAULT_TIMEOUT

    default = SqliteStore(tmp_path / "default.sqlite3")
    assert default.timeout == DEFAULT_TIMEOUT == StoreConfig().timeout_seconds
    default.close()


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("inf"), float("nan")])
def test_a_timeout_that_cannot_bound_a_wait_is_refused(tmp_path: Path, timeout: float) -> None:
    with pytest.raises(StoreError, match="sqlite store needs a positive, finite timeout"):
        SqliteStore(tmp_path / "store.sqlite3", timeout=timeout)
    assert not (tmp_path / "store.sqlite3").exists()  # refused before anything was made
