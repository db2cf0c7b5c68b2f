"""``ctxwarden serve`` and ``fake-upstream``: flags, environment, a real process."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from ctxwarden.cli import build_parser
from ctxwarden.cli.serve import settings_from_args
from ctxwarden.errors import ConfigError
from ctxwarden.proxy.tenant import TenantKeys, load_or_create_secret


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_flags_win_over_environment_and_defaults(tmp_path: Path) -> None:
    env = {"CTXWARDEN_PORT": "9999", "CTXWARDEN_MODE": "shadow",
           "CTXWARDEN_CANARY_PERCENT": "10", "CTXWARDEN_OPENAI_UPSTREAM": "http://e:1"}  # fmt: skip
    settings, config, _ = settings_from_args(
        _args("--port", "1234", "--data-dir", str(tmp_path), "--admin-token", "t" * 20), env
    )
    assert settings.port == 1234 and settings.mode == "shadow"
    assert settings.canary_percent == 10.0 and settings.openai_upstream == "http://e:1"
    assert settings.anthropic_upstream == "https://api.anthropic.com"
    assert settings.host == "127.0.0.1" and config.data_dir == str(tmp_path)
    with pytest.raises(ConfigError, match="canary_percent"):
        settings_from_args(_args("--canary-percent", "150"), {})
    with pytest.raises(ConfigError, match="admin_token"):
        settings_from_args(_args("--admin-token", "short"), {})


def test_the_memo_budget_comes_from_flag_or_environment_and_is_checked() -> None:
    assert settings_from_args(_args(), {})[0].memo_mb is None
    assert settings_from_args(_args(), {"CTXWARDEN_MEMO_MB": "256"})[0].memo_mb == 256.0
    assert settings_from_args(_args("--memo-mb", "0"), {"CTXWARDEN_MEMO_MB": "9"})[0].memo_mb == 0
    for bad, key in (("lots", "memo-mb"), ("-1", "memo_mb"), ("nan", "memo_mb")):
        with pytest.raises(ConfigError, match=key):
            settings_from_args(_args("--memo-mb", bad), {})


def test_the_owed_body_limit_comes_from_flag_or_environment_and_is_checked() -> None:
    assert settings_from_args(_args(), {})[0].max_owed_body_bytes == 256 * 1024 * 1024
    env = {"CTXWARDEN_MAX_OWED_BODY_BYTES": "1000"}
    assert settings_from_args(_args(), env)[0].max_owed_body_bytes == 1000
    flag = _args("--max-owed-body-bytes", "2000")
    assert settings_from_args(flag, env)[0].max_owed_body_bytes == 2000
    for bad, match in (("lots", "max-owed-body-bytes"), ("0", "max_owed_body_bytes")):
        with pytest.raises(ConfigError, match=match):
            settings_from_args(_args("--max-owed-body-bytes", bad), {})


def test_the_owed_held_budget_comes_from_flag_or_environment_and_is_checked() -> None:
    default = settings_from_args(_args(), {})[0]
    assert default.max_owed_held_bytes is None
    assert default.owed_held_bytes == default.max_owed_body_bytes  # one body of the largest
    env = {"CTXWARDEN_MAX_OWED_HELD_BYTES": "1000"}
    assert settings_from_args(_args(), env)[0].owed_held_bytes == 1000
    flag = _args("--max-owed-held-bytes", "2000")
    assert settings_from_args(flag, env)[0].owed_held_bytes == 2000
    for bad, match in (("lots", "max-owed-held-bytes"), ("0", "max_owed_held_bytes")):
        with pytest.raises(ConfigError, match=match):
            settings_from_args(_args("--max-owed-held-bytes", bad), {})


def test_tenant_secret_is_stable_private_and_keys_never_contain_the_credential(
    tmp_path: Path,
) -> None:
    secret = load_or_create_secret(tmp_path)
    assert load_or_create_secret(tmp_path) == secret
    assert (tmp_path / "proxy.secret").stat().st_mode & 0o777 == 0o600
    key = TenantKeys(secret).for_credential("sk-abc")
    assert key.startswith("t-") and "sk-abc" not in key
    assert TenantKeys(b"another-secret-0123456789").for_credential("sk-abc") != key
    assert TenantKeys(secret).for_headers({}) == "t-anonymous"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def test_serve_against_fake_upstream_processes(tmp_path: Path) -> None:
    fake_port, proxy_port = _free_port(), _free_port()
    exe = [sys.executable, "-m", "ctxwarden"]
    env = {**os.environ, "CTXWARDEN_OPENAI_UPSTREAM": f"http://127.0.0.1:{fake_port}",
           "CTXWARDEN_ANTHROPIC_UPSTREAM": f"http://127.0.0.1:{fake_port}",
           "CTXWARDEN_MEMO_MB": "0"}  # fmt: skip
    fake = subprocess.Popen([*exe, "fake-upstream", "--port", str(fake_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proxy = subprocess.Popen(
        [*exe, "serve", "--port", str(proxy_port), "--data-dir", str(tmp_path)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait(f"http://127.0.0.1:{proxy_port}/healthz")
        _wait(f"http://127.0.0.1:{fake_port}/v1/models")
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", json=body,
                       headers={"Authorization": "Bearer sk-cli"}, timeout=10)  # fmt: skip
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "Hello from the fake upstream."
        metrics = httpx.get(f"http://127.0.0.1:{proxy_port}/metrics", timeout=5).text
        assert 'route="chat",status="200"' in metrics
        assert "\nctxwarden_memo_bytes 0.0\n" in metrics  # the memo budget applies
    finally:
        for process in (proxy, fake):
            process.send_signal(signal.SIGINT if process is fake else signal.SIGTERM)
        _, proxy_err = proxy.communicate(timeout=15)
        fake.communicate(timeout=15)
    assert proxy.returncode == 0 and fake.returncode == 0
    log_lines = [line for line in proxy_err.decode().splitlines() if '"route":"chat"' in line]
    assert len(log_lines) == 1 and "sk-cli" not in proxy_err.decode()


def test_serve_with_bundled_fake_upstream_is_one_command(tmp_path: Path) -> None:
    port = _free_port()
    proxy = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "serve", "--fake-upstream", "--port", str(port),
         "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _wait(f"http://127.0.0.1:{port}/healthz")
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body,
                       headers={"Authorization": "Bearer sk-one"}, timeout=10)  # fmt: skip
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"] == "Hello from the fake upstream."
        exact = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body,
                           headers={"Authorization": "Bearer sk-one",
                                    "x-ctxwarden-mode": "exact"}, timeout=10)  # fmt: skip
        assert exact.status_code == 200
    finally:
        proxy.send_signal(signal.SIGTERM)
        out, err = proxy.communicate(timeout=15)
    assert proxy.returncode == 0
    assert b"fake upstream listening on http://127.0.0.1:" in out
    modes = [line for line in err.decode().splitlines() if '"route":"chat"' in line]
    assert ['"mode":"active"' in m for m in modes] == [True, False]
    assert '"mode":"exact"' in modes[1]


def test_a_bad_number_names_the_flag_or_the_variable_it_came_from() -> None:
    with pytest.raises(ConfigError, match=r"^port: not a number: 'xyz'"):
        settings_from_args(_args("--port", "xyz"), {})
    with pytest.raises(ConfigError, match=r"^CTXWARDEN_PORT: not a number: 'xyz'"):
        settings_from_args(_args(), {"CTXWARDEN_PORT": "xyz"})
    for name in ("CTXWARDEN_MEMO_MB", "CTXWARDEN_MAX_OWED_HELD_BYTES"):
        with pytest.raises(ConfigError, match=rf"^{name}: not a number: 'xyz'"):
            settings_from_args(_args(), {name: "xyz"})


def test_an_unknown_config_key_is_called_one(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text("[pipeline.mask]\nmin_tokenz = 3\n")
    with pytest.raises(ConfigError) as info:
        settings_from_args(_args("--config", str(bad)), {})
    assert str(info.value) == f"{bad}: pipeline.mask.min_tokenz: unknown key"


def test_the_engine_wait_comes_from_flag_or_environment_and_is_checked() -> None:
    assert settings_from_args(_args(), {})[0].max_engine_wait == 1.0
    env = {"CTXWARDEN_MAX_ENGINE_WAIT": "0"}  # no limit
    assert settings_from_args(_args(), env)[0].max_engine_wait == 0.0
    assert settings_from_args(_args("--max-engine-wait", "2.5"), env)[0].max_engine_wait == 2.5
    with pytest.raises(ConfigError, match="max_engine_wait"):
        settings_from_args(_args("--max-engine-wait", "-1"), {})
