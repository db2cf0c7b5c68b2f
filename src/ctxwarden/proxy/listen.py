"""Binding a listening socket, with an error that says where it could not listen.

A failed bind surfaces from asyncio as a bare ``[Errno -2] Name or service not known``
or ``[Errno 98] error while attempting to bind on address ...``: :class:`ListenError`
(still an :class:`OSError`, with its ``errno``) names the host and port, and which of
the two is at fault (``option``: ``"host"`` for a name that does not resolve or an
address that is not this machine's, else ``"port"``), so a command can name the flag
or variable it came from.
"""

from __future__ import annotations

import errno as errnos
import os
import socket

from aiohttp import web

__all__ = ["MAX_HEADER_BYTES", "ListenError", "start_site"]

MAX_HEADER_BYTES = 65536
"""The longest request line and header field a server of ours reads (aiohttp's default,
8190, refused large bearer tokens, e.g. JWTs, that providers and gateways take)."""

_HOST_ERRNOS = frozenset({errnos.EADDRNOTAVAIL, errnos.EAFNOSUPPORT})
"""Bind errors that are the host's: an address this machine does not have."""


class ListenError(OSError):
    """A server could not listen on ``host``:``port`` (``reason``: the system's words;
    ``option``: ``"host"`` or ``"port"``, the one at fault)."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.host = host
        self.port = port
        resolving = isinstance(cause, socket.gaierror)
        self.option = "host" if resolving or cause.errno in _HOST_ERRNOS else "port"
        if resolving or not cause.errno or cause.errno < 0:
            self.reason = cause.strerror or type(cause).__name__
        else:
            self.reason = os.strerror(cause.errno)

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"cannot listen on {self.address}: {self.reason}"


async def start_site(site: web.TCPSite, host: str, port: int) -> None:
    """``site.start()``, raising :class:`ListenError` when it cannot bind."""
    try:
        await site.start()
    except ListenError:
        raise
    except OSError as exc:
        raise ListenError(host, port, exc) from exc
