"""Reading a client's request body: as sent, capped, decoded, parsed on or off the loop.

This module owns the bytes of a condensed route's request body up to the point where
the handlers (:mod:`.handlers`) decide what to send; it relays nothing and decides no
mode. It reads the body as the client sent it: whole up to a cap (:func:`read_capped`),
or whole up to a cap within a budget of held bytes (:func:`read_held`), or as a stream
that hands on what was read so far and then the rest (:class:`BodyStream`). It reads
that body through its ``Content-Encoding`` (:mod:`.bodies` undoes the codings): on the
event loop when that is cheap, in a thread otherwise (:func:`decode_request`); a
Responses body whose tenant has recall answers owed may be decoded past
``max_body_bytes`` within the budget (:func:`read_responses`, :func:`decode_held`;
what is owed is :mod:`.owed`'s). And it parses and writes JSON with orjson or, for
what only Python's ``json`` reads exactly (integers past 64 bits, lone surrogate
escapes), with the stdlib; every parse, write or linear scan of a body larger than
:data:`INLINE_PARSE_BYTES` runs in a thread, so a large body never stalls the loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from aiohttp import web

from ctxwarden.io import may_hold_wide_integer
from ctxwarden.proxy.bodies import INLINE_PARSE_BYTES, DecodedBody, decode_body, off_loop_if_large
from ctxwarden.proxy.owed import owing, unsettled
from ctxwarden.proxy.relay import Exchange
from ctxwarden.proxy.state import Hold, ProxyState

__all__ = [
    "INLINE_PARSE_BYTES", "BodyStream", "coding_to_undo", "decode_held", "decode_request",
    "has_wide_integer", "may_hold_wide", "off_loop_if_large", "orjson_dump", "orjson_load",
    "read_capped", "read_held", "read_responses", "stdlib_dump", "stdlib_load",
    "stdlib_parses_object",
]  # fmt: skip

T = TypeVar("T")


class BodyStream:
    """A request body as an async iterable: ``head`` (bytes already read), then the
    rest of the client's stream; counts the bytes it hands out in ``sent`` and notes
    in ``unreadable`` that the client's body failed (the upload then fails).

    An upstream may answer before it has read the whole body (413, 401) and close
    the connection on the rest, which resets it. asyncio's socket transport drops the
    bytes it received but did not read yet when a write fails, so the answer would be
    lost and the client answered 502 where it would have received the upstream's
    answer without the proxy. So after the first chunk, each step (the next chunk or
    the end) first lets the event loop read what arrived (:func:`_let_answers_in`):
    the answer is then read before the next write meets the reset, and is relayed
    as any answer. What remains is the instant between the loop's last look at the
    socket and the write. A reset with no answer before it is still a failed upload
    (502), and the stream, once consumed, is never sent again."""

    def __init__(self, request: web.Request, head: bytes = b"") -> None:
        self._content = request.content
        self._head = head
        self.sent = 0
        self.unreadable = False

    def __aiter__(self) -> BodyStream:
        return self

    async def __anext__(self) -> bytes:
        if self.sent:
            await _let_answers_in()
        chunk, self._head = self._head, b""
        if not chunk:
            try:
                chunk = await self._content.readany()
            except web.RequestPayloadError:
                self.unreadable = True
                raise
        if not chunk:
            raise StopAsyncIteration
        self.sent += len(chunk)
        return chunk


async def _let_answers_in() -> None:
    """Two turns of the event loop: what the loop found readable on the first turn is
    read (its callbacks run after this task's step) before the caller goes on; one
    turn would let a write that fails drop that read (the transport cancels it)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def read_capped(request: web.Request, cap: int, head: bytes = b"") -> tuple[bytes, bool]:
    """``(body, True)`` for a body of at most ``cap`` bytes; ``(head, False)`` past
    the cap, where ``head`` is what was read and the rest is still unread (bytes as
    sent: the server decodes no coding). ``head``: bytes of it read already. Raises
    ``web.RequestPayloadError`` when the client's body is cut off or badly framed."""
    too_long = request.content_length is not None and request.content_length > cap
    if too_long or len(head) > cap:
        return head, False
    parts: list[bytes] = [head] if head else []
    size = len(head)
    while chunk := await request.content.readany():
        parts.append(chunk)
        size += len(chunk)
        if size > cap:
            return b"".join(parts), False
    return b"".join(parts), True


async def read_held(
    request: web.Request, cap: int, head: bytes, hold: Hold
) -> tuple[bytes, str | None]:
    """The body (``head`` read already) read whole up to ``cap`` bytes, each held in
    ``hold`` first: ``(body, None)``; else ``(what was read, why it stopped)``, the
    rest unread: ``over_limit`` past ``cap``, ``busy`` when ``hold`` cannot grow.
    Raises ``web.RequestPayloadError`` when the client's body is cut off or badly
    framed."""
    length = request.content_length
    if (length is not None and length > cap) or len(head) > cap:
        return head, "over_limit"
    if not hold.grow_to(max(len(head), length or 0)):
        return head, "busy"
    parts = [head]
    size = len(head)
    while chunk := await request.content.readany():
        parts.append(chunk)
        size += len(chunk)
        if size > cap:
            return b"".join(parts), "over_limit"
        if not hold.grow_to(size):
            return b"".join(parts), "busy"
    return b"".join(parts), None


def coding_to_undo(ex: Exchange) -> str | None:
    """The body's ``Content-Encoding`` still to undo (none when the server did)."""
    return None if ex.server_decoded else ex.request.headers.get("Content-Encoding")


def _decode_inline(raw: bytes, coding: str | None, limit: int) -> DecodedBody | None:
    """``raw`` read through ``coding`` (:mod:`.bodies`) on the loop when that is cheap:
    no coding, or a small body inflating to at most :data:`INLINE_PARSE_BYTES`
    (what decodes to more is decoded at most that far); ``None``: decode it off-loop."""
    if not coding:
        return decode_body(raw, coding, limit)
    if len(raw) > INLINE_PARSE_BYTES:
        return None
    small = decode_body(raw, coding, min(limit, INLINE_PARSE_BYTES))
    if small.over_limit and limit > INLINE_PARSE_BYTES:
        return None
    return small


async def decode_request(ex: Exchange, raw: bytes, limit: int) -> DecodedBody:
    """``raw`` read through its ``Content-Encoding`` (see :mod:`.bodies`), at most
    ``limit`` bytes; off-loop unless it decodes small (:func:`_decode_inline`)."""
    coding = coding_to_undo(ex)
    decoded = _decode_inline(raw, coding, limit)
    if decoded is not None:
        return decoded
    return await asyncio.to_thread(decode_body, raw, coding, limit)


async def read_responses(ex: Exchange, tenant: str, raw: bytes, hold: Hold) -> DecodedBody:
    """A Responses body (``raw``, within ``max_body_bytes`` as sent) read through its
    ``Content-Encoding``: up to ``max_body_bytes``, or, when it may inflate past that
    and its tenant is owing (:func:`~.owed.owing`), decoded once up to the owed cap
    (:func:`decode_held`; ``hold`` then holds it when past ``max_body_bytes``). When
    an owing tenant's body cannot be read, :func:`~.owed.unsettled` says so."""
    state = ex.state
    cap = state.settings.max_body_bytes
    coding = coding_to_undo(ex)
    decoded = _decode_inline(raw, coding, cap)
    if decoded is not None and decoded.data is not None:
        return decoded
    if decoded is not None and not decoded.over_limit:  # a coding not read here
        if await owing(state, tenant):
            unsettled(state, "coding")
        return decoded
    if await owing(state, tenant):
        return await decode_held(state, raw, coding, hold)
    if decoded is None:
        decoded = await asyncio.to_thread(decode_body, raw, coding, cap)
    return decoded


async def decode_held(state: ProxyState, raw: bytes, coding: str | None, hold: Hold) -> DecodedBody:
    """``raw`` of a tenant that is owing, decoded off-loop: up to the owed cap, or as
    far as ``hold`` has room in the budget when that is less (never less than
    ``max_body_bytes``); ``hold`` keeps the larger of its sizes when that is past
    ``max_body_bytes`` (it is then held for what is owed), nothing otherwise. When the
    request is cancelled mid-decode, the hold stays until the thread ends. A body that
    cannot be read is counted (:func:`~.owed.unsettled`): ``busy`` when only the budget
    stopped it."""
    cap, owed_cap = state.settings.max_body_bytes, state.settings.owed_cap
    limit = max(cap, min(owed_cap, hold.grow_within(max(len(raw), owed_cap))))
    work = asyncio.ensure_future(asyncio.to_thread(decode_body, raw, coding, limit))
    try:
        decoded = await asyncio.shield(work)
    except asyncio.CancelledError:
        hold.keep_until(work)
        raise
    size = max(len(raw), len(decoded.data or b""))
    hold.resize(size if size > cap else 0)
    if decoded.data is None:
        busy = decoded.over_limit and limit < owed_cap
        unsettled(state, "busy" if busy else "over_limit" if decoded.over_limit else "coding")
    return decoded


def _wide(node: Any) -> bool:
    """Whether ``node`` (as Python's ``json`` read it) holds an integer outside the
    64-bit range."""
    if isinstance(node, bool):
        return False
    if isinstance(node, int):
        return not -(2**63) <= node < 2**64
    if isinstance(node, dict):
        return any(_wide(v) for v in node.values())
    if isinstance(node, list):
        return any(_wide(v) for v in node)
    return False


async def _stdlib_reads(body: bytes, judge: Callable[[Any], bool]) -> bool:
    """``judge`` of ``body`` as Python's ``json`` reads it (exact integers, lone
    surrogates); False when it is not JSON. Large bodies are parsed off-loop."""
    return await _stdlib_then(body, judge, False)


async def stdlib_load(body: bytes) -> Any:
    """``body`` as Python's ``json`` reads it; ``None`` when it is not JSON."""
    return await _stdlib_then(body, lambda value: value, None)


async def _stdlib_then(body: bytes, then: Callable[[Any], T], not_json: T) -> T:
    """``then`` of ``body`` as Python's ``json`` reads it, ``not_json`` when it is not
    JSON; off-loop for a large body (``then`` too: it may walk the whole value)."""

    def read(data: bytes) -> T:
        try:
            return then(json.loads(data))
        except (ValueError, RecursionError):
            return not_json

    return await off_loop_if_large(read, body)


async def orjson_load(body: bytes) -> Any:
    """``body`` read by orjson; off-loop when large (raises ``JSONDecodeError``)."""
    return await off_loop_if_large(orjson.loads, body)


async def orjson_dump(value: Any, size: int) -> bytes:
    """``value`` (about ``size`` bytes of JSON) written by orjson; off-loop when large."""
    if size <= INLINE_PARSE_BYTES:
        return orjson.dumps(value)
    return await asyncio.to_thread(orjson.dumps, value)


async def stdlib_dump(value: Any) -> bytes:
    """``value`` as Python's ``json`` writes it: integers exact, non-ASCII text as is
    unless it holds a lone surrogate (then every non-ASCII character is escaped, as
    such a client sent it). Large bodies are written off-loop."""

    def write() -> bytes:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
        except UnicodeEncodeError:
            return json.dumps(value, separators=(",", ":")).encode()

    return await asyncio.to_thread(write)


async def may_hold_wide(body: bytes) -> bool:
    """:func:`~ctxwarden.io.may_hold_wide_integer`, off-loop for a large body."""
    return await off_loop_if_large(may_hold_wide_integer, body)


async def has_wide_integer(body: bytes) -> bool:
    """Whether ``body`` holds an integer past 64 bits, which orjson reads as a float."""
    return await _stdlib_reads(body, _wide)


async def stdlib_parses_object(body: bytes) -> bool:
    """Whether Python's ``json`` reads ``body`` as an object where orjson refused it
    (lone surrogate escapes, which JS clients produce). Such a request is valid for the
    upstream: it is forwarded as sent, never condensed (orjson cannot write those
    strings back)."""
    return await _stdlib_reads(body, lambda value: isinstance(value, dict))
