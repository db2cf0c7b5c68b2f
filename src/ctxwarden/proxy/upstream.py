"""The upstream client: one pooled aiohttp session, header hygiene, error translation.

Contract:

- One ``ClientSession`` per app with a keep-alive connection pool; timeouts are
  ``connect`` (to establish), ``sock_read`` (between bytes, so long streams live;
  raised per request to a longer timeout the client states, :func:`client_timeout`)
  and an optional ``total``.
- Request headers are forwarded untouched except hop-by-hop headers, ``Host``,
  ``Content-Length`` (recomputed, or given for a streamed body of known length), the
  proxy's own ``x-ctxwarden-*`` and ``Accept-Encoding``: the proxy reads and relays
  decoded bodies, so aiohttp asks only for the codings it can decode (the client's
  list may name ``br``/``zstd`` that it cannot). A request body goes out as the client
  sent it, ``Content-Encoding`` included, unless ctxwarden decoded or wrote it: then
  the coding no longer describes it and is dropped.
  Credentials pass through as they came and are never logged.
- A request body is ``bytes``, an async iterable of chunks (streamed, never held
  whole) or ``None``.
- aiohttp errors are translated where they enter: :class:`UpstreamTimeout` (the
  proxy answers 504) and :class:`UpstreamUnavailable` (502), both ``from`` the cause.
  A failure to connect or to get the headers names the upstream by its host and port
  only (:func:`upstream_name`: never a user name, password, path or query, where
  gateways put keys); :attr:`UpstreamError.public`, the message for clients, names no
  address (an internal gateway's address is no client's business), and neither does
  a failure reading a body (:func:`translate_read_error`), which a recall stream
  sends the client in an error event.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from urllib.parse import SplitResult, urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from ctxwarden.errors import CtxwardenError

__all__ = [
    "HOP_BY_HOP",
    "Body",
    "Upstream",
    "UpstreamError",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "client_timeout",
    "plain_netloc",
    "request_headers",
    "response_headers",
    "translate_read_error",
    "upstream_name",
]

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "trailers", "transfer-encoding", "upgrade", "host", "content-length",
    }
)  # fmt: skip
_REQUEST_DROP = HOP_BY_HOP | {"accept-encoding", "expect"}
"""``Expect: 100-continue`` was answered to the client already (the proxy reads the
body); forwarded, it waits on an upstream that may never send 100."""
_RESPONSE_DROP = HOP_BY_HOP | {"content-encoding", "date", "server"}

#: A request body: whole bytes, streamed chunks, or none.
Body = bytes | AsyncIterable[bytes] | None


class UpstreamError(CtxwardenError):
    """The upstream could not be reached or did not answer in time. ``str()`` may name
    the upstream's host and port (for the operator); :attr:`public` is the message
    for a client, naming no address."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self.public = message if public is None else public


class UpstreamUnavailable(UpstreamError):
    """Connection refused, reset or closed before a response (502)."""


class UpstreamTimeout(UpstreamError):
    """No response (or no bytes) within the configured timeout (504)."""


