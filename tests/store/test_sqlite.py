"""SQLite specifics: migrations applied once, and safe concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.errors import ArtifactCorrupted, StoreError
from ctxwarden.store import SqliteStore
from ctxwarden.store.sqlite import MIGRATIONS


def _migrations(path: Path) -> list[tuple[str, float]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT name, applied FROM migrations ORDER BY name").fetchall()
    finally:
        db.close()


def test_migrations_are_applied_once_across_opens(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    SqliteStore(path).close()
    first = _migrations(path)
    assert [name for name, _ in first] == [name for name, _ in MIGRATIONS]
    store = SqliteStore(path)
    ref = store.put("t", "kept across opens")
    store.close()
    assert _migrations(path) == first  # same rows, same timestamps: nothing re-applied
    reopened = SqliteStore(path)
    assert reopened.get("t", ref) == "kept across opens"
    reopened.close()


_WORKER = """
import sys
from ctxwarden.store import SqliteStore

path, worker = sys.argv[1], sys.argv[2]
store = SqliteStore(path)
for i in range(150):
    store.put("t", f"worker {worker} item {i}")
    store.put("t", f"shared item {i}")
    store.put_state("t", f"session-{worker}", str(i).encode())
store.close()
"""


def test_two_processes_open_and_write_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"  # fresh: both processes race to migrate it
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(path), str(w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    assert [name for name, _ in _migrations(path)] == [name for name, _ in MIGRATIONS]
    store = SqliteStore(path)
    try:
        assert store.stats()["artifacts"] == 2 * 150 + 150
        assert store.stats()["sessions"] == 2
        assert store.get_state("t", "session-1") == b"149"
        for w in range(2):
            for i in (0, 77, 149):
                text = f"worker {w} item {i}"
                assert store.get("t", store.put("t", text)) == text
    finally:
        store.close()


def test_threads_share_one_store_and_a_second_connection(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    shared = SqliteStore(path)
    other = SqliteStore(path)
    errors: list[BaseException] = []
    refs: dict[str, str] = {}
    lock = threading.Lock()

    def work(store: SqliteStore, worker: int) -> None:
        try:
            for i in range(100):
                text = f"thread {worker} item {i}"
                ref = store.put("t", text)
                assert store.get("t", ref) == text
                with lock:
                    refs[ref] = text
        except BaseException as exc:  # reported below; a thread cannot fail the test
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(shared if w % 2 else other, w)) for w in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert errors == []
        assert len(refs) == 400
        assert shared.stats()["artifacts"] == 400
        assert all(other.get("t", ref) == text for ref, text in refs.items())
    finally:
        shared.close()
        other.close()


def test_a_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="sqlite store failed to open"):
        SqliteStore(path)


class _PausingConnection:
    """Wraps a store's connection: after its ``pause_after``-th statement, runs
    ``between`` in a thread and waits for it (briefly: a lock may make it wait for us)."""

    def __init__(self, db: sqlite3.Connection, pause_after: int, between: Any) -> None:
        self.db = db
        self.count = 0
        self.pause_after = pause_after
        self.between = between
        self.thread: threading.Thread | None = None

    def execute(self, *args: Any) -> Any:
        cursor = self.db.execute(*args)
        self.count += 1
        if self.count == self.pause_after:
            self.thread = threading.Thread(target=self.between)
            self.thread.start()
            self.thread.join(timeout=0.3)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.mark.parametrize("pause_after", range(1, 7))
def test_two_gc_runs_at_once_trim_the_excess_once(tmp_path: Path, pause_after: int) -> None:
    """Replica A's gc runs while replica B's is between two of its statements: together
    they drop exactly what one gc would (the excess counted once)."""
    path = tmp_path / "store.sqlite3"
    a = SqliteStore(path, max_bytes=12)
    b = SqliteStore(path, max_bytes=12)
    try:
        refs = []
        for ch in "abc":
            refs.append(a.put("t", ch * 6))
            time.sleep(0.005)
        results: list[int] = []
        wrapper = _PausingConnection(b._db, pause_after, lambda: results.append(a.gc()))
        b._db = wrapper  # type: ignore[assignment]
        results.append(b.gc())
        b._db = wrapper.db
        if wrapper.thread is not None:
            wrapper.thread.join(timeout=30)
        else:
            results.append(a.gc())
        assert sorted(results) == [0, 1]
        assert a.stats()["bytes"] == 12
        assert [a.has("t", ref) for ref in refs] == [False, True, True]
    finally:
        a.close()
        b.close()


def _plans(store: SqliteStore, statements: list[str]) -> list[str]:
    plans = []
    for sql in statements:
        if sql.lstrip().upper().startswith("SELECT"):
            rows = store._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
            plans += [row[-1] for row in rows if " artifacts" in row[-1]]
    return plans


def test_lookups_read_an_index_not_the_bodies(tmp_path: Path) -> None:
    """missing/has search the covering index (a search of the WITHOUT ROWID primary key
    reads each overflowing body it meets: ~700 ms for 300 references of 1 MB)."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        refs = [store.put("t", f"{i} " + "x" * 5000) for i in range(20)]
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        store.missing("t", refs)
        store.has("t", refs[0])
        store.stats()
        store._db.set_trace_callback(None)
        plans = _plans(store, statements)
        assert len(plans) >= 3
        for plan in plans:
            assert "COVERING INDEX" in plan and "PRIMARY KEY" not in plan, plan
    finally:
        store.close()


def test_an_older_store_gains_the_lookup_index(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied REAL)")
    for name, sql in MIGRATIONS[:2]:
        db.executescript(sql)
        db.execute("INSERT INTO migrations VALUES (?, 0)", (name,))
    db.execute("INSERT INTO artifacts VALUES ('t', 'cw:0', 'd', x'00', 1, 0, ?)", (time.time(),))
    db.commit()
    db.close()
    store = SqliteStore(path)
    try:
        assert [name for name, _ in _migrations(path)] == [name for name, _ in MIGRATIONS]
        assert store.has("t", "cw:0")
    finally:
        store.close()


def test_a_folder_that_is_a_file_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match=r"sqlite store failed to open .*cannot create") as info:
        SqliteStore(blocker / "store.sqlite3")
    # still the OSError it was (the CLI names a folder made over a file by its type)
    assert isinstance(info.value, FileExistsError)
    assert info.value.filename == str(blocker)


def test_rows_of_the_wrong_type_read_as_corrupt_not_as_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    try:
        ref = store.put("t", "hello")
        broken = store.put("t", "broken digest")
        store.put_state("t", "s", b"state")
        db = sqlite3.connect(path)
        db.execute("UPDATE artifacts SET body=CAST(body AS TEXT) WHERE ref=?", (ref,))
        db.execute("UPDATE artifacts SET digest=CAST(x'ff' AS TEXT) WHERE ref=?", (broken,))
        db.execute("UPDATE sessions SET state=CAST(x'ff' AS TEXT)")
        db.commit()
        db.close()
        with pytest.raises(ArtifactCorrupted, match=ref):
            store.get("t", ref)
        with pytest.raises(ArtifactCorrupted, match=broken):
            store.get("t", broken)
        assert store.get_state("t", "s") == b"\xff"  # bad state: the decoder rejects it
        assert store.put("t", "hello") == ref  # and a put repairs it
        assert store.get("t", ref) == "hello"
        assert store.put("t", "broken digest") == broken
        assert store.get("t", broken) == "broken digest"
    finally:
        store.close()
