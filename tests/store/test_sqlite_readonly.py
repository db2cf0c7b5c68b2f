"""A read-only SQLite store (a copy, a mounted backup) still answers reads: recall and
lookups skip refreshing last use; writes still fail loudly."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
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


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """``(source, view)``: ``view`` is ``source`` bind-mounted read-only (needs root and
    a mount command that works here, else the test skips)."""
    source, view = tmp_path / "source", tmp_path / "view"
    source.mkdir()
    view.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only bind mount needs root and mount(8)")
    if subprocess.run(["mount", "--bind", str(source), str(view)], capture_output=True).returncode:
        pytest.skip("bind mounts are not permitted here")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(view)]
        if subprocess.run(remount, capture_output=True).returncode:
            pytest.skip("read-only remounts are not permitted here")
        yield source, view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_a_store_on_a_read_only_mount_opens_and_is_read(
    read_only_mount: tuple[Path, Path],
) -> None:
    """WAL cannot create its -shm file on a read-only mount (SQLITE_CANTOPEN): the store
    opens the file as immutable instead; reads work, writes are a StoreError."""
    source, view = read_only_mount
    writer = SqliteStore(source / "store.sqlite3")
    ref = writer.put("t", "hello\nworld")
    writer.put_state("t", "s", b"state")
    writer.close()
    with pytest.raises(OSError):
        (view / "probe").write_text("the mount must be read-only")
    store = SqliteStore(view / "store.sqlite3")
    try:
        assert store.get("t", ref) == "hello\nworld"
        assert store.missing("t", [ref, "cw:000000000000"]) == {"cw:000000000000"}
        assert store.has("t", ref)
        assert store.get_state("t", "s") == b"state"
        assert store.stats()["artifacts"] == 1
        with pytest.raises(StoreError):
            store.put("t", "a new text")
        with pytest.raises(StoreError):
            store.gc(now=time.time() + 10**9)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("name", "unwritable"),
    [("SQLITE_READONLY", True), ("SQLITE_READONLY_DIRECTORY", True), ("SQLITE_CANTOPEN", True),
     ("SQLITE_READONLY_RECOVERY", True), ("SQLITE_CORRUPT", False), ("SQLITE_BUSY", False)],
)  # fmt: skip
def test_a_store_in_a_read_only_folder_is_opened_to_read(
    tmp_path: Path, name: str, unwritable: bool
) -> None:
    """SQLite names a folder it cannot write in by an extended code of SQLITE_READONLY
    (``chmod 555`` on the folder, as root sees it only without CAP_DAC_OVERRIDE): the
    store then opens to read, as on a read-only mount."""
    store = SqliteStore(tmp_path / "store.sqlite3")
    try:
        exc = sqlite3.OperationalError("attempt to write a readonly database")
        exc.sqlite_errorname = name  # type: ignore[attr-defined]
        assert store._unwritable(exc) is unwritable
    finally:
        store.close()
