"""The upstream client: one pooled aiohttp session, header hygiene, error translation.

Contract:

- One ``ClientSession`` per app with a keep-alive connection pool; timeouts are
  ``connect`` (to establish), ``sock_read`` (between bytes, so long streams live) and
  an optional ``total``.
- Request headers are forwarded untouched except hop-by-hop headers, ``Host``,
  ``Content-Length`` (recomputed) and the proxy's own ``x-ctxwarden-*``. Credentials
  pass through as they came and are never logged.
- aiohttp errors are translated where they enter: :class:`UpstreamTimeout` (the
  proxy answers 504) and :class:`UpstreamUnavailable` (502), both ``from`` the cause.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from ctxwarden.errors import CtxwardenError

__all__ = [
    "HOP_BY_HOP",
    "Upstream",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "request_headers",
    "response_headers",
    "translate_read_error",
]

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
    }
)  # fmt: skip
_RESPONSE_DROP = HOP_BY_HOP | {"content-encoding", "date", "server"}


class UpstreamError(CtxwardenError):
    """The upstream could not be reached or did not answer in time."""


class UpstreamUnavailable(UpstreamError):
    """Connection refused, reset or closed before a response (502)."""


class UpstreamTimeout(UpstreamError):
    """No response (or no bytes) within the configured timeout (504)."""


def request_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """Headers to send upstream (see module contract)."""
    out: CIMultiDict[str] = CIMultiDict()
    items = headers.items()
    for name, value in items:
        lowered = name.lower()
        if lowered in HOP_BY_HOP or lowered.startswith("x-ctxwarden-"):
            continue
        out.add(name, value)
    return out


def response_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """Upstream response headers to relay (the body may have been decompressed)."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in _RESPONSE_DROP:
            out.add(name, value)
    return out


class Upstream:
    """A pooled client for the two upstream origins (created inside a running loop)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        total_timeout: float | None,
        pool_size: int,
    ) -> None:
        self.timeout = aiohttp.ClientTimeout(
            total=total_timeout, connect=connect_timeout, sock_read=read_timeout
        )
        connector = aiohttp.TCPConnector(
            limit=pool_size, limit_per_host=pool_size, keepalive_timeout=30, ttl_dns_cache=300
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=self.timeout,
            auto_decompress=True,
            skip_auto_headers=("User-Agent", "Content-Type"),
        )

    @asynccontextmanager
    async def open(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send one request; yields the response with headers read, body unread.

        On exit the connection returns to the pool when the body was read fully and
        is closed otherwise (a cancelled stream must not be reused).
        """
        try:
            response = await self.session.request(
                method, url, headers=request_headers(headers), data=body, allow_redirects=False
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream did not answer within {self._limit()}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamUnavailable(f"upstream unavailable: {type(exc).__name__}") from exc
        try:
            yield response
        finally:
            if response.content.at_eof():
                response.release()
            else:
                response.close()

    def _limit(self) -> str:
        return f"{self.timeout.sock_read or self.timeout.total}s"

    async def close(self) -> None:
        await self.session.close()


def translate_read_error(exc: BaseException) -> UpstreamError:
    """Map an error raised while reading a response body."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout("upstream stalled while sending the body")
    return UpstreamUnavailable(f"upstream body failed: {type(exc).__name__}")
