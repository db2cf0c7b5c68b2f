"""The proxy's shared state and the per-request record that becomes one event."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import Counter

from ctxwarden.engine import Engine
from ctxwarden.proxy.engine_thread import EngineThread
from ctxwarden.proxy.rollout import KillSwitch
from ctxwarden.proxy.settings import ProxySettings
from ctxwarden.proxy.sse import Usage
from ctxwarden.proxy.tenant import TenantKeys
from ctxwarden.proxy.upstream import Upstream
from ctxwarden.telemetry import Fanout, ProxyMetrics

__all__ = ["STATE", "HeldBytes", "Hold", "ProxyState", "RequestRecord"]

_log = logging.getLogger("ctxwarden.proxy")


class HeldBytes:
    """The process-wide budget of bytes held whole to give Responses bodies past
    ``max_body_bytes`` the recall answers they owe (:mod:`ctxwarden.proxy.owed`).

    A body counts with the larger of its sizes as sent and decoded, from when it is
    held until its exchange ends (it peaks at about three times that: the bytes, the
    parsed value, the rewrite). Used on the event loop only, so no lock."""

    __slots__ = ("held", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    @contextmanager
    def hold(self) -> Iterator[Hold]:
        """A :class:`Hold` of nothing yet, released however the block ends."""
        hold = Hold(self)
        try:
            yield hold
        finally:
            hold.resize(0)


class Hold:
    """One request's share of :class:`HeldBytes`."""

    __slots__ = ("_budget", "size")

    def __init__(self, budget: HeldBytes) -> None:
        self._budget = budget
        self.size = 0

    def grow_to(self, size: int) -> bool:
        """Hold ``size`` bytes (at least what is held already); False, holding what it
        did, when the budget cannot give the rest."""
        extra = size - self.size
        if extra <= 0:
            return True
        if self._budget.held + extra > self._budget.total:
            return False
        self.resize(size)
        return True

    def grow_within(self, size: int) -> int:
        """Hold up to ``size`` bytes, as many as the budget has room for (never less
        than held already); the bytes now held."""
        room = self._budget.total - self._budget.held + self.size
        self.resize(max(self.size, min(size, room)))
        return self.size

    def resize(self, size: int) -> None:
        """Hold exactly ``size`` bytes, within the budget or not (shrinking only
        gives back)."""
        self._budget.held += size - self.size
        self.size = size

    def keep_until(self, work: asyncio.Future[Any]) -> None:
        """Leave what is held to ``work`` (a thread still reading the body after its
        request was cancelled): given back when it ends, not when the request does."""
        size, self.size = self.size, 0
        budget = self._budget

        def give_back(_done: asyncio.Future[Any]) -> None:
            budget.held -= size

        work.add_done_callback(give_back)


CANARY_KEYS = 65_536
"""Responses ids whose canary key :attr:`ProxyState.canary_keys` remembers at most (the
oldest go first: their continuations then read the key from the store)."""

OWING_TENANTS = 10_000
"""Tenants :attr:`ProxyState.owing_since` remembers at most (the oldest go first:
only the fast path is lost, the store still answers)."""


REFUSED_SESSIONS = 10_000
"""Sessions :attr:`ProxyState.refused_sessions` remembers at most (the oldest go first)."""

REFUSED_SECONDS = 3600.0
"""How long a session whose rewrite the upstream refused is sent as the client sends it."""


K = TypeVar("K")
V = TypeVar("V")


def _lately(entries: dict[tuple[str, str], float], tenant: str, session: Any) -> bool:
    """Whether ``(tenant, session)`` was put in ``entries`` within
    :data:`REFUSED_SECONDS` (an older entry is removed)."""
    if not isinstance(session, str):
        return False
    since = entries.get((tenant, session))
    if since is None:
        return False
    if time.monotonic() - since < REFUSED_SECONDS:
        return True
    del entries[(tenant, session)]
    return False


def _remember(entries: dict[tuple[str, str], float], tenant: str, session: Any) -> None:
    """Put ``(tenant, session)`` in ``entries`` now (at most :data:`REFUSED_SESSIONS`)."""
    if isinstance(session, str):
        keep_newest(entries, (tenant, session), time.monotonic(), REFUSED_SESSIONS)


def keep_newest(entries: dict[K, V], key: K, value: V, limit: int) -> None:
    """Set ``entries[key] = value`` as the newest entry, and drop the oldest ones past
    ``limit`` entries (a dict keeps insertion order)."""
    entries.pop(key, None)
    entries[key] = value
    while len(entries) > limit:
        del entries[next(iter(entries))]


