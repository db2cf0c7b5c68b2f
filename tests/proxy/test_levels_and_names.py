"""Log levels that say whose fault it was, and errors that name what and where.

- The startup line is at info, shown by ``serve``'s default log level.
- An upstream that fails (no answer, a stall, a cut stream) is at warning whether or
  not the answer had started; a malformed request relayed as sent (outside the canary,
  or shadow) is the client's fault: at warning, not error.
- ``serve`` and ``fake-upstream`` name the flag or the variable a bad value came from,
  an address they cannot listen on included; an unreachable upstream is named by its
  host and port, never a key.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import orjson
import pytest

from ctxwarden.cli import build_parser, main
from ctxwarden.cli.serve import settings_from_args
from ctxwarden.errors import ConfigError
from ctxwarden.proxy import Reply
from ctxwarden.proxy.listen import ListenError
from ctxwarden.proxy.upstream import upstream_name
from tests.proxy.conftest import KEY_A, NO_CLIENT_TIMEOUT, ProxyFactory, free_port

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _env() -> dict[str, str]:
    """The environment without any ``CTXWARDEN_*`` variable (a default start)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CTXWARDEN_")}


def _serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwarden", "serve", *argv], env={**_env(), **(env or {})},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


# --- levels ---------------------------------------------------------------------------


def test_the_startup_line_is_info_and_shown_by_default(tmp_path: Path) -> None:
    port = free_port()
    proxy = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "serve", "--fake-upstream", "--port", str(port),
         "--data-dir", str(tmp_path)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proxy.stderr is not None
        line = proxy.stderr.readline()  # the first log line, once it listens
    finally:
        proxy.send_signal(signal.SIGTERM)
        proxy.communicate(timeout=15)
    assert proxy.returncode == 0
    logged = orjson.loads(line)
    assert logged["msg"].startswith(f"ctxwarden proxy listening on http://127.0.0.1:{port} ")
    assert logged["level"] == "info"


async def test_an_upstream_timeout_is_a_warning_streamed_or_not(make_proxy: ProxyFactory) -> None:
    async with make_proxy(read_timeout=0.3) as proxy:
        proxy.fake.script(Reply(delay=2.0))
        async with (
            aiohttp.ClientSession() as session,
            session.post(proxy.openai_url + "/chat/completions", json=CHAT, headers=AUTH) as r,
        ):
            assert r.status == 504
            message = (await r.json())["error"]["message"]
        # the client is told what failed, not where (the log names the upstream)
        assert message == "upstream did not answer within 0.3s"
        whole = proxy.recorder.last(route="chat")
        proxy.fake.script(Reply(text="one two three", chunk_delay=2.0))
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=0) as client:  # fmt: skip
            stream = await client.chat.completions.create(  # type: ignore[call-overload]
                **CHAT, stream=True, extra_headers=NO_CLIENT_TIMEOUT
            )
            with pytest.raises(openai.APIError):  # a stall cuts the stream
                async for _ in stream:
                    pass
        cut = proxy.recorder.last(route="chat")
    assert (whole["status"], whole["error_type"]) == (504, "UpstreamTimeout")
    assert (cut["status"], cut["error_type"], cut["stream_cut"]) == (504, "UpstreamTimeout", True)
    assert whole["level"] == cut["level"] == "warning"


async def test_an_unreachable_upstream_is_a_warning_named_by_host_never_by_key(
    make_proxy: ProxyFactory,
) -> None:
    port = free_port()
    # a URL holding a user name, password, query or fragment is refused when serve
    # starts; a path may still hold a key (gateways put one there), and the message
    # names neither (the client is told what failed; the log line names host and port)
    dead = f"http://127.0.0.1:{port}/base/sk-in-path"
    plain = {"Content-Type": "application/json", "Authorization": "Bearer sk-client"}
    async with make_proxy(openai_upstream=dead) as proxy:
        async with (
            aiohttp.ClientSession() as session,
            session.post(proxy.openai_url + "/chat/completions", json=CHAT, headers=plain) as r,
        ):
            assert r.status == 502
            message = (await r.json())["error"]["message"]
        event = proxy.recorder.last(route="chat")
    assert message == "upstream unavailable: ClientConnectorError"
    assert "127.0.0.1" not in message
    assert event["level"] == "warning" and "sk-" not in orjson.dumps(event).decode()


async def test_a_malformed_request_outside_the_canary_is_a_warning(
    make_proxy: ProxyFactory,
) -> None:
    """Relayed as sent for the upstream to judge: the client's fault, not ctxwarden's."""
    # a tool message answering no call
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"a"},{"role":"tool"}]}'
    async with make_proxy(canary_percent=0) as proxy:
        async with (
            aiohttp.ClientSession() as session,
            session.post(proxy.openai_url + "/chat/completions", data=body, headers=AUTH) as r,
        ):
            assert r.status == 400  # the upstream's refusal, relayed
        await proxy.state.drain()
        (event,) = proxy.recorder.events
        assert proxy.fake.received[-1].body == body
    assert event["rollout_reason"] == "canary_out" and event["mode"] == "shadow"
    assert event["fallback_reason"] == "proxy: malformed request at /messages/1/tool_call_id"
    assert event["level"] == "warning"


