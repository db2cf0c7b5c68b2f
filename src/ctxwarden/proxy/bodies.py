"""Reading a condensed route's request body through its ``Content-Encoding``.

The proxy's server does not decode bodies itself: every body is forwarded as the client
sent it, codings and all, unless ctxwarden rewrites it. To condense a request the proxy
reads it through its codings: ``gzip`` and ``deflate``, inflated at most to ``limit``
bytes. Whatever it cannot read - another coding (``br``, ``zstd``: their decoders take
no output limit, so a small body could inflate without bound), a corrupt stream, more
than ``limit`` bytes - is not an error of the request: it is forwarded untouched, and
the upstream decides (a Responses body past ``limit`` may still be read further, to
add recall answers owed: :mod:`ctxwarden.proxy.owed`). Work linear in a body runs on
the event loop only while the body is small (:func:`off_loop_if_large`).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "INLINE_PARSE_BYTES", "DecodedBody", "decode_body", "decoded_by_server", "off_loop_if_large",
]  # fmt: skip

INLINE_PARSE_BYTES = 256 * 1024
"""Bodies up to this size are decoded, parsed, written and scanned on the event loop;
larger ones in a thread (a body decoding past it is decoded off-loop from the start)."""

T = TypeVar("T")


async def off_loop_if_large(scan: Callable[[bytes], T], body: bytes) -> T:
    """``scan(body)`` for work linear in ``body``: in a thread when ``body`` is larger
    than :data:`INLINE_PARSE_BYTES`, so a large body never stalls the event loop."""
    if len(body) <= INLINE_PARSE_BYTES:
        return scan(body)
    return await asyncio.to_thread(scan, body)


_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS
"""``wbits`` that accept a gzip or a zlib header (auto-detected)."""


@dataclass(frozen=True, slots=True)
class DecodedBody:
    """The body as JSON bytes, or why it could not be read (``data`` is ``None``)."""

    data: bytes | None
    coded: bool
    """Whether the client's body carried a coding (a rewrite is then sent decoded)."""
    reason: str | None = None

    @property
    def over_limit(self) -> bool:
        """Not read because it decodes to more than the limit (the coding is readable)."""
        return self.reason is not None and self.reason.startswith("limit")


def decoded_by_server(request: object, *, bodies_as_sent: bool) -> bool:
    """Whether the aiohttp server running the app decoded the body already: an app from
    ``build_app`` served by another runner, with aiohttp's default ``auto_decompress``
    (``RunningServer`` turns it off and says so: ``bodies_as_sent``). aiohttp then
    records the coding it undid on the request's message; that record is not public
    API, and without it the answer is no."""
    if bodies_as_sent:
        return False
    message = getattr(request, "_message", None)
    return getattr(message, "compression", None) is not None


def _zlib(data: bytes, limit: int, wbits: int) -> bytes:
    decoder = zlib.decompressobj(wbits)
    out = decoder.decompress(data, limit + 1)  # never inflated past the limit
    if len(out) > limit:
        return out  # the caller reports the limit
    if not decoder.eof or decoder.unused_data:
        raise ValueError("truncated or trailing data")
    return out


def _deflate(data: bytes, limit: int) -> bytes:
    try:  # zlib-wrapped, as the HTTP spec means it
        return _zlib(data, limit, zlib.MAX_WBITS)
    except (zlib.error, ValueError):  # raw deflate, as some clients send it
        return _zlib(data, limit, -zlib.MAX_WBITS)


def _decode_one(coding: str, data: bytes, limit: int) -> bytes | str:
    """``data`` decoded from ``coding``, or why not (a string)."""
    try:
        if coding in ("gzip", "x-gzip"):
            return _zlib(data, limit, _GZIP_OR_ZLIB)
        if coding == "deflate":
            return _deflate(data, limit)
    except (zlib.error, ValueError):
        return f"content-encoding {coding!r}: corrupt body"
    # the client's header value is not repeated (it may hold anything): a known coding
    # is named, any other is "other"
    named = coding if coding in _KNOWN_CODINGS else "other"
    return f"content-encoding {named!r} not readable here"


_KNOWN_CODINGS = frozenset({"br", "zstd", "compress", "x-compress", "identity", "aes128gcm"})
"""Codings named in a fallback reason; gzip and deflate are read."""


def decode_body(raw: bytes, content_encoding: str | None, limit: int) -> DecodedBody:
    """``raw`` read through ``content_encoding`` (codings applied in the order listed,
    so undone last to first), at most ``limit`` bytes decoded."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return DecodedBody(raw, coded=False)
    data = raw
    for coding in reversed(codings):
        decoded = _decode_one(coding, data, limit)
        if isinstance(decoded, str):
            return DecodedBody(None, coded=True, reason=decoded)
        if len(decoded) > limit:
            return DecodedBody(None, coded=True, reason=f"limit: body over {limit} bytes")
        data = decoded
    return DecodedBody(data, coded=True)
