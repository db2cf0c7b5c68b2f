"""Refusals after helper-94's review of the exact-path rescue: a refusal that cannot be
read whole still sends the rewrite again as sent; a binding request sent without the
engine's word with a cache breakpoint added is still rescued; a gzip body's rescue
counts its bytes decoded."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import aiohttp
import orjson
import pytest

import tests.proxy.test_thinking_session_e2e as e2e
from ctxwarden.proxy import Reply, ToolCall, handlers
from tests.proxy.conftest import Proxy
from tests.proxy.test_exact_rescue import MODEL, _condensed_then_thinking
from tests.proxy.test_thinking_session_e2e import _HEADERS, SYSTEM, THINKING, TOOLS, _turn

_HEAD_400 = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"


async def _turn_ok(http: aiohttp.ClientSession, proxy: Proxy, fields: dict[str, Any]) -> None:
    """A Messages request of ``fields`` (with the agent's tools) answered 200."""
    body = {"max_tokens": 512, "tools": TOOLS, **fields}
    async with http.post(
        f"{proxy.url}/v1/messages", data=orjson.dumps(body), headers=_HEADERS
    ) as r:
        assert r.status == 200, (await r.text())[:300]


OK = orjson.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
)


@pytest.mark.parametrize("kind", ["cut", "sse", "large"])
async def test_a_refusal_that_cannot_be_read_whole_still_sends_the_rewrite_as_sent(
    make_proxy: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    async with make_proxy(max_recall_rounds=0) as proxy:
        model = "claude-opus-4-1"
        messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
        seen = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            seen.append(length)
            if len(seen) == 1:  # the rewrite: a 400 cut off mid-body
                if kind == "cut":
                    writer.write(
                        _HEAD_400 + b"Content-Type: application/json\r\n"
                        b'Content-Length: 500\r\n\r\n{"type":"error"'
                    )
                elif kind == "sse":
                    err = b'event: error\ndata: {"type":"error"}\n\n'
                    writer.write(
                        _HEAD_400 + b"Content-Type: text/event-stream\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(err) + err
                    )
                else:
                    err = b'{"type":"error","pad":"' + b"x" * (9 * 1024 * 1024) + b'"}'
                    writer.write(
                        _HEAD_400 + b"Content-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(err) + err
                    )
                await writer.drain()
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(OK) + OK
                )
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, aiohttp.ClientSession() as http:
            events = [await _turn(http, proxy, model, messages, k, False) for k in range(10)]
            assert events[-1]["tokens_saved"] > 0
            monkeypatch.setattr(
                handlers,
                "_upstream_url",
                lambda state, family, request: f"http://127.0.0.1:{port}" + request.raw_path,
            )
            await _turn_ok(http, proxy, {"model": model, "system": SYSTEM, "messages": messages})
            event = proxy.recorder.events[-1]
            assert len(seen) == 2  # refused, then sent again as the client sent it
            assert event["fallback_reason"].startswith("refused: ")


@pytest.mark.parametrize("marked", [False, True])
async def test_a_binding_request_sent_without_the_engine_is_rescued_even_marked(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch, marked: bool
) -> None:
    # marked: the client puts a cache_control on its system prompt (as Claude Code does)
    system = (
        [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        if marked
        else SYSTEM
    )
    monkeypatch.setattr(e2e, "SYSTEM", system)
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        real = handlers.run_within

        async def behind(executor, limit, fn, *args):
            if fn is handlers._condense_sync:
                return False, None  # the engine thread is behind
            return await real(executor, limit, fn, *args)

        monkeypatch.setattr(handlers, "run_within", behind)
        sent = len(proxy.fake.received)
        proxy.fake.script(
            Reply(
                text="", tool_calls=[ToolCall("bash", {"command": "ls"}, "tu_x")], thinking="next"
            )
        )
        body = {"model": MODEL, "system": system, "messages": messages, "thinking": THINKING}
        await _turn_ok(http, proxy, body)
    event = proxy.recorder.events[-1]
    assert event["fallback_reason"].startswith("refused: ")
    assert len(proxy.fake.received) - sent == 2  # as sent (refused), then rescued


async def test_a_gzip_body_rescued_counts_its_bytes_decoded(proxy: Proxy) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        proxy.fake.script(Reply(text="done", thinking="All done."))
        body = {
            "model": MODEL,
            "max_tokens": 512,
            "system": SYSTEM,
            "tools": TOOLS,
            "messages": messages,
            "thinking": THINKING,
        }
        raw = orjson.dumps(body)
        headers = _HEADERS | {"x-ctxwarden-mode": "exact", "content-encoding": "gzip"}
        async with http.post(
            f"{proxy.url}/v1/messages", data=gzip.compress(raw), headers=headers
        ) as r:
            assert r.status == 200
    e = proxy.recorder.events[-1]
    assert e["bytes_before"] == len(raw)
