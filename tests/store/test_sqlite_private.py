"""The SQLite store's folder and files hold tool outputs (secrets among them): those it
creates are its owner's alone; an existing file keeps the mode its owner gave it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ctxwarden.store import SqliteStore


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_is_readable_by_its_owner_alone(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    store = SqliteStore(folder / "store.sqlite3")
    store.put("t", "a tool output with a token in it")
    try:
        assert _mode(folder) == 0o700
        files = sorted(folder.iterdir())
        assert [f.name for f in files] == [
            "store.sqlite3",
            "store.sqlite3-shm",
            "store.sqlite3-wal",
        ]
        assert all(_mode(f) == 0o600 for f in files)
    finally:
        store.close()


def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    SqliteStore(path).close()
    os.chmod(path, 0o640)  # shared with a group on purpose
    store = SqliteStore(path)
    try:
        assert store.get("t", store.put("t", "x")) == "x"
        assert _mode(path) == 0o640
    finally:
        store.close()
