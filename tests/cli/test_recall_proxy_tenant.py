"""``ctxwarden recall --credential-env VAR``: what the proxy stored for a client is
filed under a keyed hash of its API key (its tenant), which the user cannot compute;
with the key in an environment variable and the proxy's data directory, the CLI
derives that tenant and recalls the original. Nothing else reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.proxy.tenant import TenantKeys, load_or_create_secret
from ctxwarden.store import SqliteStore

ORIGINAL = "line one\nline two of the proxied output\nline three"


@pytest.fixture
def proxy_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A data directory as the proxy leaves it: its secret, and one original stored for
    the client whose key is ``sk-client-1``; returns the folder and the reference."""
    monkeypatch.setenv("CTXWARDEN_DATA_DIR", str(tmp_path / "unused-default"))
    folder = tmp_path / "proxy-data"
    tenant = TenantKeys(load_or_create_secret(folder)).for_credential("sk-client-1")
    store = SqliteStore(folder / "store.sqlite3")
    ref = store.put(tenant, ORIGINAL)
    store.close()
    return folder, ref


def test_the_clients_key_recalls_its_original(
    proxy_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, ref = proxy_dir
    assert main(["recall", ref, "--data-dir", str(folder)]) == 2  # not the CLI's tenant
    assert "no artifact" in capsys.readouterr().err
    monkeypatch.setenv("CLIENT_KEY", "sk-client-1")
    argv = ["recall", ref, "--data-dir", str(folder), "--credential-env", "CLIENT_KEY"]
    assert main([*argv, "--lines", "2"]) == 0
    out, err = capsys.readouterr()
    assert out == "line two of the proxied output\n" and err == ""


def test_another_key_or_a_missing_variable_reaches_nothing(
    proxy_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, ref = proxy_dir
    monkeypatch.setenv("OTHER_KEY", "sk-client-2")
    argv = ["recall", ref, "--data-dir", str(folder), "--credential-env"]
    assert main([*argv, "OTHER_KEY"]) == 2
    assert "no artifact" in capsys.readouterr().err
    monkeypatch.delenv("NOT_SET", raising=False)
    assert main([*argv, "NOT_SET"]) == 2
    err = capsys.readouterr().err
    assert "NOT_SET is unset or empty" in err and "Traceback" not in err


def test_a_data_directory_the_proxy_never_used_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "cli-only"
    store = SqliteStore(folder / "store.sqlite3")
    ref = store.put("local", ORIGINAL)
    store.close()
    monkeypatch.setenv("CLIENT_KEY", "sk-client-1")
    argv = ["recall", ref, "--data-dir", str(folder), "--credential-env", "CLIENT_KEY"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"no proxy.secret in {folder}" in err and "sk-client-1" not in err
    assert not (folder / "proxy.secret").exists()  # looked for, never made


def test_tenant_and_credential_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["recall", "cw:5f3a9c21e0b4", "--tenant", "t", "--credential-env", "K"])
    assert info.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_the_proxys_layout_with_a_store_file_in_the_config_works(
    proxy_dir: tuple[Path, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """``serve --config C --data-dir D`` where C names the store file: --data-dir then
    names the secret's directory (not a second store)."""
    folder, ref = proxy_dir
    config = tmp_path / "proxy.toml"
    config.write_text(f'[store]\npath = "{folder / "store.sqlite3"}"\n')
    monkeypatch.setenv("CLIENT_KEY", "Bearer sk-client-1")  # as the header carries it
    argv = ["recall", ref, "--config", str(config), "--data-dir", str(folder)]
    assert main([*argv, "--credential-env", "CLIENT_KEY"]) == 0
    assert capsys.readouterr().out == ORIGINAL + "\n"


def test_a_key_given_instead_of_a_variable_name_is_not_echoed(
    proxy_dir: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, ref = proxy_dir
    argv = ["recall", ref, "--data-dir", str(folder), "--credential-env", "sk-live-abc.123"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not an environment variable name" in err and "sk-live" not in err
