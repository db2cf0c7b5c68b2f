"""Rollout safety after a review of exact / shadow / canary and the kill switch
(reviewer H).

- The kill switch engaged while a thinking-bound request waits for the engine thread
  (told ``active`` when it arrived, condensed in exact mode): it goes as the client sent
  it, and a refusal is rescued with the session's adopted replacements, as every
  request sent so is - not by ``drop_block``, which would stick for an hour.
- ``--kill-switch`` / ``CTXWARDEN_KILL_SWITCH=1`` start the proxy with the switch
  engaged (the switch lives in memory only).
- A condensed route's body past ``INLINE_PARSE_BYTES`` is parsed and written off the
  event loop (bodies.py's contract).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.cli import build_parser
from ctxwarden.cli.serve import settings_from_args
from ctxwarden.proxy.bodies import INLINE_PARSE_BYTES
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory
from tests.proxy.test_exact_rescue import MODEL, _condensed_then_thinking
from tests.proxy.test_thinking_session_e2e import _turn

_ADOPTED = "refused: the upstream answered 400 to the request as sent, whose thinking followed"


async def _queued(proxy: Proxy) -> None:
    """Wait until a condense waits for the (busy) engine thread."""
    for _ in range(1000):
        if sum(proxy.state.executor.queued()) >= 1:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no condense queued")


async def test_the_kill_switch_engaged_while_a_bound_request_is_queued_rescues_it_as_sent(
    proxy: Proxy,
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    busy = threading.Event()
    try:
        async with aiohttp.ClientSession() as http:
            await _condensed_then_thinking(http, proxy, messages)
            sent = len(proxy.fake.received)
            started = threading.Event()

            def behind() -> None:  # the engine thread is behind
                started.set()
                busy.wait(10)

            proxy.state.executor.submit(behind)
            assert await asyncio.to_thread(started.wait, 10)
            turn = asyncio.create_task(_turn(http, proxy, MODEL, messages, 12, True))
            await _queued(proxy)  # told "active" on arrival, its condense queued
            proxy.state.kill_switch.set(True, "test")
            busy.set()
            event = await turn
            received = proxy.fake.received[sent:]
            proxy.state.kill_switch.set(False, "test")
            after = len(proxy.fake.received)
            following = await _turn(http, proxy, MODEL, messages, 13, True)
    finally:
        busy.set()
    assert event["status"] == 200 and event["mode"] == "exact"
    assert event["fallback_reason"].startswith(_ADOPTED)
    as_sent, adopted = received  # refused as sent, then with the adopted replacements
    assert len(adopted.body) < len(as_sent.body)
    assert not any(b"drop_block" in r.body for r in received)
    # the session is not left asking for drop_block once the switch is released
    assert following["mode"] == "active" and following["status"] == 200
    assert not any(b"drop_block" in r.body for r in proxy.fake.received[after:])


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["--kill-switch"], {}), ([], {"CTXWARDEN_KILL_SWITCH": "1"})],
)
def test_kill_switch_flag_or_variable_starts_it_engaged(
    argv: list[str], env: dict[str, str]
) -> None:
    settings, _, _ = settings_from_args(build_parser().parse_args(["serve", *argv]), env)
    assert settings.kill_switch is True
    default, _, _ = settings_from_args(build_parser().parse_args(["serve"]), {})
    assert default.kill_switch is False


async def test_a_proxy_started_with_the_kill_switch_sends_every_request_as_sent(
    make_proxy: ProxyFactory,
) -> None:
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json",
               "x-ctxwarden-mode": "active"}  # fmt: skip
    async with make_proxy(kill_switch=True) as proxy, aiohttp.ClientSession() as http:
        async with http.post(proxy.url + "/v1/chat/completions", data=body, headers=headers) as r:
            assert r.status == 200
        async with http.get(proxy.url + "/readyz") as r:
            assert (await r.json())["kill_switch"] is True
    event = proxy.recorder.events[-1]
    assert (event["mode"], event["rollout_reason"]) == ("exact", "kill_switch")
    assert proxy.fake.received[-1].body == body


def _on_loop_calls(
    monkeypatch: pytest.MonkeyPatch, name: str, loop_thread: threading.Thread
) -> list[int]:
    """Sizes of large JSON handled by ``orjson.<name>`` on the event loop's thread, called
    from the proxy's own modules (the fake upstream runs on that loop too)."""
    seen: list[int] = []
    original: Callable[..., Any] = getattr(orjson, name)

    def spy(value: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(value, *args, **kwargs)
        caller = str(sys._getframe(1).f_globals.get("__name__", ""))
        size = len(value if isinstance(value, bytes | str) else out)
        own = caller.startswith("ctxwarden.proxy.") and ".fake_" not in caller
        if own and threading.current_thread() is loop_thread and size > INLINE_PARSE_BYTES:
            seen.append(size)
        return out

    monkeypatch.setattr(orjson, name, spy)
    return seen


@pytest.mark.parametrize("mode", ["shadow", "active"])
async def test_a_large_body_is_parsed_and_written_off_the_event_loop(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    loop_thread = threading.current_thread()
    loads = _on_loop_calls(monkeypatch, "loads", loop_thread)
    dumps = _on_loop_calls(monkeypatch, "dumps", loop_thread)
    output = "\n".join(f"line {i}: " + "x" * 60 for i in range(8000))  # ~550 KB
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "sh", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
        {"role": "user", "content": "and now?"},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}]
    body = {"model": "gpt-4o", "messages": messages, "tools": tools}  # an agent: tool added
    headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json",
               "x-ctxwarden-mode": mode}  # fmt: skip
    data = orjson.dumps(body)
    assert len(data) > INLINE_PARSE_BYTES
    async with aiohttp.ClientSession() as http, http.post(
        proxy.url + "/v1/chat/completions", data=data, headers=headers
    ) as r:  # fmt: skip
        assert r.status == 200
    await proxy.state.drain()
    assert loads == [] and dumps == []
    if mode == "active":
        assert proxy.recorder.events[-1]["recall_injected"]  # written by ctxwarden


async def test_exact_mode_adds_no_accept_header_the_client_did_not_send(proxy: Proxy) -> None:
    # aiohttp's client added "Accept: */*" to a request that had none
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
    headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json",
               "x-ctxwarden-mode": "exact"}  # fmt: skip
    async with aiohttp.ClientSession(skip_auto_headers=("Accept",)) as http:
        async with http.post(proxy.openai_url + "/chat/completions", data=body,
                             headers=headers) as r:  # fmt: skip
            assert r.status == 200
        got = {k.lower() for k in proxy.fake.received[-1].headers}
        assert "accept" not in got
        async with http.post(proxy.openai_url + "/chat/completions", data=body,
                             headers={**headers, "Accept": "application/json"}) as r:  # fmt: skip
            assert r.status == 200
        assert {k.lower(): v for k, v in proxy.fake.received[-1].headers.items()}[
            "accept"
        ] == "application/json"
