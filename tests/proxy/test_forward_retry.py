"""Forwarded bodies and a reused upstream connection that was just closed: small bodies
are sent as bytes, so the upstream client can send an idempotent request again on a
fresh connection (a consumed stream cannot be replayed); ``Expect`` is not forwarded."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from ctxwarden.proxy.upstream import request_headers
from tests.proxy.raw_upstream import RawUpstream


class _ClosesReusedConnections(RawUpstream):
    """An upstream that answers the first request of a connection and closes the
    connection, unanswered, when a second request arrives on it (the keep-alive race)."""

    def __init__(self) -> None:
        self.answered: list[bytes] = []
        super().__init__()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for turn in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                if turn == 1:
                    break
                self.answered.append(head.split(b" ")[0] + b" " + body)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def test_an_idempotent_request_survives_a_closed_reused_connection(make_proxy: Any) -> None:
    upstream = _ClosesReusedConnections()
    async with (
        upstream as url,
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession() as session,
    ):
        for method, body in (("PUT", b"hello"), ("DELETE", b'{"x":1}')):
            warm = await session.get(proxy.openai_url + "/models")  # pools a connection
            assert warm.status == 200
            await warm.read()
            response = await session.request(method, proxy.openai_url + "/things/1", data=body)
            assert response.status == 200, await response.text()
            assert await response.read() == b"ok"
    assert b"PUT hello" in upstream.answered
    assert b'DELETE {"x":1}' in upstream.answered


def test_expect_is_not_forwarded() -> None:
    headers = request_headers({"Expect": "100-continue", "X-Keep": "1"})
    assert "expect" not in {k.lower() for k in headers}
    assert headers["X-Keep"] == "1"
