"""SQLite gc deletes in batches: no write transaction holds the store for a whole
collection (18 s on a 2 GB store: another process's write failed as "database is
locked"), and collectors at once still trim the excess once."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.store import SqliteStore
from ctxwarden.store import sqlite as sqlite_module

BATCH = 1000  # the batch the store promises (GC_BATCH)


def _fill(path: Path, expired: int, live: int, size: int) -> float:
    """``expired`` artifacts unused for a day, then ``live`` ones used a second apart
    (the oldest first), ``size`` bytes each, written behind the store's back; returns
    the time the last was used."""
    now = time.time()
    db = sqlite3.connect(path)
    rows = []
    for i in range(expired + live):
        used = now - 86400 * 2 if i < expired else now - (expired + live - i)
        body = f"{i:0{size}d}".encode()
        rows.append(("t", f"cw:{i:012x}", "blake2b:x", body, size, used, used))
    db.executemany("INSERT INTO artifacts VALUES (?,?,?,?,?,?,?)", rows)
    db.commit()
    db.close()
    return now


class _Transactions:
    """Wraps a store's connection: rows changed per write transaction, and hooks run
    after each COMMIT (with the store still held) and before each BEGIN."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.changed: list[int] = []
        self.began: list[float] = []
        self.after_commit: list[Any] = []
        self._start = 0

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith("BEGIN"):
            self.began.append(time.monotonic())
            self._start = self.db.total_changes
        cursor = self.db.execute(sql, *args)
        if sql == "COMMIT":
            self.changed.append(self.db.total_changes - self._start)
            for hook in self.after_commit:
                hook()
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_gc_deletes_in_batches_and_lets_other_writers_in(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, ttl_seconds=86400, max_bytes=1500 * 10)
    try:
        _fill(path, expired=2500, live=4000, size=10)
        spy = _Transactions(store._db)
        store._db = spy  # type: ignore[assignment]
        done: list[float] = []

        def write_state() -> None:  # another thread of the process, waiting its turn
            store.put_state("t", f"s{len(done)}", b"state")
            done.append(time.monotonic())

        writers: list[threading.Thread] = []
        spy.after_commit.append(
            lambda: writers.append(threading.Thread(target=write_state)) or writers[-1].start()
        )
        dropped = store.gc()
        store._db = spy.db
        for writer in writers:
            writer.join(10)
        assert dropped == 2500 + 2500
        assert store.stats()["bytes"] == 1500 * 10
        assert max(spy.changed) <= BATCH  # no transaction deletes more than a batch
        assert sum(spy.changed) == 5000
        # the other thread's writes got in between batches, not after the last one
        assert done and min(done) < spy.began[-1]
    finally:
        store.close()


def test_another_connections_writer_gets_in_while_gc_runs(tmp_path: Path) -> None:
    """A writer of another connection that does not wait at all (busy timeout 0) finds
    the store free between two batches of a running gc."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, max_bytes=10 * 100)
    try:
        _fill(path, expired=0, live=3500, size=10)
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        spy = _Transactions(store._db)
        store._db = spy  # type: ignore[assignment]
        got_in: list[bool] = []
        original_pause = store._pause

        def pause() -> None:  # between two batches: the write lock must be free
            try:
                other.execute("INSERT INTO sessions VALUES ('t', 'x', x'00', 1e12)")
                other.execute("DELETE FROM sessions WHERE session='x'")
                got_in.append(True)
            except sqlite3.OperationalError:
                got_in.append(False)
            original_pause()

        store._pause = pause  # type: ignore[method-assign]
        assert store.gc() == 3500 - 100
        store._db = spy.db
        other.close()
        assert len(got_in) >= 3 and all(got_in)
    finally:
        store.close()


def test_writes_between_batches_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gc keeps a running count of the bytes while nobody else writes; artifacts put
    between two batches (by another connection, or by this store) are counted again,
    so the store ends within the cap."""
    monkeypatch.setattr(sqlite_module, "GC_BATCH", 5)
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, max_bytes=200)
    other = SqliteStore(path)
    try:
        _fill(path, expired=0, live=60, size=10)
        pauses = 0
        original_pause = store._pause

        def pause() -> None:
            nonlocal pauses
            pauses += 1
            if pauses == 1:
                other.put("t", "from another connection " + "x" * 80)
            if pauses == 2:
                store.put("t", "from this store " + "y" * 80)
            original_pause()

        store._pause = pause  # type: ignore[method-assign]
        store.gc()
        assert pauses >= 3
        assert store.stats()["bytes"] <= 200
    finally:
        store.close()
        other.close()


def test_collectors_at_once_trim_the_excess_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "GC_BATCH", 7)
    path = tmp_path / "store.sqlite3"
    stores = [SqliteStore(path, max_bytes=50 * 10) for _ in range(3)]
    try:
        _fill(path, expired=0, live=300, size=10)
        results: list[int] = []
        threads = [threading.Thread(target=lambda s=s: results.append(s.gc())) for s in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sum(results) == 250
        db = sqlite3.connect(path)
        left = [row[0] for row in db.execute("SELECT ref FROM artifacts ORDER BY last_used")]
        db.close()
        assert left == [f"cw:{i:012x}" for i in range(250, 300)]  # the newest 50
    finally:
        for store in stores:
            store.close()


def test_expired_sessions_go_in_batches_too(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path, ttl_seconds=3600)
    try:
        db = sqlite3.connect(path)
        old = time.time() - 7200
        db.executemany(
            "INSERT INTO sessions VALUES (?,?,?,?)",
            [("t", f"s{i}", b"x", old) for i in range(2100)] + [("t", "live", b"y", time.time())],
        )
        db.commit()
        db.close()
        spy = _Transactions(store._db)
        store._db = spy  # type: ignore[assignment]
        store.gc()
        store._db = spy.db
        assert max(spy.changed) <= BATCH
        assert store.stats()["sessions"] == 1
        assert store.get_state("t", "live") == b"y"
    finally:
        store.close()
