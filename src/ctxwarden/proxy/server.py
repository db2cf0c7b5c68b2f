"""Running the app: an in-process handle for tests and embedding, and the CLI loop.

:class:`RunningServer` binds a TCP site (port 0 picks a free port), enables handler
cancellation so that a client disconnect cancels the handler and with it the
upstream request, and tears everything down on exit, so tests never leak servers.
:func:`serve_forever` adds the signals of a long-running process: SIGUSR1 toggles the
kill switch (exact mode for everyone), SIGINT/SIGTERM stop gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from ctxwarden.proxy.gc_pauses import freeze_after_full_collections
from ctxwarden.proxy.listen import MAX_HEADER_BYTES, start_site
from ctxwarden.proxy.rollout import KillSwitch
from ctxwarden.proxy.state import STATE
from ctxwarden.proxy.upstream import plain_netloc

__all__ = ["RunningServer", "install_kill_switch_signal", "serve_forever"]

_log = logging.getLogger("ctxwarden.proxy")


class RunningServer:
    """``async with RunningServer(app, host, port) as server: server.url``."""

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        # bodies are read as sent: forwarded requests keep their codings byte for byte,
        # and the condensed routes decode what they can read (ctxwarden.proxy.bodies)
        self.runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            auto_decompress=False,
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
        )
        if STATE in app:
            app[STATE].bodies_as_sent = True

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> RunningServer:
        """Start the app and listen; when binding fails (a port in use, a host that
        does not resolve) the app's startup is undone (its upstream client closed)
        before a :class:`~.listen.ListenError` naming the address propagates."""
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, backlog=1024)
        try:
            await start_site(site, self.host, self.port)
        except BaseException:
            await self.runner.cleanup()
            raise
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        await self.runner.cleanup()

    async def __aenter__(self) -> RunningServer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def install_kill_switch_signal(
    kill_switch: KillSwitch, loop: asyncio.AbstractEventLoop | None = None
) -> None:
    """SIGUSR1 toggles ``kill_switch`` (remove with ``loop.remove_signal_handler``)."""
    loop = loop or asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, kill_switch.toggle, "SIGUSR1")


async def serve_forever(app: web.Application, host: str, port: int) -> None:
    """Serve until SIGINT/SIGTERM; SIGUSR1 toggles the kill switch. The process's
    full garbage collections skip what survived the last one
    (:func:`~ctxwarden.proxy.gc_pauses.freeze_after_full_collections`) while it serves."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    install_kill_switch_signal(app[STATE].kill_switch, loop)
    server = RunningServer(app, host, port)
    await server.start()
    unhook_gc = freeze_after_full_collections()  # only once serving (a failed start: none)
    try:
        state = app[STATE]
        s = state.settings
        _log.info(  # shown by ``serve``'s default --log-level (info)
            "ctxwarden proxy listening on %s (OpenAI upstream %s, Anthropic upstream %s, "
            "mode %s)", server.url, _without_credentials(s.openai_upstream),
            _without_credentials(s.anthropic_upstream), s.mode or state.engine.config.mode,
        )  # fmt: skip
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await server.stop()
        unhook_gc()


def _without_credentials(url: str) -> str:
    """``url`` for a log line: its scheme, host, port and path, never a user name,
    password or query (where gateways put keys); never raises."""
    try:
        parts = urlsplit(url)
        netloc = plain_netloc(parts)
    except ValueError:
        return "<unreadable url>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
