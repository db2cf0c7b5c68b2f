"""PostgreSQL specifics: migrations applied once (also when replicas race), errors."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from ctxwarden.config import StoreConfig
from ctxwarden.errors import ConfigError, StoreError
from ctxwarden.store import open_store
from ctxwarden.store.postgres_store import MIGRATIONS, PostgresStore
from tests.store.backends import Harness, PostgresHarness


@pytest.fixture
def pg_harness(harness_for: Callable[[str], Harness]) -> PostgresHarness:
    harness = harness_for("postgres")
    assert isinstance(harness, PostgresHarness)
    return harness


def _migrations(harness: PostgresHarness) -> list[tuple[str, float]]:
    rows = harness.sql("SELECT name, applied FROM ctxwarden_migrations ORDER BY name")
    return [(name, applied) for name, applied in rows.fetchall()]


def test_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="postgres store failed to connect"):
        PostgresStore("postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=5")


def test_postgres_without_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"store\.url"):
        open_store(StoreConfig(backend="postgres"))


def test_migrations_are_applied_once_across_opens(pg_harness: PostgresHarness) -> None:
    pg_harness.open().close()
    first = _migrations(pg_harness)
    assert [name for name, _ in first] == [name for name, _ in MIGRATIONS]
    store = pg_harness.open()
    ref = store.put("t", "kept across opens")
    store.close()
    assert _migrations(pg_harness) == first
    reopened = pg_harness.open()
    assert reopened.get("t", ref) == "kept across opens"
    reopened.close()


def test_replicas_opening_together_migrate_once(pg_harness: PostgresHarness) -> None:
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        try:
            barrier.wait(timeout=30)
            store = pg_harness.open()
            assert isinstance(store, PostgresStore)
            stores.append(store)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == []
        assert len(stores) == 4
        assert [name for name, _ in _migrations(pg_harness)] == [name for name, _ in MIGRATIONS]
        ref = stores[0].put("t", "written by one replica")
        assert stores[3].get("t", ref) == "written by one replica"
    finally:
        for store in stores:
            store.close()


def test_errors_after_close_are_translated(pg_harness: PostgresHarness) -> None:
    store = pg_harness.open()
    store.close()
    with pytest.raises(StoreError, match="postgres store failed to store an artifact"):
        store.put("t", "too late")


def test_open_store_opens_postgres(pg_harness: PostgresHarness) -> None:
    store = open_store(StoreConfig(backend="postgres", url=pg_harness.url, max_bytes=1234))
    assert isinstance(store, PostgresStore)
    assert store.max_bytes == 1234
    store.close()


def test_a_dropped_connection_is_opened_again(pg_harness: PostgresHarness) -> None:
    """After the server ends the session (a restart, a failover, pg_terminate_backend)
    the next call reconnects instead of failing with "the connection is closed"."""
    store = pg_harness.open()
    assert isinstance(store, PostgresStore)
    try:
        ref = store.put("t", "before")
        for _ in range(2):
            pid = store._db.info.backend_pid
            pg_harness.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert store.get("t", ref) == "before"
            assert store._db.info.backend_pid != pid
        store.put_state("t", "s", b"x")
        pg_harness.admin.execute("SELECT pg_terminate_backend(%s)", (store._db.info.backend_pid,))
        assert store.put("t", "after") != ref
        pg_harness.admin.execute("SELECT pg_terminate_backend(%s)", (store._db.info.backend_pid,))
        assert store.missing("t", [ref]) == frozenset()
        assert store.get_state("t", "s") == b"x"
    finally:
        store.close()
    with pytest.raises(StoreError, match="postgres store failed to look up an artifact"):
        store.has("t", ref)  # a closed store does not reconnect


def test_a_wait_on_a_row_lock_fails_alone_without_opening_the_breaker(
    pg_harness: PostgresHarness,
) -> None:
    """Another connection (a replica's gc) holds a row lock past the store's timeout:
    the call waiting on it fails, and the next calls of the store still reach the server
    (a cancelled statement would have opened the breaker for breaker_seconds)."""
    import psycopg

    store = PostgresStore(pg_harness.url, timeout=1, breaker_seconds=60)
    try:
        store.put_state("t", "s", b"state")
        text = "some tool output\n" * 100
        ref = store.put("t", text)
        holder = psycopg.connect(pg_harness.url)
        try:
            holder.execute("DELETE FROM ctxwarden_artifacts WHERE tenant = 't'")
            with pytest.raises(StoreError, match="lock timeout"):
                store.put("t", text)
        finally:
            holder.rollback()
            holder.close()
        assert store.get_state("t", "s") == b"state"
        assert store.get("t", ref) == text
    finally:
        store.close()


def test_gc_waits_on_rows_another_connection_holds_within_its_own_timeout(
    pg_harness: PostgresHarness,
) -> None:
    """gc's statements may take GC_STATEMENT_TIMEOUT, and so may its lock waits (the
    store's lock_timeout, under its 1 s statement timeout, would end them at 0.8 s)."""
    import time

    import psycopg

    store = PostgresStore(pg_harness.url, timeout=1, ttl_seconds=1)
    try:
        store.put("t", "hello world " * 10)
        holder = psycopg.connect(pg_harness.url)
        holder.execute("UPDATE ctxwarden_artifacts SET last_used = last_used")  # row locks
        release = threading.Timer(2.0, holder.rollback)
        release.start()
        try:
            started = time.monotonic()
            assert store.gc(now=time.time() + 10) == 1
            assert time.monotonic() - started >= 1.5  # it waited for the rows
        finally:
            release.join()
            holder.close()
    finally:
        store.close()
