"""The one error line names the command as typed and what failed: the request file of
``condense`` / ``inspect``, the reference or line range of ``recall`` (checked before
any store is opened), the store ``store stats`` read."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.cli.store import _where
from ctxwarden.config import EngineConfig
from ctxwarden.engine import DEFAULT_TENANT
from ctxwarden.store import SqliteStore
from tests.cli.failing import fails

UNPAIRED = '{"model": "gpt-4o", "messages": [{"role": "tool", "content": "x"}]}'


@pytest.mark.parametrize("command", ["condense", "inspect"])
def test_a_structural_error_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    path = tmp_path / "request.json"
    path.write_text(UNPAIRED)
    where = ["--data-dir", str(tmp_path)] if command == "condense" else []  # inspect: none
    line = fails(capsys, [command, str(path), *where])
    assert line == (
        f"ctxwarden {command}: error: {path}: missing (expected a string) "
        "at /messages/0/tool_call_id"
    )


def test_a_request_on_stdin_is_named_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for body, message in ((UNPAIRED, "missing (expected a string)"), ("nope", "not JSON")):
        stdin = io.TextIOWrapper(io.BytesIO(body.encode()))
        monkeypatch.setattr("sys.stdin", stdin)
        line = fails(capsys, ["condense", "-", "--data-dir", str(tmp_path)])
        assert line.startswith(f"ctxwarden condense: error: <stdin>: {message}")


def test_a_file_that_is_not_json_is_named_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "request.json"
    path.write_text("nope")
    line = fails(capsys, ["condense", str(path), "--data-dir", str(tmp_path)])
    assert line.startswith(f"ctxwarden condense: error: {path}: not JSON (")
    assert line.count(str(path)) == 1


@pytest.mark.parametrize("sub", ["stats", "gc"])
def test_store_errors_name_the_subcommand(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sub: str
) -> None:
    where = tmp_path / "nothing"
    line = fails(capsys, ["store", sub, "--data-dir", str(where)])
    assert line.startswith(f"ctxwarden store {sub}: error: no store at {where / 'store.sqlite3'}")


def test_store_stats_says_which_store_it_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    store.put(DEFAULT_TENANT, "an original")
    store.close()
    assert main(["store", "stats", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["artifacts"] == "1"
    assert out.splitlines()[-1] == f"store: {tmp_path / 'store.sqlite3'}"


@pytest.mark.parametrize(
    ("store", "where"),
    [
        ({"backend": "redis", "url": "redis://app:s3cret@db:6379/0"}, "redis://app:***@db:6379/0"),
        ({"backend": "postgres", "url": "postgresql://db/ctx"}, "postgresql://db/ctx"),
        ({"backend": "sqlite", "path": "/srv/s.sqlite3"}, "/srv/s.sqlite3"),
    ],
)
def test_the_store_named_never_shows_a_password(store: dict[str, str], where: str) -> None:
    assert _where(EngineConfig(store=store), None) == where  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["cw:zz"], "'cw:zz' is not a ctxwarden reference (cw: and 12 lowercase hex digits"),
        (["cw:0123456789ab", "--lines="], "--lines is empty (give A-B or A"),
        (["cw:0123456789ab", "--lines", "  "], "--lines is empty"),
        (["cw:0123456789ab", "--lines", "b-a"], "line range 'b-a' is not A-B"),
    ],
)
def test_recall_refuses_a_bad_reference_or_range_before_opening_a_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    """Whatever the store (here: none at all), the argument is the error."""
    line = fails(capsys, ["recall", *argv, "--data-dir", str(tmp_path / "none")])
    assert line.startswith(f"ctxwarden recall: error: {message}")
    assert not (tmp_path / "none").exists()


def test_recall_with_an_empty_range_does_not_print_the_original(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    ref = store.put(DEFAULT_TENANT, "first\nsecond\n")
    store.close()
    line = fails(capsys, ["recall", ref, "--lines=", "--data-dir", str(tmp_path)])
    assert "--lines is empty" in line
    assert main(["recall", ref, "--lines=2", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "second\n"
