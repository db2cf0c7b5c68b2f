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
from collections.abc import Callable, Mapping

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from ctxwarden.proxy.upstream import request_headers, upstream_name

__all__ = ["OPEN_SOCKETS", "close_open_sockets", "forward_websocket", "is_websocket_upgrade"]

Pair = tuple[web.WebSocketResponse, aiohttp.ClientWebSocketResponse]

OPEN_SOCKETS = web.AppKey("ctxwarden_open_sockets", set[Pair])
"""The relayed sockets open now (client side, upstream side), closed at shutdown."""

_log = logging.getLogger("ctxwarden.proxy")

_HANDSHAKE_FIELDS = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
     "sec-websocket-protocol"}
)  # fmt: skip


def is_websocket_upgrade(headers: Mapping[str, str]) -> bool:
    """Whether a request asks to become a WebSocket (``Upgrade: websocket``)."""
    return headers.get("Upgrade", "").strip().lower() == "websocket"


async def close_open_sockets(app: web.Application) -> None:
    """On shutdown: close every relayed socket both ways with 1001, going away (aiohttp
    would otherwise wait for each until its shutdown timeout)."""
    for client, upstream in list(app.get(OPEN_SOCKETS, ())):
        with contextlib.suppress(Exception):  # the client first: its code is the one it sees
            await client.close(code=aiohttp.WSCloseCode.GOING_AWAY, message=b"proxy stopping")
        with contextlib.suppress(Exception):
            await upstream.close(code=aiohttp.WSCloseCode.GOING_AWAY)


def _wire_code(code: int | None, fallback: int) -> int:
    """``code`` if it may be sent in a Close frame (RFC 6455 7.4), else ``fallback``
    (1005, 1006 and 1015 only say what a receiver saw; below 1000 nothing is defined)."""
    if code is None or code in (1004, 1005, 1006, 1015) or not 1000 <= code <= 4999:
        return fallback
    return code


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
    request: web.Request,
    session: aiohttp.ClientSession,
    url: str,
    on_open: Callable[[], None] = lambda: None,
) -> web.StreamResponse:
    """Relay the WebSocket ``request`` asks for to ``url`` (see module doc);
    ``on_open`` is called once both handshakes are done (its event's status is then
    101, however the socket ends: a client closing it is no abort)."""
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
        # the client is told what failed, not where: the upstream's address is the
        # operator's (the log line names it)
        _log.warning("upstream %s refused a WebSocket: %s", upstream_name(url), exc.status)
        message = f"upstream refused the WebSocket: {exc.message}"
        return web.json_response({"error": {"message": message}}, status=status)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        _log.warning("upstream %s unavailable for a WebSocket: %s", upstream_name(url),
                     type(exc).__name__)  # fmt: skip
        message = f"upstream unavailable: {type(exc).__name__}"
        return web.json_response({"error": {"message": message}}, status=502)
    chosen = (upstream.protocol,) if upstream.protocol else ()
    client = web.WebSocketResponse(protocols=chosen, max_msg_size=0, autoclose=False)
    sockets = request.app.get(OPEN_SOCKETS)
    pair = (client, upstream)
    try:
        await client.prepare(request)
        on_open()
        if sockets is not None:
            sockets.add(pair)
        await _pump_both(client, upstream)
    finally:
        if sockets is not None:
            sockets.discard(pair)
        # shielded: a client that drops the connection cancels this handler, and the
        # upstream side must still be closed
        await asyncio.shield(_close_both(client, upstream))
    return client


async def _close_both(
    client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse
) -> None:
    with contextlib.suppress(Exception):
        await upstream.close()
    with contextlib.suppress(Exception):
        await client.close()


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
            code = _wire_code(message.data, aiohttp.WSCloseCode.OK)
            await sink.close(code=code, message=reason)
            return
        elif message.type == aiohttp.WSMsgType.ERROR:
            break
    # the source closed (or failed) without a close frame reaching us: close the sink
    await sink.close(code=_wire_code(source.close_code, aiohttp.WSCloseCode.INTERNAL_ERROR))
