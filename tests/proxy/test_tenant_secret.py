"""A fleet's replicas share the tenant secret (helper-130's review: replicas sharing a
Redis or PostgreSQL store, each with a data directory of its own, made one client a
different tenant on each, so nothing stored was shared: a Responses continuation that
reached the other replica was refused for want of the recall answers it owed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ctxwarden import ConfigError, Engine, EngineConfig
from ctxwarden.cli import main
from ctxwarden.proxy import ProxySettings, RunningServer, build_app
from ctxwarden.proxy.app import _check_secret
from ctxwarden.proxy.state import STATE
from ctxwarden.proxy.tenant import TenantKeys, read_secret_file
from ctxwarden.store import SqliteStore


def _secret(path: Path, byte: int) -> Path:
    path.write_bytes(bytes([byte]) * 32)
    return path


def _tenant(engine: Engine, **settings: str) -> str:
    app = build_app(engine, ProxySettings(**settings))  # type: ignore[arg-type]
    return app[STATE].tenants.for_credential("sk-client")


def test_replicas_with_their_own_data_directories_share_the_secret_file(tmp_path: Path) -> None:
    secret = str(_secret(tmp_path / "secret", 7))
    with Engine(EngineConfig(store={"backend": "memory"})) as engine:  # type: ignore[arg-type]
        a = _tenant(engine, data_dir=str(tmp_path / "a"), tenant_secret_file=secret)
        b = _tenant(engine, data_dir=str(tmp_path / "b"), tenant_secret_file=secret)
        own_a = _tenant(engine, data_dir=str(tmp_path / "a"))
        own_b = _tenant(engine, data_dir=str(tmp_path / "b"))
    assert a == b == TenantKeys(bytes([7]) * 32).for_credential("sk-client")
    assert own_a != own_b  # a secret each: the split the option mends


@pytest.mark.parametrize("content", [None, b"short"])
def test_a_missing_or_short_secret_file_is_named(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "secret"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        read_secret_file(path)
    assert caught.value.key == "tenant_secret_file" and str(path) in str(caught.value)
    assert not path.exists() or path.read_bytes() == content  # never made or replaced


async def _start(data_dir: Path, store_path: Path, secret: Path) -> None:
    config = EngineConfig(data_dir=str(data_dir), store={"path": str(store_path)})  # type: ignore[arg-type]
    with Engine(config) as engine:
        app = build_app(engine, ProxySettings(tenant_secret_file=str(secret)))
        async with RunningServer(app):
            pass


async def test_a_replica_with_another_secret_than_the_store_knows_is_told(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared.sqlite3"
    one, other = _secret(tmp_path / "one", 1), _secret(tmp_path / "other", 2)
    with caplog.at_level(logging.ERROR, logger="ctxwarden"):
        await _start(tmp_path / "a", shared, one)
        await _start(tmp_path / "b", shared, one)  # the same secret: nothing to say
        assert not [r for r in caplog.records if "tenant secret" in r.getMessage()]
        await _start(tmp_path / "c", shared, other)
    (record,) = [r for r in caplog.records if "tenant secret" in r.getMessage()]
    assert record.levelno == logging.ERROR and "--tenant-secret-file" in record.getMessage()
    assert "\\x02" not in record.getMessage()  # fingerprints, never the secret


def test_serve_names_the_flag_of_a_missing_secret_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    argv = ["serve", "--port", "0", "--data-dir", str(tmp_path), "--tenant-secret-file"]
    assert main([*argv, str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--tenant-secret-file" in err and "Traceback" not in err and not missing.exists()


def test_recall_derives_the_tenant_with_the_fleets_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = _secret(tmp_path / "secret", 9)
    folder = tmp_path / "data"
    folder.mkdir()
    store = SqliteStore(folder / "store.sqlite3")
    ref = store.put(TenantKeys(secret.read_bytes()).for_credential("sk-client"), "the original")
    store.close()
    monkeypatch.setenv("CLIENT_KEY", "sk-client")
    argv = ["recall", ref, "--data-dir", str(folder)]
    assert main([*argv, "--tenant-secret-file", str(secret)]) == 2  # which client's?
    assert "--credential-env" in capsys.readouterr().err
    with_key = [*argv, "--credential-env", "CLIENT_KEY"]
    assert main([*with_key, "--tenant-secret-file", str(secret)]) == 0
    assert capsys.readouterr().out == "the original\n"
    monkeypatch.setenv("CTXWARDEN_TENANT_SECRET_FILE", str(secret))
    assert main(with_key) == 0
    assert capsys.readouterr().out == "the original\n"


def test_the_fingerprint_is_written_again_so_it_never_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """helper-137: kept as a session state, it expired after store.ttl_seconds, and the
    next replica with a wrong secret found none to compare."""
    config = EngineConfig(data_dir=str(tmp_path))
    with Engine(config) as engine:
        fingerprint = TenantKeys(bytes([3]) * 32).fingerprint()
        _check_secret(engine, fingerprint)
        written: list[bytes] = []
        put_state = engine.store.put_state
        monkeypatch.setattr(
            engine.store, "put_state", lambda *a: (written.append(a[2]), put_state(*a))
        )
        _check_secret(engine, fingerprint)  # as each gc round does
        assert written == [fingerprint.encode()]
        _check_secret(engine, TenantKeys(bytes([4]) * 32).fingerprint())  # another: kept
        assert written == [fingerprint.encode()]


def test_recall_names_the_variable_that_gave_a_bad_secret_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "data"
    SqliteStore(folder / "store.sqlite3").close()
    monkeypatch.setenv("CLIENT_KEY", "sk-client")
    monkeypatch.setenv("CTXWARDEN_TENANT_SECRET_FILE", str(tmp_path / "nope"))
    argv = ["recall", "cw:000000000000", "--data-dir", str(folder), "--credential-env"]
    assert main([*argv, "CLIENT_KEY"]) == 2
    err = capsys.readouterr().err
    assert "CTXWARDEN_TENANT_SECRET_FILE" in err and "--tenant-secret-file" not in err
