"""Opening another program's SQLite file as the store (a mistyped ``--data-dir`` or
``[store] path``) is refused and leaves the file as it was: ``store stats`` used to
switch it to WAL and add ctxwarden's tables (audit 97, item 7)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.errors import StoreError
from ctxwarden.store import SqliteStore
from tests.cli.failing import fails


def _foreign(path: Path) -> bytes:
    """A SQLite database of another program at ``path``; its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO users (name) VALUES ('ada')")
    db.commit()
    db.close()
    return path.read_bytes()


def _tables(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [row[0] for row in db.execute("SELECT name FROM sqlite_master")]
    finally:
        db.close()


def test_a_foreign_database_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    before = _foreign(path)
    with pytest.raises(StoreError, match=r"app\.db is not a ctxwarden store"):
        SqliteStore(path)
    assert path.read_bytes() == before and _tables(path) == ["users"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]  # no -wal, no -shm


def test_a_foreign_database_opened_to_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-only fallback (a folder SQLite cannot write in) checks it too."""
    path = tmp_path / "app.db"
    before = _foreign(path)

    def unwritable(self: SqliteStore, attempts: int = 50) -> None:
        exc = sqlite3.OperationalError("attempt to write a readonly database")
        exc.sqlite_errorname = "SQLITE_READONLY_DIRECTORY"
        raise exc

    monkeypatch.setattr(SqliteStore, "_open_with_retry", unwritable)
    with pytest.raises(StoreError, match="is not a ctxwarden store"):
        SqliteStore(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("kind", ["new", "zero bytes", "no table"])
def test_a_new_or_empty_file_is_still_made_a_store(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "store.sqlite3"
    if kind == "zero bytes":
        path.write_bytes(b"")
    elif kind == "no table":
        db = sqlite3.connect(path)
        db.execute("PRAGMA user_version=1")  # a database file with a header, no table
        db.close()
    store = SqliteStore(path)
    try:
        ref = store.put("t", "kept")
        assert store.get("t", ref) == "kept"
    finally:
        store.close()
    again = SqliteStore(path)  # a store of ours opens again
    again.close()
    assert {"migrations", "artifacts", "sessions"} <= set(_tables(path))


@pytest.mark.parametrize(
    "command", [["store", "stats"], ["store", "gc"], ["recall", "cw:0123456789ab"]]
)
def test_store_commands_do_not_migrate_a_foreign_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "data" / "store.sqlite3"
    before = _foreign(path)
    line = fails(capsys, [*command, "--data-dir", str(tmp_path / "data")])
    assert f"{path} is not a ctxwarden store" in line
    assert line.count(str(path)) == 1  # named once, not prefixed by the path again
    assert path.read_bytes() == before and _tables(path) == ["users"]


def test_condense_does_not_migrate_a_foreign_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = tmp_path / "request.json"
    request.write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}')
    path = tmp_path / "app.db"
    before = _foreign(path)
    config = tmp_path / "c.toml"
    config.write_text(f"[store]\npath = {str(path)!r}\n")
    line = fails(capsys, ["condense", str(request), "--config", str(config)])
    assert "is not a ctxwarden store" in line and path.read_bytes() == before
    assert main(["condense", str(request), "--data-dir", str(tmp_path / "ours")]) == 0
