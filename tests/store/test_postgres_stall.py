"""PostgreSQL: bounded waits (a stalled server is a StoreError, never a hang), the
timeouts a URL sets win, and gc's cap trim spares a row refreshed while it ran."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from ctxwarden.errors import StoreError
from tests.store.backends import PostgresHarness, make_harness
from tests.store.stall import bounded, silent_server, stopped

psycopg = pytest.importorskip("psycopg")

from ctxwarden.store.postgres_store import PostgresStore, _connect_params  # noqa: E402


@pytest.fixture
def pg_harness(tmp_path: Path) -> PostgresHarness:
    harness = make_harness("postgres", tmp_path)
    assert isinstance(harness, PostgresHarness)
    yield harness  # type: ignore[misc]
    harness.close()


def test_a_server_that_never_answers_is_a_store_error_at_open() -> None:
    """Before: no connect_timeout, and psycopg waited its own default of 130 s."""
    with silent_server() as port:
        taken, error, _ = bounded(
            lambda: PostgresStore(f"postgresql://u@127.0.0.1:{port}/db", timeout=1), 20
        )
    assert isinstance(error, StoreError)
    assert "failed to connect" in str(error)
    assert taken < 5  # libpq counts at least 2 s


def test_the_urls_connect_timeout_wins_over_the_default() -> None:
    with silent_server() as port:
        url = f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=2"
        taken, error, _ = bounded(lambda: PostgresStore(url, timeout=60), 30)
    assert isinstance(error, StoreError)
    assert taken < 6


def test_connect_params_leave_what_the_url_sets() -> None:
    mine = _connect_params("postgresql://u@h/db?connect_timeout=9&keepalives_idle=30", 4)
    assert "connect_timeout" not in mine and "keepalives_idle" not in mine
    assert mine["keepalives"] == 1
    assert mine["keepalives_interval"] == 2
    assert mine.get("tcp_user_timeout", 4000) == 4000
    keyword = _connect_params("host=h keepalives=0 tcp_user_timeout=100", 5)
    assert "keepalives" not in keyword and "tcp_user_timeout" not in keyword
    assert keyword["connect_timeout"] == 5


def test_libpq_environment_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "11")
    assert "connect_timeout" not in _connect_params("postgresql://u@h/db", 5)


def test_the_statement_timeout_defaults_to_the_timeout(pg_harness: PostgresHarness) -> None:
    store = PostgresStore(pg_harness.url, timeout=1.5)
    try:
        assert store._db.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
        store.gc()  # gc's longer bound is local to its transaction
        assert store._db.execute("SHOW statement_timeout").fetchone() == ("1500ms",)
    finally:
        store.close()


def test_the_urls_statement_timeout_wins(pg_harness: PostgresHarness) -> None:
    from psycopg.conninfo import make_conninfo

    options = psycopg.conninfo.conninfo_to_dict(pg_harness.url)["options"]
    url = make_conninfo(pg_harness.url, options=f"{options} -c statement_timeout=12345")
    store = PostgresStore(url, timeout=1)
    try:
        assert store._db.execute("SHOW statement_timeout").fetchone() == ("12345ms",)
        store.gc()
        assert store._db.execute("SHOW statement_timeout").fetchone() == ("12345ms",)
    finally:
        store.close()


@pytest.mark.parametrize("operation", ["get", "put", "get_state", "missing"])
def test_a_stalled_backend_is_a_store_error_within_the_bound(
    pg_harness: PostgresHarness, operation: str
) -> None:
    """The store's backend stopped (SIGSTOP: the server's kernel still acknowledges
    every packet, so neither keepalives nor a server-side timeout help). Before: the
    call waited forever (and the engine's condense with it)."""
    store = PostgresStore(pg_harness.url, timeout=1)
    try:
        ref = store.put("t", "kept through the stall")
        pid = store._db.info.backend_pid
        calls = {
            "get": lambda: store.get("t", ref),
            "put": lambda: store.put("t", "another text"),
            "get_state": lambda: store.get_state("t", "s"),
            "missing": lambda: store.missing("t", [ref]),
        }
        with stopped(pid):
            taken, error, _ = bounded(calls[operation], 30)
        assert isinstance(error, StoreError), error
        assert "no answer from the server" in str(error)
        assert taken < 5  # the statement timeout (1 s) and the grace (1 s)
        assert store.get("t", ref) == "kept through the stall"  # a new connection
    finally:
        store.close()


def test_gc_runs_on_its_own_connection_while_the_stores_stalls(
    pg_harness: PostgresHarness,
) -> None:
    store = PostgresStore(pg_harness.url, timeout=1, max_bytes=10)
    try:
        store.put("t", "more than ten bytes")
        with stopped(store._db.info.backend_pid):
            taken, error, dropped = bounded(store.gc, 30)
        assert error is None
        assert dropped == 1
        assert taken < 5
    finally:
        store.close()


def test_gc_against_a_stalled_server_is_a_store_error(pg_harness: PostgresHarness) -> None:
    """The postmaster stopped: gc's own connection cannot be opened (connect_timeout)."""
    store = PostgresStore(pg_harness.url, timeout=1)
    try:
        status = Path(f"/proc/{store._db.info.backend_pid}/status")
        if not status.exists():
            pytest.skip("the server is not a local process")
        postmaster = int(
            next(
                line for line in status.read_text().splitlines() if line.startswith("PPid:")
            ).split()[1]
        )
        with stopped(postmaster):
            taken, error, _ = bounded(store.gc, 30)
        assert isinstance(error, StoreError)
        assert "failed to collect garbage" in str(error)
        assert taken < 5
    finally:
        store.close()


def test_gc_spares_an_artifact_refreshed_while_it_trims(pg_harness: PostgresHarness) -> None:
    """Replica B refreshes the least recently used artifact while gc's DELETE waits on
    its row lock: PostgreSQL rechecks the updated row, and gc used to drop it anyway
    (the newest artifact now) instead of the one that is least recently used."""
    big = 1000
    store = PostgresStore(pg_harness.url, max_bytes=2 * big + 10)
    other = psycopg.connect(pg_harness.url)  # not autocommit: holds its row lock
    try:
        old = store.put("t", "X" * big)
        time.sleep(0.01)
        mid = store.put("t", "Y" * big)
        time.sleep(0.01)
        new = store.put("t", "Z" * big)
        other.execute(
            "UPDATE ctxwarden_artifacts SET last_used=%s WHERE ref=%s", (time.time() + 5, old)
        )
        result: list[int] = []
        collector = PostgresStore(pg_harness.url, max_bytes=2 * big + 10)
        thread = threading.Thread(target=lambda: result.append(collector.gc()))
        thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until gc's trim waits on the row lock
            row = pg_harness.sql(
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE 'DELETE FROM ctxwarden_artifacts AS a USING%%'"
            ).fetchone()
            if row is not None:
                break
            time.sleep(0.01)
        assert row is not None, "gc's trim never waited on the row lock"
        other.commit()  # B's refresh lands: `old` is the most recently used now
        thread.join(30)
        collector.close()
        assert result == [1]
        assert store.has("t", old)
        assert not store.has("t", mid)
        assert store.has("t", new)
    finally:
        other.close()
        store.close()


def test_a_connection_error_is_one_line() -> None:
    with pytest.raises(StoreError) as info:
        PostgresStore("postgresql://u@127.0.0.1:1/db", timeout=1)
    assert "\n" not in str(info.value)
    assert "Connection refused" in str(info.value)


def test_the_watchdog_thread_ends_with_its_store(pg_harness: PostgresHarness) -> None:
    before = threading.active_count()
    store = PostgresStore(pg_harness.url, timeout=1)
    store.put("t", "x")
    assert threading.active_count() == before + 1
    store.close()
    assert threading.active_count() == before
