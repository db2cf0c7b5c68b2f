"""``ctxwarden serve`` and ``fake-upstream``: flags, environment, a real process."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest

from ctxwarden.cli import build_parser
from ctxwarden.cli.serve import env_flag, settings_from_args
from ctxwarden.errors import ConfigError
from ctxwarden.proxy import FakeUpstream
from ctxwarden.proxy.server import _without_credentials
from ctxwarden.proxy.tenant import TenantKeys, load_or_create_secret
from tests.proxy.conftest import ProxyFactory, free_port, openai_client


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
    with pytest.raises(ConfigError, match=r"^--canary-percent: "):
        settings_from_args(_args("--canary-percent", "150"), {})
    with pytest.raises(ConfigError, match=r"^--admin-token: "):
        settings_from_args(_args("--admin-token", "short"), {})


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


def _wait(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=0.5).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not come up")


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_serve_against_fake_upstream_processes(tmp_path: Path) -> None:
    fake_port, proxy_port = free_port(), free_port()
    exe = [sys.executable, "-m", "ctxwarden"]
    env = {**os.environ, "CTXWARDEN_OPENAI_UPSTREAM": f"http://127.0.0.1:{fake_port}",
           "CTXWARDEN_ANTHROPIC_UPSTREAM": f"http://127.0.0.1:{fake_port}",
           "CTXWARDEN_MEMO_MB": "0"}  # fmt: skip
    # SIGINT ignored, as in a shell's background job (pytest run with "&"): the fake
    # inherited it and never stopped; it handles SIGINT and SIGTERM itself now
    fake = subprocess.Popen([*exe, "fake-upstream", "--port", str(fake_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_ignore_sigint)  # fmt: skip
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
    port = free_port()
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
    fake_url = out.decode().split("fake upstream listening on ")[1].split()[0]
    assert (
        f"(OpenAI upstream {fake_url}, Anthropic upstream {fake_url}, mode active)" in err.decode()
    )
    modes = [line for line in err.decode().splitlines() if '"route":"chat"' in line]
    assert ['"mode":"active"' in m for m in modes] == [True, False]
    assert '"mode":"exact"' in modes[1]


def test_a_bad_number_names_the_flag_or_the_variable_it_came_from() -> None:
    with pytest.raises(ConfigError, match=r"^--port: not a number: 'xyz'"):
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


_MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("flag", "attribute", "default", "env_value", "flag_value", "bad"),
    [
        # (flag, setting read, its default, CTXWARDEN_* value -> setting, flag value ->
        # setting, refused values with what the error names)
        ("--memo-mb", "memo_mb", None, ("256", 256.0), ("0", 0.0),
         (("lots", "^--memo-mb: "), ("-1", "^--memo-mb: "), ("nan", "^--memo-mb: "))),
        ("--max-owed-body-bytes", "max_owed_body_bytes", 256 * _MIB, ("1000", 1000),
         ("2000", 2000), (("lots", "^--max-owed-body-bytes: "), ("0", "^--max-owed-body-bytes: "))),
        ("--max-owed-held-bytes", "owed_held_bytes", 256 * _MIB, ("1000", 1000), ("2000", 2000),
         (("lots", "^--max-owed-held-bytes: "), ("0", "^--max-owed-held-bytes: "))),
        ("--max-engine-wait", "max_engine_wait", 1.0, ("0", 0.0), ("2.5", 2.5),
         (("-1", "^--max-engine-wait: "),)),
        ("--max-bound-wait", "max_bound_wait", 30.0, ("0", 0.0), ("5", 5.0),
         (("-1", "^--max-bound-wait: "), ("nan", "^--max-bound-wait: "))),
    ],
)  # fmt: skip
def test_a_number_comes_from_flag_or_environment_and_is_checked(
    flag: str,
    attribute: str,
    default: Any,
    env_value: tuple[str, Any],
    flag_value: tuple[str, Any],
    bad: tuple[tuple[str, str], ...],
) -> None:
    env = {"CTXWARDEN_" + flag.lstrip("-").replace("-", "_").upper(): env_value[0]}
    assert getattr(settings_from_args(_args(), {})[0], attribute) == default
    assert getattr(settings_from_args(_args(), env)[0], attribute) == env_value[1]
    assert (
        getattr(settings_from_args(_args(flag, flag_value[0]), env)[0], attribute) == flag_value[1]
    )
    for value, match in bad:
        with pytest.raises(ConfigError, match=match):
            settings_from_args(_args(flag, value), {})


def test_the_owed_held_budget_defaults_to_one_body_of_the_largest_size() -> None:
    default = settings_from_args(_args(), {})[0]
    assert default.max_owed_held_bytes is None
    assert default.owed_held_bytes == default.max_owed_body_bytes


@pytest.mark.parametrize(
    ("value", "on"),
    [("1", True), ("true", True), ("Yes", True), (" on ", True), ("0", False), ("", False),
     ("FALSE", False), ("no", False), ("off", False)],
)  # fmt: skip
def test_a_yes_no_variable_takes_the_usual_words(value: str, on: bool) -> None:
    assert env_flag({"CTXWARDEN_FAKE_UPSTREAM": value}, "CTXWARDEN_FAKE_UPSTREAM") is on
    assert env_flag({}, "CTXWARDEN_FAKE_UPSTREAM") is False


def test_a_mistyped_fake_upstream_variable_stops_serve_naming_it(tmp_path: Path) -> None:
    """A typo must not start the proxy against the real APIs."""
    env = {**os.environ, "CTXWARDEN_FAKE_UPSTREAM": "ture"}
    done = subprocess.run(
        [sys.executable, "-m", "ctxwarden", "serve", "--port", str(free_port()),
         "--data-dir", str(tmp_path)],
        env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == [
        "ctxwarden serve: error: CTXWARDEN_FAKE_UPSTREAM: "
        "'ture' is not 1/true/yes/on or 0/false/no/off"
    ]


@pytest.mark.parametrize(
    ("url", "logged"),
    [
        ("https://api.openai.com", "https://api.openai.com"),
        ("https://user:sk-secret@gw.example:8443/v1", "https://gw.example:8443/v1"),
        ("http://sk-secret@[::1]:9/x", "http://[::1]:9/x"),
        ("https://gw.example/v1?key=sk-secret", "https://gw.example/v1"),
        ("http://[::1", "<unreadable url>"),
    ],
)
def test_the_listening_line_leaves_credentials_out_of_upstreams(url: str, logged: str) -> None:
    assert _without_credentials(url) == logged


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://[::1", "not a URL (Invalid IPv6 URL)"),
        ("http://user:key@host:99999", "not a URL (Port out of range 0-65535)"),
        ("http://", "has no host"),
        (  # the HTTP client refuses URL credentials next to the client's header: a 500
            "https://user:key@api.example.com",
            "holds a user name or password: not supported (the client's own "
            "Authorization or x-api-key header is forwarded)",
        ),
    ],
)
def test_an_upstream_that_is_no_url_stops_serve_before_it_listens(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_args(_args("--openai-upstream", url), {})
    assert str(info.value) == f"--openai-upstream: {message}"


_NO_QUERY = (
    "holds a query or fragment (? or #): not supported (give the origin, with a path "
    "prefix if any; the client's own path and query are appended)"
)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9?api-version=2024-10-21",
        "https://gw.example/openai?key=sk-secret",
        "http://127.0.0.1:9/#x",
        "http://127.0.0.1:9?",
        "http://127.0.0.1:9#",
    ],
)
def test_an_upstream_with_a_query_or_fragment_stops_serve_naming_it(url: str) -> None:
    """The client's path is appended to the upstream URL: after a query every request
    went to ``/`` (a 404 for each), while the startup line, which leaves queries out,
    hid why. Refused at start, naming the flag or variable, never the value."""
    for args, env, named in (
        (_args("--anthropic-upstream", url), {}, "--anthropic-upstream"),
        (_args(), {"CTXWARDEN_OPENAI_UPSTREAM": url}, "CTXWARDEN_OPENAI_UPSTREAM"),
    ):
        with pytest.raises(ConfigError) as info:
            settings_from_args(args, env)
        assert str(info.value) == f"{named}: {_NO_QUERY}"
        assert "sk-secret" not in str(info.value)


async def test_an_upstream_path_prefix_still_comes_before_the_clients_path(
    make_proxy: ProxyFactory, fake: FakeUpstream
) -> None:
    async with (
        make_proxy(openai_upstream=fake.url + "/gateway/") as proxy,
        openai_client(proxy) as client,
    ):
        with pytest.raises(openai.NotFoundError):  # the fake serves no prefix
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
    assert proxy.fake.received[-1].path == "/gateway/v1/chat/completions"
