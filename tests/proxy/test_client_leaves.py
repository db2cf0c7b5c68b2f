"""A client that goes away: after the whole answer (no abort), mid-answer (499), and
what the request's event says either way (status, overhead, no error of aiohttp's)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall, handlers, relay
from tests.proxy.conftest import KEY_A, Proxy

AUTH = {"Authorization": f"Bearer {KEY_A}", "x-api-key": KEY_A, "Content-Type": "application/json"}

_USER = [{"role": "user", "content": "hi"}]
_APIS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any], bytes]] = {
    # route: (path, event route, body, a tool of the client's own, the final event's data)
    "chat": (
        "/v1/chat/completions", "chat", {"model": "gpt-4o", "messages": _USER},
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}},
        b"data: [DONE]",
    ),
    "messages": (
        "/v1/messages", "messages", {"model": "claude-opus-5", "max_tokens": 64, "messages": _USER},
        {"name": "read", "input_schema": {"type": "object"}},
        b'"type":"message_stop"',
    ),
    "responses": (
        "/v1/responses", "responses", {"model": "gpt-4o", "input": "hi"},
        {"type": "function", "name": "read", "parameters": {"type": "object"}},
        b'"type":"response.completed"',
    ),
}  # fmt: skip


def _body(api: str, recall: bool) -> dict[str, Any]:
    """A streamed request; with ``recall`` it offers a tool of its own, so the proxy
    adds the recall tool and relays the answer through its recall loop."""
    _, _, body, tool, _ = _APIS[api]
    return {**body, "stream": True, **({"tools": [tool]} if recall else {})}


async def _read_until(proxy: Proxy, api: str, body: dict[str, Any], marker: bytes) -> bytes:
    """Stream ``body`` and close the connection as soon as a line holds ``marker`` (as
    the openai SDK does after ``[DONE]``); what was read."""
    seen = b""
    async with aiohttp.ClientSession() as session:
        resp = await session.post(proxy.url + _APIS[api][0], json=body, headers=AUTH)
        assert resp.status == 200
        async for line in resp.content:
            seen += line
            if marker in line:
                break
        resp.close()  # drop the connection
    return seen


async def _event(proxy: Proxy, route: str) -> dict[str, Any]:
    for _ in range(250):
        if any(e.get("route") == route for e in proxy.recorder.events):
            return proxy.recorder.last(route=route)
        await asyncio.sleep(0.02)
    raise AssertionError(f"no {route} event")


@pytest.mark.parametrize("recall", [False, True], ids=["plain", "recall"])
@pytest.mark.parametrize("api", list(_APIS))
async def test_a_client_that_leaves_after_the_final_event_had_the_whole_answer(
    proxy: Proxy, api: str, recall: bool
) -> None:
    """The upstream's body ends a moment after the final event; the client closes the
    connection once it read that event. It aborted nothing: the upstream's status, no
    ``client_disconnected``, and the time the stream took is the upstream's, not the
    proxy's overhead (it used to be a 499 whose overhead was the whole stream)."""
    proxy.fake.script(Reply(text="one two", chunk_delay=0.15))
    seen = await _read_until(proxy, api, _body(api, recall), _APIS[api][4])
    assert _APIS[api][4] in seen and b"two" in seen
    event = await _event(proxy, _APIS[api][1])
    assert event["status"] == 200 and "client_disconnected" not in event
    assert event.get("recall_injected", False) is recall
    assert event["overhead_ms"] < event["total_ms"] / 2


@pytest.mark.parametrize("api", list(_APIS))
async def test_a_client_that_leaves_before_the_final_event_aborted(proxy: Proxy, api: str) -> None:
    """Gone mid-answer: a 499, the upstream request cancelled, and the time waited for
    the upstream counted as the upstream's."""
    proxy.fake.script(Reply(text="word " * 100, delay=0.3, chunk_delay=0.05))
    await _read_until(proxy, api, _body(api, False), b"word")
    event = await _event(proxy, _APIS[api][1])
    assert event["status"] == 499 and event["client_disconnected"] is True
    assert event["overhead_ms"] < event["total_ms"] / 2
    for _ in range(100):
        if proxy.fake.received[-1].cancelled:
            break
        await asyncio.sleep(0.02)
    assert proxy.fake.received[-1].cancelled


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_during_a_recall_continuation_cancels_it(
    proxy: Proxy, stream: bool
) -> None:
    """The continuation round is cancelled like a first round, and the request logged
    as a client disconnect; the time its round waited is the upstream's."""
    recall = ToolCall(RECALL_TOOL_NAME, {"ref": "cw:000000000000"})
    proxy.fake.script(Reply(text="", tool_calls=[recall], delay=0.2), Reply(text="x", delay=3.0))
    async with aiohttp.ClientSession() as session:
        body = {**_body("chat", True), "stream": stream}

        async def call() -> None:
            url = proxy.url + "/v1/chat/completions"
            async with session.post(url, json=body, headers=AUTH) as resp:
                await resp.read()

        request = asyncio.ensure_future(call())
        for _ in range(250):  # the continuation round is under way
            if len(proxy.fake.received) == 2:
                break
            await asyncio.sleep(0.02)
        assert len(proxy.fake.received) == 2
        await asyncio.sleep(0.5)
        request.cancel()  # the client goes away
        with pytest.raises(asyncio.CancelledError):
            await request
    event = await _event(proxy, "chat")
    assert event["status"] == 499 and event["client_disconnected"] is True
    assert event["recall_rounds"] == 1
    assert event["overhead_ms"] < event["total_ms"] / 2  # not the 500 ms round 2 waited
    for _ in range(100):
        if proxy.fake.received[-1].cancelled:
            break
        await asyncio.sleep(0.02)
    assert proxy.fake.received[-1].cancelled and not proxy.fake.received[-1].finished


