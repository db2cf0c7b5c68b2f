"""WebSocket upgrades (the openai SDK's realtime and Responses WebSocket modes, opened
at the same base URL as its HTTP calls) are relayed to the upstream frame by frame."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ctxwarden import Engine, EngineConfig
from ctxwarden.proxy import ProxySettings, RunningServer, build_app
from ctxwarden.telemetry import MemoryRecorder
from tests.proxy.conftest import SECRET

_SEEN: list[dict[str, Any]] = []
_KEY = {"Authorization": "Bearer sk-ws"}


async def _socket(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Authorization") != "Bearer sk-ws":
        return web.Response(status=401, text="no key")
    _SEEN.append({"path": request.path_qs, "headers": dict(request.headers)})
    ws = web.WebSocketResponse(protocols=("realtime",), max_msg_size=0)
    await ws.prepare(request)
    async for message in ws:
        if message.type == aiohttp.WSMsgType.TEXT:
            if message.data == "bye":
                await ws.close(code=4001, message=b"asked")
                break
            if message.data == "drop":  # the upstream goes away without a close frame
                assert request.transport is not None
                request.transport.abort()
                break
            await ws.send_str("echo:" + message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await ws.send_bytes(message.data[::-1])
    return ws


@pytest.fixture
async def proxy_url(proxy_and_events: tuple[str, MemoryRecorder]) -> str:
    return proxy_and_events[0]


@asynccontextmanager
async def _proxy_app(recorder: MemoryRecorder) -> AsyncIterator[web.Application]:
    """A proxy app (not started) in front of an upstream serving ``_socket``."""
    _SEEN.clear()
    upstream = web.Application()
    upstream.router.add_get("/v1/realtime", _socket)
    runner = web.AppRunner(upstream)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    origin = f"http://127.0.0.1:{port}"
    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    try:
        yield build_app(engine, ProxySettings(openai_upstream=origin, anthropic_upstream=origin),
                        sinks=[recorder], tenant_secret=SECRET)  # fmt: skip
    finally:
        engine.close()
        await runner.cleanup()


@pytest.fixture
async def proxy_and_events() -> AsyncIterator[tuple[str, MemoryRecorder]]:
    recorder = MemoryRecorder()
    async with _proxy_app(recorder) as app, RunningServer(app) as server:
        yield server.url, recorder


async def test_frames_go_both_ways_and_the_close_code_comes_back(proxy_url: str) -> None:
    headers = {"Authorization": "Bearer sk-ws", "OpenAI-Beta": "realtime=v1"}
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            f"{proxy_url}/v1/realtime?model=gpt-realtime",
            headers=headers,
            protocols=("realtime", "other"),
            max_msg_size=0,
        ) as ws,  # fmt: skip
    ):
        assert ws.protocol == "realtime"
        await ws.send_str("hi")
        assert (await ws.receive()).data == "echo:hi"
        big = "x" * 5_000_000  # past aiohttp's default 4 MB message limit
        await ws.send_str(big)
        assert (await ws.receive()).data == "echo:" + big
        await ws.send_bytes(b"\x00\x01\x02")
        assert (await ws.receive()).data == b"\x02\x01\x00"
        await ws.send_str("bye")
        closing = await ws.receive()
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert ws.close_code == 4001
    (seen,) = _SEEN
    assert seen["path"] == "/v1/realtime?model=gpt-realtime"
    assert seen["headers"]["OpenAI-Beta"] == "realtime=v1"


async def test_a_refused_handshake_answers_with_the_upstreams_status(proxy_url: str) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{proxy_url}/v1/realtime", headers={"Authorization": "Bearer x"})
    assert refused.value.status == 401


async def test_a_socket_closed_by_the_client_is_logged_as_answered(
    proxy_and_events: tuple[str, MemoryRecorder],
) -> None:
    url, recorder = proxy_and_events
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{url}/v1/realtime", headers={"Authorization": "Bearer sk-ws"}) as ws,
    ):
        await ws.send_str("hi")
        assert (await ws.receive()).data == "echo:hi"
    for _ in range(100):  # the event is emitted when the handler ends
        if recorder.events:
            break
        await asyncio.sleep(0.05)
    (event,) = recorder.events
    assert event["status"] == 101 and not event.get("client_disconnected")


async def test_an_upstream_that_drops_closes_the_client_with_a_code_valid_on_the_wire(
    proxy_url: str,
) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            f"{proxy_url}/v1/realtime", headers={"Authorization": "Bearer sk-ws"}
        ) as ws,
    ):
        await ws.send_str("drop")
        closing = await ws.receive()
        assert closing.type == aiohttp.WSMsgType.CLOSE
        assert closing.data == aiohttp.WSCloseCode.INTERNAL_ERROR  # not 1006


async def test_stopping_the_proxy_closes_open_sockets_as_going_away() -> None:
    async with _proxy_app(MemoryRecorder()) as app, aiohttp.ClientSession() as http:
        server = await RunningServer(app).start()
        stopping = None
        try:
            ws = await http.ws_connect(f"{server.url}/v1/realtime", headers=_KEY)
            await ws.send_str("hi")
            assert (await ws.receive()).data == "echo:hi"
            stopping = asyncio.ensure_future(server.stop())
            closing = await asyncio.wait_for(ws.receive(), 20)
            assert closing.type == aiohttp.WSMsgType.CLOSE
            assert closing.data == aiohttp.WSCloseCode.GOING_AWAY
            await asyncio.wait_for(stopping, 20)  # not the shutdown timeout
            await ws.close()
        finally:
            if stopping is None:
                await server.stop()