# --- names ----------------------------------------------------------------------------


def _settings_error(*argv: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        settings_from_args(build_parser().parse_args(["serve", *argv]), env or {})
    return str(info.value)


@pytest.mark.parametrize(
    ("flag", "value", "reason"),
    [
        ("--mode", "turbo", "must be active, shadow or exact"),
        ("--canary-percent", "150", "must be between 0 and 100"),
        ("--canary-percent", "lots", "not a number: 'lots'"),
        ("--port", "70000", "70000 is not a TCP port (0-65535)"),
        ("--openai-upstream", "ftp://x", "must be an http(s) origin"),
        ("--log-level", "loud", "'loud' is not debug, info, warning or error"),
        ("--gc-interval", "0.5", "0.5 is not 0 (never) or 1 to 604800 seconds"),
    ],
)
def test_a_bad_value_names_the_flag_or_the_variable_it_came_from(
    flag: str, value: str, reason: str
) -> None:
    variable = "CTXWARDEN_" + flag.lstrip("-").replace("-", "_").upper()
    assert _settings_error(flag, value) == f"{flag}: {reason}"
    assert _settings_error(env={variable: value}) == f"{variable}: {reason}"
    ok = "50" if flag == "--canary-percent" else None
    if ok is not None:  # the flag wins: a good flag over a bad variable starts
        settings_from_args(build_parser().parse_args(["serve", flag, ok]), {variable: value})


def test_a_bad_read_timeout_variable_names_it() -> None:
    error = _settings_error(env={"CTXWARDEN_READ_TIMEOUT": "-1"})
    assert error == "CTXWARDEN_READ_TIMEOUT: -1.0 is not a number of seconds above 0"


def test_serve_names_the_host_it_cannot_listen_on(tmp_path: Path) -> None:
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: no name lookup needed
    done = _serve("--host", "192.0.2.1", "--port", "0", "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "ctxwarden serve: error: --host: cannot listen on 192.0.2.1:0: "
        + os.strerror(errno.EADDRNOTAVAIL)
    )
    by_variable = _serve("--data-dir", str(tmp_path), env={"CTXWARDEN_HOST": "192.0.2.1"})
    assert (
        by_variable.stderr.strip()
        .splitlines()[-1]
        .startswith("ctxwarden serve: error: CTXWARDEN_HOST: cannot listen on 192.0.2.1:8787: ")
    )


def test_serve_names_a_port_in_use(tmp_path: Path, taken_port: int) -> None:
    done = _serve("--data-dir", str(tmp_path), env={"CTXWARDEN_PORT": str(taken_port)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"ctxwarden serve: error: CTXWARDEN_PORT: cannot listen on 127.0.0.1:{taken_port}: "
        + os.strerror(errno.EADDRINUSE)
    )


def test_fake_upstream_names_the_address_it_cannot_listen_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    for name in ("CTXWARDEN_FAKE_HOST", "CTXWARDEN_FAKE_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["fake-upstream", "--port", str(taken_port)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ctxwarden fake-upstream: error: --port: cannot listen on 127.0.0.1:{taken_port}: "
        + os.strerror(errno.EADDRINUSE)
    )
    monkeypatch.setenv("CTXWARDEN_FAKE_HOST", "192.0.2.1")
    assert main(["fake-upstream", "--port", "0"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith(
            "ctxwarden fake-upstream: error: CTXWARDEN_FAKE_HOST: cannot listen on 192.0.2.1:0: "
        )
    )


def test_a_name_that_does_not_resolve_is_the_hosts_fault() -> None:
    error = ListenError(
        "nonexistent.invalid", 8787, socket.gaierror(-2, "Name or service not known")
    )
    assert str(error) == "cannot listen on nonexistent.invalid:8787: Name or service not known"
    assert error.option == "host" and isinstance(error, OSError)
    in_use = ListenError("::1", 80, OSError(errno.EADDRINUSE, "error while attempting to bind"))
    assert str(in_use) == f"cannot listen on [::1]:80: {os.strerror(errno.EADDRINUSE)}"
    assert in_use.option == "port"


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://api.openai.com/v1/chat/completions", "api.openai.com"),
        ("https://user:sk-secret@gw.example:8443/v1?key=sk-q", "gw.example:8443"),
        ("http://[::1]:9/x", "[::1]:9"),
        ("http://[::1", "<unreadable url>"),
    ],
)
def test_an_upstream_is_named_by_host_and_port_only(url: str, name: str) -> None:
    assert upstream_name(url) == name


async def test_a_connect_timeout_names_the_connect_limit(make_proxy: ProxyFactory) -> None:
    # a listening socket whose backlog is full completes no new handshake: connect stalls
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        upstream = f"http://127.0.0.1:{port}"
        async with (
            make_proxy(openai_upstream=upstream, connect_timeout=0.3, read_timeout=600.0) as proxy,
            aiohttp.ClientSession() as session,
            session.post(proxy.openai_url + "/chat/completions", json=CHAT, headers=AUTH) as r,
        ):
            assert r.status == 504
            message = (await r.json())["error"]["message"]
        assert message == "upstream: no connection within 0.3s"
    finally:
        for filler in fillers:
            filler.close()
        server.close()
