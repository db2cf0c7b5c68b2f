"""Store errors name the right thing (audit 97, item 9): the store file is not "the data
dir", and a server store's bad or missing url names ``store.url`` and the config file,
as every other config error names its key and file."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from ctxwarden.cli.common import store_errors
from ctxwarden.config import StoreConfig
from ctxwarden.errors import StoreError
from tests.cli.failing import fails

REQUEST = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(REQUEST)
    return path


def test_a_store_file_that_cannot_be_made_is_named_the_store_file(tmp_path: Path) -> None:
    """Its folder (the data dir) exists; the file in it cannot be created (a folder
    SQLite cannot write in: root is not stopped by chmod, so the failure is made)."""
    store = tmp_path / "store.sqlite3"
    denied = PermissionError(errno.EACCES, "Permission denied", str(store))
    with pytest.raises(StoreError) as info, store_errors(StoreConfig(), str(tmp_path)):
        raise denied
    assert str(info.value) == f"cannot create the store file {store}: Permission denied"
    folder = tmp_path / "sub"
    denied = PermissionError(errno.EACCES, "Permission denied", str(folder))
    with pytest.raises(StoreError) as info, store_errors(StoreConfig(), str(folder)):
        raise denied
    assert str(info.value) == f"cannot create the data dir {folder}: Permission denied"


def test_condense_names_the_store_file_it_cannot_create(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "data"
    data.mkdir()

    def refused(path: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr("ctxwarden.store.sqlite._create_private", refused)
    line = fails(capsys, ["condense", str(request_file), "--data-dir", str(data)])
    assert line.endswith(
        f"cannot create the store file {data / 'store.sqlite3'}: Permission denied"
    )
    assert "data dir" not in line


@pytest.mark.parametrize(("backend", "url"), [("redis", "notaurl"), ("postgres", "notaurl")])
@pytest.mark.parametrize(
    "command", [["condense", "{request}"], ["store", "stats"], ["store", "gc"]]
)
def test_a_bad_server_url_names_store_url_and_the_file(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    request_file: Path,
    backend: str,
    url: str,
    command: list[str],
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[store]\nbackend = "{backend}"\nurl = "{url}"\n')
    argv = [a.replace("{request}", str(request_file)) for a in command]
    line = fails(capsys, [*argv, "--config", str(config)])
    assert f"error: {config}: store.url: {backend} store failed to connect: " in line


@pytest.mark.parametrize("command", [["condense", "{request}"], ["store", "stats"]])
def test_a_missing_server_url_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request_file: Path, command: list[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[store]\nbackend = "redis"\n')
    argv = [a.replace("{request}", str(request_file)) for a in command]
    line = fails(capsys, [*argv, "--config", str(config)])
    assert line.endswith(f"error: {config}: store.url: the redis store needs a url")
