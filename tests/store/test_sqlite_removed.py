"""A data directory deleted under a running engine: SQLite would go on writing to the
open, unlinked file, and every reference sent from then on would be lost at exit.
Writes now fail as a StoreError naming the file, so the engine sends originals."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ctxwarden import Engine, EngineConfig, StoreError
from ctxwarden.store import SqliteStore
from tests.passes.convo import FORCE, finds


def test_writes_to_a_removed_or_replaced_file_fail_by_name(tmp_path: Path) -> None:
    path = tmp_path / "data" / "store.sqlite3"
    store = SqliteStore(path)
    ref = store.put("t", "kept while the file is there")
    store.put_state("t", "s", b"state")
    shutil.rmtree(path.parent)
    with pytest.raises(StoreError, match="was removed or replaced while open"):
        store.put("t", "written after the removal")
    with pytest.raises(StoreError, match=str(path)):
        store.put_state("t", "s", b"state 2")
    assert store.get("t", ref) == "kept while the file is there"  # reads still answer
    store.close()
    replaced = SqliteStore(path)  # another file at the same path
    other = SqliteStore(tmp_path / "other.sqlite3")
    other.close()
    shutil.move(tmp_path / "other.sqlite3", path)
    with pytest.raises(StoreError, match="was removed or replaced while open"):
        replaced.put("t", "x")
    replaced.close()


def test_an_engine_whose_data_dir_was_deleted_sends_originals(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = Engine(EngineConfig(data_dir=str(data), pipeline=FORCE))
    first = engine.condense(finds(3), session="s")
    assert first.changed
    shutil.rmtree(data)
    later = engine.condense(finds(5), session="s")
    assert later.request == finds(5) and not later.changed
    assert later.report["fallback_reason"].startswith("StoreError: sqlite store failed to")
    engine.close()


def test_a_relative_path_keeps_naming_the_file_opened_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteStore("rel.sqlite3")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    ref = store.put("t", "written after a chdir")
    store.put_state("t", "s", b"state")
    assert store.get("t", ref) == "written after a chdir"
    store.close()


def test_a_stat_that_fails_for_another_reason_does_not_fail_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a network file system a stat may fail for a moment (ESTALE, EACCES): that
    is no removed file, and the write goes on."""
    import ctxwarden.store.sqlite as sqlite_module

    store = SqliteStore(tmp_path / "store.sqlite3")

    def flaky(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(sqlite_module.os, "stat", flaky)
    ref = store.put("t", "written while stat failed")
    monkeypatch.undo()
    assert store.get("t", ref) == "written while stat failed"
    store.close()