def request_headers(
    headers: Mapping[str, str], *, decoded: bool = False, length: int | None = None
) -> CIMultiDict[str]:
    """Headers to send upstream (see module contract).

    ``decoded``: the body was content-decoded on the way in, so its
    ``Content-Encoding`` no longer describes it and is dropped. ``length``: the
    ``Content-Length`` of a streamed body (``None``: aiohttp computes it for bytes,
    streams go chunked).
    """
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lowered = name.lower()
        if lowered in _REQUEST_DROP or lowered.startswith("x-ctxwarden-"):
            continue
        if decoded and lowered == "content-encoding":
            continue
        out.add(name, value)
    if length is not None:
        out["Content-Length"] = str(length)
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
            skip_auto_headers=("User-Agent", "Content-Type", "Accept"),
        )

    @asynccontextmanager
    async def open(
        self, method: str, url: str, headers: Mapping[str, str], body: Body, *,
        decoded: bool = False, length: int | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:  # fmt: skip
        """Send one request; yields the response with headers read, body unread.

        ``headers`` are the client's (filtered here, see :func:`request_headers` for
        ``decoded`` and ``length``). On exit the connection returns to the pool when
        the body was read fully and is closed otherwise (a cancelled stream must not
        be reused).
        """
        sent = request_headers(headers, decoded=decoded, length=length)
        timeout = self._timeout_for(headers)
        try:
            response = await self.session.request(
                method, url, headers=sent, data=body, allow_redirects=False, timeout=timeout
            )
        except aiohttp.ConnectionTimeoutError as exc:
            said = f"no connection within {self.timeout.connect}s"
            raise UpstreamTimeout(
                f"upstream {upstream_name(url)}: {said}", f"upstream: {said}"
            ) from exc
        except TimeoutError as exc:
            said = f"did not answer within {timeout.sock_read or timeout.total}s"
            raise UpstreamTimeout(
                f"upstream {upstream_name(url)} {said}", f"upstream {said}"
            ) from exc
        except (aiohttp.ClientError, OSError) as exc:
            said = f"unavailable: {type(exc).__name__}"
            raise UpstreamUnavailable(
                f"upstream {upstream_name(url)} {said}", f"upstream {said}"
            ) from exc
        try:
            yield response
        finally:
            if response.content.at_eof():
                response.release()
            else:
                response.close()

    def _timeout_for(self, headers: Mapping[str, str]) -> aiohttp.ClientTimeout:
        """The timeouts for one request: the proxy's, with the wait between bytes
        raised to the client's own (:func:`client_timeout`) and a little more when
        that is longer. A non-streamed answer sends no
        byte until it is whole: a client that waits 30 minutes for one gets it, or its
        own timeout, never the proxy's 504 first (which the SDKs retry, paying for the
        generation again)."""
        client = client_timeout(headers)
        read = self.timeout.sock_read
        if client is None or read is None or client + CLIENT_TIMEOUT_MARGIN <= read:
            return self.timeout
        return aiohttp.ClientTimeout(
            total=self.timeout.total,
            connect=self.timeout.connect,
            sock_read=client + CLIENT_TIMEOUT_MARGIN,
        )

    async def close(self) -> None:
        await self.session.close()


CLIENT_TIMEOUT_MARGIN = 5.0
"""Seconds the proxy waits past a client's stated timeout, so the client's own
timeout fires first, as it would without the proxy."""

MAX_CLIENT_TIMEOUT = 24 * 3600.0
"""The longest client timeout honoured (a larger one is taken as this)."""


def client_timeout(headers: Mapping[str, str]) -> float | None:
    """The client's own wait between bytes in seconds, as the openai and anthropic SDKs
    state it (``X-Stainless-Read-Timeout``, else ``X-Stainless-Timeout``); ``None``
    when neither is a positive finite number (the anthropic SDK sends ``NOT_GIVEN``
    as the latter at times)."""
    stated = {k.lower(): v for k, v in headers.items() if k.lower() in _TIMEOUT_HEADERS}
    for name in _TIMEOUT_HEADERS:
        try:
            seconds = float(stated.get(name, ""))
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds > 0:
            return min(seconds, MAX_CLIENT_TIMEOUT)
    return None


_TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")


def translate_read_error(exc: BaseException) -> UpstreamError:
    """Map an error raised while reading a response body; its message names no
    address (it reaches clients: see module contract)."""
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout("upstream stalled while sending the body")
    return UpstreamUnavailable(f"upstream body failed: {type(exc).__name__}")


def upstream_name(url: str) -> str:
    """The upstream ``url`` goes to, for an error message: its host and port, never a
    user name, password, path or query (where gateways put keys); never raises."""
    try:
        return plain_netloc(urlsplit(url), missing="?")
    except ValueError:
        return "<unreadable url>"


def plain_netloc(parts: SplitResult, *, missing: str = "") -> str:
    """The host (``missing`` when none; IPv6 in brackets) and port of ``parts``, never a
    user name or password; :class:`ValueError` for a port that is not one."""
    host = parts.hostname or missing
    name = f"[{host}]" if ":" in host else host
    return name if parts.port is None else f"{name}:{parts.port}"
