"""WebSocket upgrades relayed to the upstream, frame by frame and unchanged.

The openai SDK derives its WebSocket URLs (``client.realtime.connect()``,
``client.beta.responses.connect()``) from the same base URL as its HTTP calls, so a
client pointed at the proxy opens them here. Nothing in them is condensed: the proxy
opens the same path on the upstream with the client's headers (hop-by-hop ones and the
handshake's own ``Sec-WebSocket-*`` fields aside, which the upstream connection makes
anew; the subprotocols asked for are passed on), answers the client's handshake with
the subprotocol the upstream chose, and copies every text, binary and close frame one
way and the other until either side closes. A handshake the upstream refuses is
answered with the upstream's status; an upstream that cannot be reached is a 502.
Pings are answered by each side's own connection (aiohttp's autoping); messages of
any size pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ctxwarden.proxy.upstream import request_headers, upstream_name

__all__ = ["forward_websocket", "is_websocket_upgrade"]

_log = logging.getLogger("ctxwarden.proxy")

_HANDSHAKE_FIELDS = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
     "sec-websocket-protocol"}
)  # fmt: skip


def is_websocket_upgrade(headers: Mapping[str, str]) -> bool:
    """Whether a request asks to become a WebSocket (``Upgrade: websocket``)."""
    return headers.get("Upgrade", "").strip().lower() == "websocket"


def _upstream_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    out = request_headers(headers)
    for name in list(out.keys()):
        if name.lower() in _HANDSHAKE_FIELDS or name.lower().startswith("x-ctxwarden-"):
            out.popall(name, None)
    return out


def _protocols(headers: Mapping[str, str]) -> tuple[str, ...]:
    asked = headers.get("Sec-WebSocket-Protocol", "")
    return tuple(p.strip() for p in asked.split(",") if p.strip())


async def forward_websocket(
    request: web.Request, session: aiohttp.ClientSession, url: str
) -> web.StreamResponse:
    """Relay the WebSocket ``request`` asks for to ``url`` (see module doc)."""
    try:
        upstream = await session.ws_connect(
            url,
            headers=_upstream_headers(request.headers),
            protocols=_protocols(request.headers),
            max_msg_size=0,
            autoclose=False,
        )
    except aiohttp.WSServerHandshakeError as exc:
        status = exc.status if 400 <= exc.status < 600 else 502
        message = f"upstream {upstream_name(url)} refused the WebSocket: {exc.message}"
        return web.json_response({"error": {"message": message}}, status=status)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        message = f"upstream {upstream_name(url)} unavailable: {type(exc).__name__}"
        return web.json_response({"error": {"message": message}}, status=502)
    chosen = (upstream.protocol,) if upstream.protocol else ()
    client = web.WebSocketResponse(protocols=chosen, max_msg_size=0, autoclose=False)
    try:
        await client.prepare(request)
        await _pump_both(client, upstream)
    finally:
        await upstream.close()
        await client.close()
    return client


async def _pump_both(
    client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
) -> None:
    """Copy frames both ways until one side closes; then close the other with its code."""
    ups = asyncio.ensure_future(_pump(upstream, client))
    downs = asyncio.ensure_future(_pump(client, upstream))
    try:
        await asyncio.wait((ups, downs), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ups, downs):
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _pump(
    source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
) -> None:
    async for message in source:
        if message.type == aiohttp.WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        elif message.type == aiohttp.WSMsgType.CLOSE:
            reason = message.extra.encode() if isinstance(message.extra, str) else b""
            await sink.close(code=message.data or aiohttp.WSCloseCode.OK, message=reason)
            return
        elif message.type == aiohttp.WSMsgType.ERROR:
            break
    # the source closed (or failed) without a close frame reaching us: close the sink
    code = source.close_code or aiohttp.WSCloseCode.OK
    await sink.close(code=code)
