"""Fixes from a user audit of ``ctxwarden condense``: a gzip stream on stdin, exact mode
opening no store, an empty session key, ``--data-dir`` beside a config naming its store
file, and an Anthropic session file condensed with its system."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import orjson
import pytest

from ctxwarden.cli import main
from tests.cli.failing import fails
from tests.replay.test_audit_user_fixes import SYSTEM, _anthropic_file

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_a_gzip_stream_on_stdin_is_decompressed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _stdin(monkeypatch, gzip.compress(json.dumps(REQUEST).encode()))
    assert main(["condense", "-", "--data-dir", str(tmp_path)]) == 0
    assert orjson.loads(capsys.readouterr().out) == REQUEST


def test_broken_gzip_on_stdin_is_named_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _stdin(monkeypatch, gzip.compress(json.dumps(REQUEST).encode())[:-12])
    line = fails(capsys, ["condense", "-", "--data-dir", str(tmp_path)])
    assert line.startswith("ctxwarden condense: error: <stdin>: broken gzip data")


def test_exact_mode_creates_no_store(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    request = tmp_path / "r.json"
    request.write_text(json.dumps(REQUEST))
    data = tmp_path / "data"
    assert main(["condense", str(request), "--mode", "exact", "--data-dir", str(data)]) == 0
    assert orjson.loads(capsys.readouterr().out) == REQUEST
    assert not data.exists()


@pytest.mark.parametrize("key", ["", "  "])
def test_an_empty_session_key_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str
) -> None:
    request = tmp_path / "r.json"
    request.write_text(json.dumps(REQUEST))
    argv = ["condense", str(request), "--session", key, "--data-dir", str(tmp_path / "d")]
    line = fails(capsys, argv)
    assert line.startswith("ctxwarden condense: error: --session: an empty session key")
    assert not (tmp_path / "d").exists()


def test_data_dir_beside_a_config_naming_its_store_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """As ``recall`` and ``store`` refuse it: the file won silently."""
    store = tmp_path / "s" / "store.sqlite3"
    config = tmp_path / "c.toml"
    config.write_text(f'[store]\npath = "{store}"\n')
    request = tmp_path / "r.json"
    request.write_text(json.dumps(REQUEST))
    argv = ["condense", str(request), "--config", str(config), "--data-dir", str(tmp_path / "d")]
    line = fails(capsys, argv)
    assert line == (
        f"ctxwarden condense: error: store.path: --data-dir {tmp_path / 'd'} conflicts with "
        f"the config's store file {store}; give one of them"
    )
    assert not store.exists()


def test_an_anthropic_session_file_is_condensed_with_its_system(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session = _anthropic_file(tmp_path)
    assert main(["condense", str(session), "--mode", "exact", "--data-dir", str(tmp_path)]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["system"] == SYSTEM and "source" not in out


def test_a_store_that_can_only_be_read_is_an_error_of_condense(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SQLite opens a file it may not write to read: every original would fail to be
    kept and the request come back uncondensed, exit 0 (helper-97's audit). The store
    says so, and condense refuses it; exact mode needs no store."""
    import ctxwarden.store.sqlite as sqlite

    store = tmp_path / "store.sqlite3"
    sqlite.SqliteStore(store).close()
    real = sqlite.os.access
    monkeypatch.setattr(  # as a user without write permission on the file sees it
        sqlite.os, "access", lambda p, mode: False if Path(p) == store else real(p, mode)
    )
    _stdin(monkeypatch, json.dumps(REQUEST).encode())
    line = fails(capsys, ["condense", "-", "--data-dir", str(tmp_path)])
    assert line == (
        f"ctxwarden condense: error: store.path: the store {store} can only be read here: "
        "the originals of what is condensed could not be kept, and nothing would be (use a "
        "writable --data-dir, or --mode exact)"
    )
    _stdin(monkeypatch, json.dumps(REQUEST).encode())
    assert main(["condense", "-", "--data-dir", str(tmp_path), "--mode", "exact"]) == 0
