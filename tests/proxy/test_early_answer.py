"""An upstream that answers a streamed upload early (413, 401) and closes on the rest:
the client gets that answer, as it would without the proxy, never a 502; an upstream
that resets the upload without answering is still a 502, and the upload is not sent
again (see ``BodyStream`` in :mod:`ctxwarden.proxy.request_bodies`)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.proxy.conftest import ProxyFactory
from tests.proxy.raw_upstream import RawUpstream

_UPLOAD = 16 * 1024 * 1024
"""More than loopback socket buffers hold, so the proxy is still writing when the
upstream closes."""
_CHUNK = 64 * 1024
_ANSWERS = {
    413: b'{"error":{"message":"request entity too large","type":"invalid_request_error"}}',
    401: b'{"error":{"message":"invalid api key","type":"invalid_request_error"}}',
}


class _ClosesEarly(RawUpstream):
    """An upstream that reads a request's head and its first ``_CHUNK`` bytes of body,
    answers ``status`` (none when ``None``) and closes the connection with the rest
    of the body unread: the kernel then resets it."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.requests: list[bytes] = []
        super().__init__()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.requests.append(head.split(b"\r\n")[0])
            await reader.read(_CHUNK)
            if self.status is not None:
                body = _ANSWERS[self.status]
                writer.write(
                    b"HTTP/1.1 %d Refused\r\nContent-Type: application/json\r\n"
                    b"X-Upstream: early\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
                    % (self.status, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _chunks() -> AsyncIterator[bytes]:
    for _ in range(_UPLOAD // _CHUNK):
        yield b"x" * _CHUNK


def _upload(chunked: bool) -> Any:
    return _chunks() if chunked else io.BytesIO(b'{"input":"' + b"x" * _UPLOAD + b'"}')


@pytest.mark.parametrize("status", [413, 401])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "sized"])
@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/files"), ("PUT", "/files/1"), ("POST", "/chat/completions")],
    ids=["post", "put", "condensed-route-past-the-cap"],
)
async def test_an_early_answer_to_a_streamed_upload_is_relayed(
    make_proxy: ProxyFactory, status: int, chunked: bool, method: str, path: str
) -> None:
    upstream = _ClosesEarly(status)
    async with (
        upstream as url,
        make_proxy(openai_upstream=url, max_body_bytes=1024 * 1024) as proxy,
        aiohttp.ClientSession() as session,
    ):
        for _ in range(3):  # a race when it fails: more than once
            async with session.request(
                method, proxy.openai_url + path, data=_upload(chunked),
                headers={"Content-Type": "application/json"},
            ) as response:  # fmt: skip
                assert response.status == status, await response.text()
                assert await response.read() == _ANSWERS[status]
                assert response.headers["X-Upstream"] == "early"
        event = proxy.recorder.last()
        assert event["status"] == status and event["upstream_status"] == status
    assert len(upstream.requests) == 3  # one upstream request each, none sent again


@pytest.mark.parametrize("method", ["POST", "PUT"])
async def test_a_reset_without_an_answer_mid_upload_is_502(
    make_proxy: ProxyFactory, method: str
) -> None:
    upstream = _ClosesEarly(None)
    async with (
        upstream as url,
        make_proxy(openai_upstream=url) as proxy,
        aiohttp.ClientSession() as session,
    ):
        async with session.request(
            method, proxy.openai_url + "/files/1", data=_chunks()
        ) as response:
            assert response.status == 502, await response.text()
            body = await response.json()
        assert body["error"]["type"] == "upstream_error"
        assert proxy.recorder.last()["status"] == 502
    assert len(upstream.requests) == 1  # a consumed upload is never sent again
