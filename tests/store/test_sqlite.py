"""SQLite specifics: migrations applied once, and safe concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ctxwarden.errors import StoreError
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
