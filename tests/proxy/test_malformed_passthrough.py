"""A request the proxy cannot read as its API describes it is relayed for the upstream
to judge, in every mode: the client gets the upstream's answer (a 400 it will not
retry), never a 500 of the proxy's own."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import Reply
from tests.proxy.conftest import KEY_A, Proxy

_INVALID = "messages.1.content.0.type: Input should be a valid string"


@pytest.mark.parametrize("mode", ["active", "shadow", "exact"])
@pytest.mark.parametrize("kind", [["text"], {"t": 1}, None, 7])
async def test_a_block_whose_type_is_no_string_is_relayed(
    proxy: Proxy, mode: str, kind: object
) -> None:
    body = {
        "model": "claude-newmodel-9",  # unknown: taken to bind thinking
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": kind, "text": "t"}]},
            {"role": "user", "content": "go"},
        ],
    }
    proxy.fake.script(Reply(status=400, error=_INVALID))
    headers = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01",
               "x-ctxwarden-mode": mode, "Content-Type": "application/json"}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy.url}/v1/messages", data=orjson.dumps(body), headers=headers) as r,
    ):
        status, data = r.status, await r.read()
    assert status == 400, data
    assert _INVALID in data.decode()


@pytest.mark.parametrize("size", [9_000, 30_000])
async def test_a_large_bearer_token_goes_through(proxy: Proxy, size: int) -> None:
    """Header fields past aiohttp's 8,190-byte default (a large JWT) reach the upstream."""
    token = "ey" + "A" * size
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{proxy.openai_url}/chat/completions", data=orjson.dumps(body), headers=headers
        ) as r,  # fmt: skip
    ):
        assert r.status == 200, await r.text()
    assert proxy.fake.received[-1].headers["Authorization"] == f"Bearer {token}"


@pytest.mark.parametrize(
    "path",
    [b"//_ctxwarden/kill-switch", b"/v1/../_ctxwarden/kill-switch", b"/_ctxwarden//x",
     b"/v1/%2E%2E/_ctxwarden/x", b"/%5Fctxwarden/x"],
)  # fmt: skip
async def test_no_spelling_of_an_own_path_is_forwarded(proxy: Proxy, path: bytes) -> None:
    host, port = proxy.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                 + KEY_A.encode() + b"\r\nConnection: close\r\n\r\n")  # fmt: skip
    await writer.drain()
    answer = await reader.read()
    writer.close()
    assert answer.split(b"\r\n", 1)[0].endswith(b" 404 Not Found"), answer[:200]
    assert not proxy.fake.received
