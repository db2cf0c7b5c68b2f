"""The proxy's shared state and the per-request record that becomes one event."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ctxwarden.engine import Engine
from ctxwarden.proxy.rollout import KillSwitch
from ctxwarden.proxy.settings import ProxySettings
from ctxwarden.proxy.sse import Usage
from ctxwarden.proxy.tenant import TenantKeys
from ctxwarden.proxy.upstream import Upstream
from ctxwarden.telemetry import Fanout, ProxyMetrics

__all__ = ["STATE", "ProxyState", "RequestRecord"]


@dataclass(slots=True)
class ProxyState:
    """Everything a handler needs; one per app.

    ``executor`` has ONE thread: engine calls (CPU work and blocking store I/O) are
    serialized there, so the engine need not be thread-safe and the event loop keeps
    streaming other responses while a large request is condensed.
    """

    engine: Engine
    settings: ProxySettings
    tenants: TenantKeys
    telemetry: Fanout
    metrics: ProxyMetrics
    kill_switch: KillSwitch
    executor: ThreadPoolExecutor
    upstream: Upstream | None = None
    bodies_as_sent: bool = False
    """The server hands request bodies over as sent, codings and all (``RunningServer``
    sets it when it turns aiohttp's ``auto_decompress`` off)."""

    @property
    def client(self) -> Upstream:
        assert self.upstream is not None, "upstream client is created on app startup"
        return self.upstream


STATE = web.AppKey("ctxwarden_state", ProxyState)


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

    def set(self, **values: Any) -> None:
        self.fields.update(values)

    def cut(self, status: int) -> None:
        """The response started as a success and was then cut off by an upstream
        failure: the event and metrics count it as ``status`` (what the upstream
        failure would have been answered with), marked ``stream_cut``."""
        self.cut_status = status
        self.level = "error"
        self.fields["stream_cut"] = True

    def headers_in(self, seconds: float) -> None:
        """Time to the first round's response headers (the upstream latency metric)."""
        if self.first_upstream_ms is None:
            self.first_upstream_ms = round(seconds * 1000, 3)

    def add_upstream(self, seconds: float) -> None:
        """Time of one whole upstream exchange (excluded from the overhead)."""
        self.upstream_seconds += seconds

    def event(self, status: int) -> dict[str, Any]:
        total = time.perf_counter() - self.started
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