class _ClosingResponse(web.StreamResponse):
    """The proxy's response to a client that closed the connection: ``writes`` writes go
    through, then every write (and the end) meets the closing transport."""

    writes = 0

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        if type(self).writes <= 0:
            raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
        type(self).writes -= 1
        await super().write(data)

    async def write_eof(self, data: bytes = b"") -> None:
        raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")


def _closing(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    """The proxy's streamed responses (only theirs: the fake upstream runs on aiohttp
    too) find the client gone after ``writes`` writes."""
    _ClosingResponse.writes = writes
    patched = SimpleNamespace(**{**vars(web), "StreamResponse": _ClosingResponse})
    monkeypatch.setattr(relay, "web", patched)


@pytest.mark.parametrize("recall", [False, True], ids=["plain", "recall"])
@pytest.mark.parametrize("api", list(_APIS))
async def test_a_connection_closed_before_the_end_is_written_is_no_error(
    proxy: Proxy, api: str, recall: bool, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The client closed the connection after the final event, before the proxy wrote
    the end of the body (the openai SDK does, racing the upstream's end): logged as
    the answer's status, not as status 0 plus an error of aiohttp's."""
    _closing(monkeypatch, writes=10_000)
    proxy.fake.script(Reply(text="one two"))
    with caplog.at_level(logging.INFO):
        seen = await _read_until(proxy, api, _body(api, recall), _APIS[api][4])
        event = await _event(proxy, _APIS[api][1])
    assert _APIS[api][4] in seen
    assert event["status"] == 200 and "client_disconnected" not in event
    assert [r.getMessage() for r in caplog.records if r.name.startswith("aiohttp")] == []


@pytest.mark.parametrize("recall", [False, True], ids=["plain", "recall"])
async def test_a_connection_closed_mid_answer_is_a_quiet_499(
    proxy: Proxy, recall: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that finds the client gone mid-answer: a 499, the connection cut (never
    an answer ended as if whole), and no error of aiohttp's."""
    _closing(monkeypatch, writes=2)
    proxy.fake.script(Reply(text="word " * 20, chunk_delay=0.01))
    with caplog.at_level(logging.INFO):
        async with aiohttp.ClientSession() as session:
            resp = await session.post(
                proxy.url + "/v1/chat/completions", json=_body("chat", recall), headers=AUTH
            )
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        event = await _event(proxy, "chat")
    assert event["status"] == 499 and event["client_disconnected"] is True
    assert [r.getMessage() for r in caplog.records if r.name.startswith("aiohttp")] == []


async def test_a_failure_of_the_proxys_own_is_a_500_never_status_0(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> web.StreamResponse:
        raise RuntimeError("a bug")

    monkeypatch.setattr(handlers, "relay", broken)
    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy.url + "/v1/models", headers=AUTH) as resp,
    ):
        assert resp.status == 500
    event = await _event(proxy, "models")
    assert event["status"] == 500 and event["level"] == "error"
    assert event["error_type"] == "RuntimeError"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages",
                                  "/v1/models"])  # fmt: skip
async def test_a_client_that_leaves_while_sending_its_body_has_an_event(
    proxy: Proxy, path: str
) -> None:
    """A body cut off before its end: the request still gets its one event (the
    condensed routes read their body before the event was set up, so a client gone
    by then left no trace at all), and nothing reaches the upstream."""
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY_A}\r\n"
        f"x-api-key: {KEY_A}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"model": "gpt-4o", "messages": [')
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await writer.wait_closed()
    del reader
    route = path.rsplit("/", 1)[-1].replace("completions", "chat")
    event = await _event(proxy, route)
    assert event["status"] == 499 and event["client_disconnected"] is True
    assert proxy.fake.received == []
