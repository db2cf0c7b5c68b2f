"""HTTP wire details: content codings, streamed bodies, HEAD, cut-off streams.

Some cases need an upstream that misbehaves in ways the fake does not script
(compressing, dying mid-stream): those run a small aiohttp app of their own.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from ctxwarden.proxy import RunningServer
from ctxwarden.telemetry import EVENT_FIELDS
from tests.proxy.conftest import KEY_A, NO_CLIENT_TIMEOUT, Proxy, ProxyFactory

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
MODELS = {"object": "list", "data": [{"id": "gpt-x", "object": "model"}]}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def _upstream(routes: dict[str, Handler]) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    async with RunningServer(app) as server:
        yield server.url


async def _compressing(request: web.Request) -> web.Response:
    """Answers in the first coding the client lists (servers follow the client's
    order); its ``br``/``zstd`` bytes are not real, like codings aiohttp lacks."""
    await request.read()
    accepted = request.headers.get("Accept-Encoding", "")
    listed = [c.split(";")[0].strip() for c in accepted.split(",")]
    coding = next((c for c in listed if c in ("zstd", "br", "gzip")), "identity")
    payload = orjson.dumps({**MODELS, "accept_encoding": accepted})
    headers = {"Content-Type": "application/json"}
    if coding == "gzip":
        payload = gzip.compress(payload)
    elif coding != "identity":
        payload = b"\x28\xb5\x2f\xfd not really " + coding.encode()
    if coding != "identity":
        headers["Content-Encoding"] = coding
    return web.Response(body=payload, headers=headers)


async def test_compressed_answers_are_negotiated_by_the_proxy(make_proxy: ProxyFactory) -> None:
    routes = {"/v1/models": _compressing, "/v1/chat/completions": _compressing}
    async with (
        _upstream(routes) as url,
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions")):
            headers = {**AUTH, "Accept-Encoding": "zstd, br, gzip"}
            async with session.request(
                method, proxy.openai_url + path[3:], data=orjson.dumps(CHAT), headers=headers
            ) as resp:
                raw = await resp.read()
                assert resp.status == 200, raw
                assert "Content-Encoding" not in resp.headers  # relayed decoded
            body = orjson.loads(raw)
            assert body["data"] == MODELS["data"]
            assert "zstd" not in body["accept_encoding"]  # the client's list stayed here
            assert "gzip" in body["accept_encoding"]  # and the upstream still compressed


@asynccontextmanager
async def _recording_upstream() -> AsyncIterator[tuple[str, list[tuple[str, bytes, str]]]]:
    """An upstream that records each request's path, raw body bytes (nothing decoded)
    and ``Content-Encoding``, and answers a chat completion."""
    seen: list[tuple[str, bytes, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(
            (request.path, await request.read(), request.headers.get("Content-Encoding", ""))
        )
        return web.json_response({"id": "x", "object": "chat.completion", "choices": []})

    async with _upstream({"/v1/chat/completions": record, "/v1/embeddings": record}) as url:
        yield url, seen


async def test_coded_request_bodies_are_forwarded_as_sent(make_proxy: ProxyFactory) -> None:
    # whatever ctxwarden does not rewrite goes out byte for byte, codings included: a
    # coding it cannot read (br here), a corrupt one, exact mode, nothing to condense
    plain = orjson.dumps(CHAT)
    cases = [
        ("/chat/completions", "exact", "gzip", gzip.compress(plain)),
        ("/chat/completions", "active", "gzip", gzip.compress(plain)),
        ("/chat/completions", "active", "br", b"\x1b not really brotli"),
        ("/chat/completions", "active", "gzip", b"not gzip at all"),
        ("/embeddings", "exact", "gzip", gzip.compress(plain)),
        ("/embeddings", "exact", "zstd", b"\x28\xb5\x2f\xfd not really zstd"),
    ]
    async with (
        _recording_upstream() as (url, seen),
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession(auto_decompress=False) as session,
    ):
        for path, mode, coding, body in cases:
            headers = {**AUTH, "Content-Encoding": coding, "x-ctxwarden-mode": mode}
            async with session.post(proxy.openai_url + path, data=body, headers=headers) as resp:
                assert resp.status == 200, await resp.read()
            assert seen[-1] == ("/v1" + path, body, coding)
        reasons = [e.get("fallback_reason") for e in proxy.recorder.events if e["route"] == "chat"]
        assert reasons[2] == "proxy: content-encoding 'br' not readable here"
        assert reasons[3] == "proxy: content-encoding 'gzip': corrupt body"


async def test_a_coded_body_is_read_for_condensing_and_a_rewrite_goes_out_plain(
    make_proxy: ProxyFactory,
) -> None:
    # a reference in the request makes the proxy offer its recall tool: the body it
    # sends is one it wrote, so it goes out as plain JSON without the client's coding
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "see cw:0123456789ab"}]}
    bulky = {**request, "metadata": {"blob": os.urandom(200_000).hex()}}  # inflated off-loop
    async with (
        _recording_upstream() as (url, seen),
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession() as session,
    ):
        for coding, body in (("gzip", gzip.compress(orjson.dumps(request))),
                             ("gzip, identity", gzip.compress(orjson.dumps(request))),
                             ("deflate", zlib.compress(orjson.dumps(request))),
                             ("gzip", gzip.compress(orjson.dumps(bulky)))):  # fmt: skip
            headers = {**AUTH, "Content-Encoding": coding}
            async with session.post(proxy.openai_url + "/chat/completions", data=body,
                                    headers=headers) as resp:  # fmt: skip
                assert resp.status == 200
            sent, sent_coding = seen[-1][1:]
            assert sent_coding == ""
            sent_json = orjson.loads(sent)
            assert sent_json["messages"] == request["messages"]
            assert sent_json["tools"][-1]["function"]["name"] == "ctxwarden_recall"
            assert proxy.recorder.last(route="chat")["recall_injected"]


async def test_head_keeps_the_upstream_content_length(proxy: Proxy) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(proxy.openai_url + "/models", headers=AUTH) as resp:
            length = len(await resp.read())
        async with session.head(proxy.openai_url + "/models", headers=AUTH) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Length"] == str(length)
    assert proxy.fake.received[-1].method == "HEAD"


async def test_forwarded_routes_stream_bodies_past_the_cap(make_proxy: ProxyFactory) -> None:
    async with make_proxy(max_body_bytes=10_000) as proxy:
        upload = bytes(range(256)) * 800  # 200 KiB, 20 times the cap
        async with aiohttp.ClientSession() as session:
            async with session.post(proxy.openai_url + "/files", data=upload, headers=AUTH) as r:
                assert r.status == 404  # the fake's answer: the request went through

            async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked
                for i in range(0, len(upload), 7_000):
                    yield upload[i : i + 7_000]

            async with session.post(proxy.openai_url + "/files", data=chunks(), headers=AUTH) as r:
                assert r.status == 404
        first, second = proxy.fake.received[-2:]
        assert first.body == upload and second.body == upload
        assert first.headers["Content-Length"] == str(len(upload))
        event = proxy.recorder.last(route="other")
        assert event["status"] == 404 and event["bytes_before"] == len(upload)


def _chunk(delta: dict[str, str]) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def _dies_mid_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_chunk({"role": "assistant", "content": "The answer is "}))
    await response.write(_chunk({"content": "partial"}))
    await asyncio.sleep(0.05)
    assert request.transport is not None
    request.transport.abort()  # the upstream crashes: no final chunk
    return response


async def _stalls_mid_stream(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_chunk({"role": "assistant", "content": "The answer is "}))
    await asyncio.sleep(3)
    return response


@pytest.mark.parametrize("upstream", [_dies_mid_stream, _stalls_mid_stream])
@pytest.mark.parametrize("recall", [False, True])
async def test_a_cut_off_stream_fails_for_the_client(
    make_proxy: ProxyFactory, upstream: Handler, recall: bool
) -> None:
    routes = {"/v1/chat/completions": upstream}
    async with _upstream(routes) as url, make_proxy(openai_upstream=url, read_timeout=0.5) as proxy:
        # a reference in the request makes the proxy offer recall: the filtered stream path
        content = "see cw:0123456789ab" if recall else "q"
        text = ""
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=0) as client:  # fmt: skip
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": content}], stream=True,
                extra_headers=NO_CLIENT_TIMEOUT,  # the proxy's read timeout holds
            )  # fmt: skip
            with pytest.raises(openai.APIError):  # not a clean end of a truncated answer
                async for chunk in stream:
                    text += chunk.choices[0].delta.content or ""
        assert text.startswith("The answer is ")
        event = proxy.recorder.last(route="chat")
        assert event.get("recall_injected", False) is recall
        timeout = upstream is _stalls_mid_stream
        assert event["error_type"] == ("UpstreamTimeout" if timeout else "UpstreamUnavailable")
        # counted as the failure it was, not as the 200 its first bytes announced
        assert event["status"] == (504 if timeout else 502) and event["stream_cut"] is True
        # an upstream fault, not ctxwarden's: at warning, as when nothing was sent yet
        assert event["level"] == "warning" and set(event) <= EVENT_FIELDS


async def test_non_json_answers_stream_through_unbuffered(make_proxy: ProxyFactory) -> None:
    # audio, file downloads: the first bytes reach the client while the upstream is
    # still sending, and the whole body arrives byte-exact with its length
    release = asyncio.Event()
    first, rest = b"ID3" + bytes(range(256)) * 4, bytes(range(255, -1, -1)) * 64

    async def speech(request: web.Request) -> web.StreamResponse:
        await request.read()
        out = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        out.content_length = len(first) + len(rest)
        await out.prepare(request)
        await out.write(first)
        await release.wait()
        await out.write(rest)
        await out.write_eof()
        return out

    async with (
        _upstream({"/v1/audio/speech": speech}) as url,
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=5)) as session,
        session.post(
            proxy.openai_url + "/audio/speech", json={"input": "hi"}, headers=AUTH
        ) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Length"] == str(len(first) + len(rest))
        try:
            head = await asyncio.wait_for(resp.content.readexactly(len(first)), 5)
        finally:
            release.set()  # only now does the upstream finish (a buffering proxy waits)
        assert head + await resp.read() == first + rest


async def test_an_app_served_with_aiohttps_default_decoding_forwards_bodies_it_decoded() -> None:
    # build_app is public: served by aiohttp's own runner (auto_decompress on), a gzip
    # body arrives decoded, and goes upstream decoded, without the coding's label
    from aiohttp.test_utils import TestServer

    from ctxwarden import Engine, EngineConfig
    from ctxwarden.proxy import ProxySettings, build_app

    plain = orjson.dumps(CHAT)
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    try:
        async with _recording_upstream() as (url, seen):
            app = build_app(engine, ProxySettings(openai_upstream=url, anthropic_upstream=url))
            async with TestServer(app) as server, aiohttp.ClientSession() as session:
                for path in ("/v1/embeddings", "/v1/chat/completions"):
                    async with session.post(
                        server.make_url(path), data=gzip.compress(plain),
                        headers={**AUTH, "Content-Encoding": "gzip"},
                    ) as resp:  # fmt: skip
                        assert resp.status == 200
                    assert seen[-1] == (path, plain, "")
    finally:
        engine.close()


_STORED = {
    "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-x",
    "output": [], "tool_choice": "auto", "parallel_tool_calls": True,
    "tools": [{"type": "function", "name": "bash", "parameters": {}},
              {"type": "function", "name": "ctxwarden_recall", "parameters": {}}],
}  # fmt: skip


async def _stored_response(request: web.Request) -> web.Response:
    """A stored response as OpenAI keeps it: with the tools the proxy sent."""
    if request.path.endswith("/input_items"):
        return web.json_response({"object": "list", "data": [], "has_more": False})
    return web.json_response(_STORED)


async def test_a_stored_response_read_back_shows_the_clients_tools(
    make_proxy: ProxyFactory,
) -> None:
    """helper-129: ``responses.retrieve`` showed the recall tool its ``create`` hid."""
    routes = {"/v1/responses/{rest:.*}": _stored_response}
    async with _upstream(routes) as url, make_proxy(openai_upstream=url) as proxy:
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=0) as client:  # fmt: skip
            stored = await client.responses.retrieve("resp_1")
            items = await client.responses.input_items.list("resp_1")
        assert [tool.name for tool in stored.tools] == ["bash"]  # type: ignore[union-attr]
        assert stored.id == "resp_1" and items.data == []
        async with (  # anything else of the answer as the upstream sent it
            aiohttp.ClientSession() as session,
            session.get(proxy.openai_url + "/responses/resp_1", headers=AUTH) as resp,
        ):
            body = await resp.json()
    assert body == {**_STORED, "tools": _STORED["tools"][:1]}  # type: ignore[index]
