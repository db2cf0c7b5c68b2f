"""A raw asyncio upstream for tests that need what aiohttp's server will not do (close
a connection mid-body, drop a keep-alive request unanswered)."""

from __future__ import annotations

import asyncio
from typing import Any


class RawUpstream:
    """An ``async with`` server on a free loopback port giving its base URL; subclasses
    implement :meth:`_serve` for each connection."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()