@dataclass(slots=True)
class ProxyState:
    """Everything a handler needs; one per app.

    ``executor`` has ONE thread: condenses (CPU work and blocking store I/O) run there,
    one at a time, so the event loop keeps streaming other responses while a large
    request is condensed. Its background lane
    (:mod:`ctxwarden.proxy.engine_thread`) holds the condenses of sessions outside the
    canary, which run only while no other job waits.

    ``background`` holds the tasks that outlive their request (a shadow request's
    condense, see :func:`ctxwarden.proxy.handlers.handle_condensed`): each leaves the
    set when done, and app cleanup drains them (:meth:`drain`), so none is destroyed
    pending.

    ``store_reads`` runs the store work that must not wait behind a condense on
    ``executor``: whether a tenant owes recall answers and the writing of them
    (:mod:`ctxwarden.proxy.owed`), recall answers, the canary keys kept for other
    replicas, the readiness probe and the periodic gc; every store backend is safe
    across threads.
    """

    engine: Engine
    settings: ProxySettings
    tenants: TenantKeys
    telemetry: Fanout
    metrics: ProxyMetrics
    kill_switch: KillSwitch
    executor: EngineThread
    upstream: Upstream | None = None
    bodies_as_sent: bool = False
    """The server hands request bodies over as sent, codings and all (``RunningServer``
    sets it when it turns aiohttp's ``auto_decompress`` off)."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    store_reads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="ctxwarden-store")
    )
    owing_since: dict[str, float] = field(default_factory=dict)
    """Tenants this process wrote owed recall answers for, each with the
    ``time.monotonic()`` before its last such write (at most :data:`OWING_TENANTS`,
    the least recently written dropped first): within the store's TTL of it the tenant
    is owing without asking the store (:func:`ctxwarden.proxy.owed.owing`)."""
    canary_keys: dict[tuple[str, str], str] = field(default_factory=dict)
    """The canary key of each Responses id this process answered with, by tenant and
    id (at most :data:`CANARY_KEYS`; written on the event loop when the id is shown to
    the client, so a continuation this process receives finds it at once, before the
    store write, for other replicas, lands; :mod:`ctxwarden.proxy.rollout`)."""
    refused_sessions: dict[tuple[str, str], float] = field(default_factory=dict)
    """Sessions whose rewrite the upstream refused (a 400) while the request as the
    client sent it was then accepted, by tenant and session key, with the
    ``time.monotonic()`` of the refusal: for :data:`REFUSED_SECONDS` their requests go
    as the client sends them (a provider that binds what it answered to the prompt it
    saw, as Anthropic binds thinking blocks, accepts the session only so from then on).
    At most :data:`REFUSED_SESSIONS`; this process only (another replica learns it from
    one refusal of its own)."""
    dropping_sessions: dict[tuple[str, str], float] = field(default_factory=dict)
    """Sessions whose request as sent was refused for thinking bound to a different
    conversation and then accepted asking the API to drop those blocks
    (:mod:`~ctxwarden.proxy.block_binding`), by tenant and session key, with the
    ``time.monotonic()`` of it: for :data:`REFUSED_SECONDS` their requests go so at
    once (Anthropic: store that choice with the session), not refused first. At most
    :data:`REFUSED_SESSIONS`; this process only."""
    owed_held: HeldBytes = field(init=False)
    """Bytes held for owed answers (``settings.max_owed_held_bytes``)."""
    owed_unsettled: Counter = field(init=False)
    """Responses requests forwarded as sent although recall answers their tenant owes
    may be missing from them (:mod:`ctxwarden.proxy.owed`), by ``reason``:
    ``over_limit`` (past ``max_owed_body_bytes``), ``coding`` (the body could not be
    read) or ``busy`` (``max_owed_held_bytes`` were held by other requests)."""

    def __post_init__(self) -> None:
        self.owed_held = HeldBytes(self.settings.owed_held_bytes)
        self.owed_unsettled = Counter(
            "ctxwarden_owed_unsettled",
            "Responses requests forwarded as sent while recall answers may be owed.",
            ("reason",),
            registry=self.metrics.registry,
        )
        for reason in ("over_limit", "coding", "busy"):
            self.owed_unsettled.labels(reason)

    def remember_canary_key(self, tenant: str, response_id: str, key: str) -> None:
        """Keep ``key`` as the canary key of ``response_id`` (see :attr:`canary_keys`)."""
        keep_newest(self.canary_keys, (tenant, response_id), key, CANARY_KEYS)

    def refuses(self, tenant: str, session: Any) -> bool:
        """Whether ``session`` is one whose rewrite was refused lately (see
        :attr:`refused_sessions`)."""
        return _lately(self.refused_sessions, tenant, session)

    def remember_refusal(self, tenant: str, session: Any) -> None:
        """``session``'s rewrite was refused and its request as sent accepted."""
        _remember(self.refused_sessions, tenant, session)

    def drops_blocks(self, tenant: str, session: Any) -> bool:
        """Whether ``session`` goes asking the API to drop thinking blocks bound to a
        different conversation (see :attr:`dropping_sessions`)."""
        return _lately(self.dropping_sessions, tenant, session)

    def remember_drop(self, tenant: str, session: Any) -> None:
        """``session``'s request was accepted only asking the API to drop blocks."""
        _remember(self.dropping_sessions, tenant, session)

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` as a tracked background task (see ``background``)."""
        task = asyncio.get_running_loop().create_task(work)
        self.background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("background task failed: %s", type(task.exception()).__name__)

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for the background tasks, at most ``timeout`` seconds (``None``: as
        long as they take); those still pending then are cancelled and awaited."""
        pending = set(self.background)
        if not pending:
            return
        _done, pending = await asyncio.wait(pending, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)  # outcomes are read in ``_finished``

    @property
    def client(self) -> Upstream:
        assert self.upstream is not None, "upstream client is created on app startup"
        return self.upstream


STATE = web.AppKey("ctxwarden_state", ProxyState)


_LEVELS = ("info", "warning", "error")
"""The levels of a request's event, lowest first."""


@dataclass(slots=True)
class RequestRecord:
    """Counters of one request; :meth:`event` turns them into the telemetry event.

    Holds no contents and no header values by construction.
    """

    route: str
    method: str
    mode: str = "exact"
    started: float = field(default_factory=time.perf_counter)
    fields: dict[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    upstream_seconds: float = 0.0
    first_upstream_ms: float | None = None
    level: str = "info"
    cut_status: int | None = None
    ended: float | None = None
    """When the client's exchange ended (the event's times end there, not when it is
    emitted)."""
    shadow: asyncio.Task[None] | None = None
    """A shadow condense still filling in this record: the event waits for it."""
    answered: int | None = None
    """The status of a streamed answer whose final event reached the client
    (:meth:`final_event_sent`): a client that leaves after it has the whole answer."""

    def set(self, **values: Any) -> None:
        self.fields.update(values)

    def at_least(self, level: str) -> None:
        """Raise the event's level to ``level`` (never lower it)."""
        if _LEVELS.index(level) > _LEVELS.index(self.level):
            self.level = level

    def upstream_failed(self, error_type: str) -> None:
        """The upstream failed (no answer, a stall, a cut): at warning, an upstream
        fault and not ctxwarden's, whether the answer had started or not."""
        self.set(error_type=error_type)
        self.at_least("warning")

    def cut(self, status: int) -> None:
        """The response started as a success and was then cut off by an upstream
        failure: the event and metrics count it as ``status`` (what the upstream
        failure would have been answered with), marked ``stream_cut``, at warning as
        an upstream failure before the answer started is."""
        self.cut_status = status
        self.at_least("warning")
        self.fields["stream_cut"] = True

    def final_event_sent(self, status: int) -> None:
        """The final event of a streamed answer of ``status`` was written to the client
        (:func:`~ctxwarden.proxy.sse.ends_stream`): a disconnect from here on is no
        client abort (no 499, no ``client_disconnected``), since the client holds the
        whole answer; the openai SDK closes the connection right after ``[DONE]``, which
        may come before the upstream's body ends."""
        self.answered = status

    def client_left(self) -> int:
        """The status of a request whose client went away (the handler was cancelled,
        or a write found the connection closed): the answer's own once its final event
        was sent (:meth:`final_event_sent`), else 499, a client abort, marked
        ``client_disconnected``."""
        if self.answered is not None:
            return self.answered
        self.fields["client_disconnected"] = True
        return 499

    def headers_in(self, seconds: float) -> None:
        """Time to the first round's response headers (the upstream latency metric)."""
        if self.first_upstream_ms is None:
            self.first_upstream_ms = round(seconds * 1000, 3)

    def add_upstream(self, seconds: float) -> None:
        """Time of one whole upstream exchange (excluded from the overhead): from the
        request's start to the end of its body however it ended (read, cut off, failed
        to connect, or stopped by a client that left), a stream's relaying included."""
        self.upstream_seconds += seconds

    def event(self, status: int) -> dict[str, Any]:
        end = time.perf_counter() if self.ended is None else self.ended
        total = end - self.started
        out: dict[str, Any] = {
            "event": "request",
            "level": self.level,
            "route": self.route,
            "method": self.method,
            "mode": self.mode,
            "status": status,
            **self.fields,
            "upstream_ms": self.first_upstream_ms,
            "total_ms": round(total * 1000, 3),
            "overhead_ms": round(max(0.0, total - self.upstream_seconds) * 1000, 3),
            "usage_prompt_tokens": self.usage.prompt_tokens,
            "usage_cached_tokens": self.usage.cached_tokens,
            "usage_completion_tokens": self.usage.completion_tokens,
        }
        return out
