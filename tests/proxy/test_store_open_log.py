"""A store the proxy cannot open is logged once at start-up with which store (the
SQLite file, or the server's URL without its password) and why (the error's message,
every password redacted), not only ``StoreError`` (review 114)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.errors import StoreError
from ctxwarden.proxy.app import store_open_failure
from tests.proxy.conftest import ProxyFactory

PASSWORD = "hunter2-secret"


async def test_a_corrupt_sqlite_store_is_named_with_its_reason_at_start_up(
    make_proxy: ProxyFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "store.sqlite3").write_bytes(b"not a database, " * 400)
    engine = Engine(EngineConfig(data_dir=str(data)))
    caplog.set_level(logging.ERROR, logger="ctxwarden.proxy")
    try:
        async with make_proxy(engine):
            pass
    finally:
        engine.close()
    lines = [r.getMessage() for r in caplog.records if "store failed to open" in r.getMessage()]
    assert len(lines) == 1
    assert f"{data / 'store.sqlite3'}: StoreError: " in lines[0]
    assert "file is not a database" in lines[0]


def test_a_server_stores_url_and_reason_are_logged_without_passwords() -> None:
    url = f"redis://user:{PASSWORD}@127.0.0.1:6390/0?password={PASSWORD}&db=0"
    engine = Engine(EngineConfig(store={"backend": "redis", "url": url}))
    try:
        echoed = StoreError(
            f"redis store failed to connect: Error connecting to {url} "
            f"(redis://other:{PASSWORD}x@h/1, password={PASSWORD}): Connection refused"
        )
        line = store_open_failure(engine, echoed)
    finally:
        engine.close()
    assert PASSWORD not in line
    assert line.startswith("redis redis://user:***@127.0.0.1:6390/0?password=***&db=0: ")
    assert "StoreError: redis store failed to connect: Error connecting to" in line
    assert "redis://other:***@h/1" in line and "Connection refused" in line
