"""A read-only SQLite store (a copy, a mounted backup) still answers reads: recall and
lookups skip refreshing last use; writes still fail loudly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ctxwarden.errors import StoreError
from ctxwarden.store import SqliteStore
from ctxwarden.store.base import TOUCH_INTERVAL


def test_a_read_only_store_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        ref = store.put("t", "hello\nworld")
        store._db.execute("PRAGMA query_only=ON")  # writes now fail as SQLITE_READONLY
        assert store.get("t", ref) == "hello\nworld"
        later = time.time() + 2 * TOUCH_INTERVAL  # stale: the lookup would refresh it
        monkeypatch.setattr(time, "time", lambda: later)
        assert store.missing("t", [ref, "cw:000000000000"]) == {"cw:000000000000"}
        assert store.stats()["artifacts"] == 1
        with pytest.raises(StoreError):
            store.put("t", "a new text")
    finally:
        store.close()
