"""The aiohttp application: routes, operational endpoints, startup and shutdown.

Endpoints besides the API routes (see :mod:`ctxwarden.proxy.handlers`):

- ``GET /healthz``: the process serves (always 200).
- ``GET /readyz``: 200 when the upstream client is up and the store answers, else 503.
- ``GET /metrics``: Prometheus text format, this app's private registry.
- ``GET|POST /_ctxwarden/kill-switch``: only when an admin token is configured; only
  from loopback peers; the token must be sent as ``x-ctxwarden-admin-token``.
  ``POST {"engaged": true|false}`` sets the switch (exact mode for every request).

Every path under ``/_ctxwarden/`` is the proxy's own: one it does not serve (the
kill switch without a token) is answered 404 here, never forwarded upstream with its
headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import os
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import orjson
from aiohttp import web

from ctxwarden.config import masked_url, redacted
from ctxwarden.engine import Engine
from ctxwarden.memo import set_memo_budget
from ctxwarden.proxy.engine_thread import EngineThread
from ctxwarden.proxy.handlers import handle_condensed, handle_count_tokens, handle_forward
from ctxwarden.proxy.rollout import KillSwitch
from ctxwarden.proxy.settings import ProxySettings
from ctxwarden.proxy.shapes import CONDENSED_ROUTES
from ctxwarden.proxy.state import STATE, ProxyState
from ctxwarden.proxy.tenant import TenantKeys, load_or_create_secret, read_secret_file
from ctxwarden.proxy.upstream import Upstream
from ctxwarden.proxy.websocket import OPEN_SOCKETS, close_open_sockets
from ctxwarden.store import default_data_dir, sqlite_path
from ctxwarden.telemetry import (
    CONTENT_TYPE_LATEST,
    Fanout,
    LogSink,
    MetricsSink,
    ProxyMetrics,
    Sink,
)

__all__ = ["ADMIN_PATH", "build_app", "store_open_failure"]

ADMIN_PATH = "/_ctxwarden/kill-switch"
_log = logging.getLogger("ctxwarden.proxy")

_DRAIN_SECONDS = 5.0
"""On shutdown, background work (shadow condenses) gets this long to end; what is
still running then is cancelled (its request's event is emitted without it)."""


def build_app(
    engine: Engine,
    settings: ProxySettings | None = None,
    *,
    sinks: Iterable[Sink] = (),
    kill_switch: KillSwitch | None = None,
    tenant_secret: bytes | None = None,
) -> web.Application:
    """A ready-to-run app; the engine stays owned by the caller (not closed here).

    ``tenant_secret`` defaults to the per-data-dir secret (created on first use).
    Without ``kill_switch`` the app's switch starts as ``settings.kill_switch`` says.
    ``settings.memo_mb``, when given, sets the process's memo budget.
    """
    settings = settings or ProxySettings()
    if settings.memo_mb is not None:
        set_memo_budget(int(settings.memo_mb * 1024 * 1024))
    if tenant_secret is None and settings.tenant_secret_file:
        tenant_secret = read_secret_file(settings.tenant_secret_file)
    if tenant_secret is None:
        folder = settings.data_dir or engine.config.data_dir or str(default_data_dir())
        tenant_secret = load_or_create_secret(Path(folder))
    metrics = ProxyMetrics()
    telemetry = Fanout([LogSink(), MetricsSink(metrics), *sinks])
    state = ProxyState(
        engine=engine,
        settings=settings,
        tenants=TenantKeys(tenant_secret),
        telemetry=telemetry,
        metrics=metrics,
        kill_switch=kill_switch or KillSwitch(engaged=settings.kill_switch),
        executor=EngineThread("ctxwarden-engine"),
    )
    metrics.watch_engine(state.executor.queued)
    if state.kill_switch.engaged:  # as a switch flipped later is logged (rollout.py)
        _log.warning("kill switch engaged at start")
    # Handlers read bodies from the stream themselves (the API routes have no cap, or
    # forward past it): ``client_max_size`` bounds only ``request.read()`` (admin).
    app = web.Application(client_max_size=settings.max_body_bytes)
    app[STATE] = state
    app.cleanup_ctx.append(_lifecycle)
    app[OPEN_SOCKETS] = set()
    app.on_shutdown.append(close_open_sockets)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    if settings.admin_token:
        app.router.add_route("*", ADMIN_PATH, _admin)
    app.router.add_route("*", "/_ctxwarden{tail:(?:/.*)?}", _own_path)
    for path in CONDENSED_ROUTES:
        app.router.add_post(path, handle_condensed)
    app.router.add_post("/v1/messages/count_tokens", handle_count_tokens)
    app.router.add_route("*", "/{tail:.*}", handle_forward)
    return app


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    s = state.settings
    state.upstream = Upstream(
        connect_timeout=s.connect_timeout,
        read_timeout=s.read_timeout,
        total_timeout=s.total_timeout,
        pool_size=s.pool_size,
    )
    await asyncio.get_running_loop().run_in_executor(state.executor, _warm_up, state.engine)
    await asyncio.get_running_loop().run_in_executor(
        state.executor, _check_secret, state.engine, state.tenants.fingerprint()
    )
    state.engine.background_gc = False  # collected here, on --gc-interval's schedule
    collector = asyncio.create_task(_collect_garbage(state)) if s.gc_interval > 0 else None
    yield
    await state.drain(_DRAIN_SECONDS)
    if collector is not None:
        collector.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector
    await state.upstream.close()
    state.executor.shutdown(wait=True, cancel_futures=True)
    state.store_reads.shutdown(wait=True, cancel_futures=True)


async def _collect_garbage(state: ProxyState) -> None:
    """Every ``gc_interval`` seconds, drop expired and over-cap artifacts and states, in
    the store-read pool (every backend is safe across threads), not on the engine
    thread, where a long round would make requests wait past ``max_engine_wait`` and
    go out uncondensed; a failure is logged and the next round tries again."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(state.settings.gc_interval)
        try:
            dropped = await loop.run_in_executor(state.store_reads, state.engine.store.gc)
        except Exception as exc:
            _log.error("store gc failed: %s", type(exc).__name__)
        else:
            _log.info("store gc dropped %d entries", dropped)
        # the secret's fingerprint is a state too: written again before its TTL ends
        fingerprint = state.tenants.fingerprint()
        await loop.run_in_executor(state.store_reads, _check_secret, state.engine, fingerprint)


SECRET_RECORD = ("ctxwarden", "tenant-secret")
"""Where the store keeps the fingerprint of the tenant secret it was first used with (a
tenant no client maps to: theirs start ``t-``)."""


def _check_secret(engine: Engine, fingerprint: str) -> None:
    """Record the tenant secret's fingerprint in the store (at start and after each gc
    round, so that a running fleet's record never reaches its TTL), and log an error
    when the store holds another: this replica then shares nothing stored with the
    replicas (or the earlier runs) that used the store with that secret (see
    :mod:`ctxwarden.proxy.tenant`). Replicas started at once with different secrets
    may each find none (a read, then a write): the next gc round tells. A memory store
    is the process's own; a store that cannot answer is logged by the requests that
    need it."""
    if engine.config.store.backend == "memory":
        return
    try:
        store = engine.store
        seen = store.get_state(*SECRET_RECORD)
        if seen is None or seen == fingerprint.encode():  # kept, or its TTL renewed
            store.put_state(*SECRET_RECORD, fingerprint.encode())
            return
    except Exception as exc:  # unavailable now: the requests will say so
        _log.warning("tenant secret not checked against the store: %s", type(exc).__name__)
        return
    _log.error(
        "the tenant secret (fingerprint %s) is not the one this store was first used "
        "with (fingerprint %s): clients' sessions, originals and owed recall answers "
        "stored under it are not reachable from this proxy; give every replica the "
        "same --tenant-secret-file (or the same data directory)",
        fingerprint,
        seen.decode("ascii", "replace")[:16],
    )


def _warm_up(engine: Engine) -> None:
    """Load the tokenizer before the first request instead of during it, and open the
    store (here, once: the engine thread and the store-read pool both use it)."""
    try:
        request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "warm up"}]}
        conversation = engine.parse(request, "openai.chat")
        engine.counter_for(engine.registry.lookup("gpt-4o")).count_conversation(conversation)
    except Exception as exc:  # a cold start is slower, not broken
        _log.warning("warm-up failed: %s", type(exc).__name__)
    try:
        _ = engine.store
    except Exception as exc:  # opened on first use instead; /readyz reports it
        _log.error("store failed to open: %s", store_open_failure(engine, exc))


def store_open_failure(engine: Engine, exc: Exception) -> str:
    """Which store of ``engine`` failed to open and why, for the log line at start-up:
    the SQLite file (or the server's URL, its password shown as ``***``, as ``store
    stats`` shows it), then ``exc``'s class and message with every password of the URL
    or in the text redacted (:func:`ctxwarden.config.redacted`). A store error holds
    no message contents."""
    store = engine.config.store
    if store.backend == "sqlite":
        where = os.path.abspath(sqlite_path(store, engine.config.data_dir))
    elif store.url:
        where = f"{store.backend} {masked_url(store.url)}"
    else:
        where = store.backend
    return f"{where}: {type(exc).__name__}: {redacted(str(exc), store.url)}"


def _probe_store(engine: Engine) -> None:
    engine.store.get_state("ctxwarden", "readiness-probe")


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    problems = []
    if state.upstream is None or state.upstream.session.closed:
        problems.append("upstream client")
    try:  # one key lookup: the store answers (stats would walk the whole store); in the
        # store-read pool, so the probe never waits behind a condense
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(state.store_reads, _probe_store, state.engine)
    except Exception as exc:
        _log.error("readiness: store failed: %s", type(exc).__name__)
        problems.append("store")
    body = {"status": "ready" if not problems else "unready", "problems": problems,
            "kill_switch": state.kill_switch.engaged}  # fmt: skip
    return web.json_response(body, status=503 if problems else 200)


async def _metrics(request: web.Request) -> web.Response:
    data = request.app[STATE].metrics.render()
    return web.Response(body=data, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _is_loopback(peer: str | None) -> bool:
    if not peer:
        return False
    try:
        return ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False


async def _own_path(request: web.Request) -> web.Response:
    """A ``/_ctxwarden/`` path this proxy does not serve: 404, not forwarded."""
    if request.path == ADMIN_PATH:
        message = "the kill-switch endpoint is off: start the proxy with --admin-token"
    else:
        message = f"no ctxwarden endpoint {request.path}"
    return web.json_response({"error": message}, status=404)


async def _admin(request: web.Request) -> web.Response:
    state = request.app[STATE]
    token = state.settings.admin_token or ""
    if not _is_loopback(request.remote):
        return web.json_response({"error": "admin endpoint is loopback only"}, status=403)
    given = request.headers.get("x-ctxwarden-admin-token", "")
    if not token or not hmac.compare_digest(given.encode(), token.encode()):
        return web.json_response({"error": "admin token required"}, status=401)
    if request.method == "POST":
        try:
            payload = orjson.loads(await request.read())
            engaged = payload["engaged"]
            if not isinstance(engaged, bool):
                raise TypeError
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return web.json_response({"error": 'send {"engaged": true|false}'}, status=400)
        state.kill_switch.set(engaged, "admin endpoint")
    elif request.method != "GET":
        return web.json_response({"error": "GET or POST"}, status=405)
    return web.json_response({"engaged": state.kill_switch.engaged})
