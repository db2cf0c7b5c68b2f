"""Prometheus metrics for the proxy, fed by request events through the sink seam.

Each :class:`ProxyMetrics` owns its own ``CollectorRegistry`` so that several apps
(tests, embedded use) never collide in the global registry. Labels have bounded
cardinality: route (fixed set), mode (3 values), status (HTTP code), fallback kind
(a fixed classification, not the free-form reason: ``client`` for the client's input,
a malformed or unreadable body, ``store``, ``validation``, ``limit``, ``refused`` (the
upstream refused a rewrite; sent again as the client sent it), and ``error`` for a
failure of ctxwarden's own). No contents, no credentials.

Savings: ``ctxwarden_tokens_before_total{route,mode}`` is the engine's estimate of the
input tokens of the requests it condensed (the request as received), and
``ctxwarden_tokens_saved_total{route,mode}`` what it removed from those same requests:
sent, under ``mode="active"``; what would have been removed, under ``mode="shadow"``
(shadow requests and sessions outside the canary, sent as received); ``mode="exact"``
(rare: a request the kill switch caught queued) saves nothing. So ``saved / before`` of
one mode is that mode's saving rate (a request not condensed counts in neither). A
figure outside ``0..2**53`` (an upstream's misbehaving usage) is not counted
(:func:`~ctxwarden.telemetry.events.count`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ctxwarden.memo import memo_weight
from ctxwarden.telemetry.events import count

__all__ = ["CONTENT_TYPE_LATEST", "MetricsSink", "ProxyMetrics"]

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
)  # fmt: skip
_UPSTREAM_BUCKETS = (*_LATENCY_BUCKETS, 120, 300, 600)
"""A non-streamed answer's headers come after the whole generation: minutes, up to the
default read timeout (600 s)."""


_CLIENT_REASONS = (
    "malformed request",
    "content-encoding",
    "json only the stdlib parser reads",
    "json nested deeper",
    "an integer past 64 bits",
)
"""Starts of the reasons that are the client's input, not a failure of ctxwarden's."""


def _fallback_kind(reason: str) -> str:
    """The fallback's kind, read off the start of its reason (fixed texts only: a
    reason may quote a client's input, which must not pick the kind)."""
    lowered = reason.lower().removeprefix("proxy: ")  # the proxy's own reasons
    if lowered.startswith(_CLIENT_REASONS):
        return "client"
    if lowered.startswith(("storeerror", "artifact")):
        return "store"
    if lowered.startswith("validation"):
        return "validation"
    if lowered.startswith("limit"):
        return "limit"
    if lowered.startswith("refused"):  # the upstream refused a rewrite
        return "refused"
    return "error"


class ProxyMetrics:
    """The proxy's metric families, registered in a private registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "ctxwarden_requests", "Proxied requests.", ("route", "mode", "status"), registry=r
        )
        self.tokens_before = Counter(
            "ctxwarden_tokens_before",
            "Estimated input tokens of the requests condensed, as received (by mode).",
            ("route", "mode"),
            registry=r,
        )
        self.tokens_saved = Counter(
            "ctxwarden_tokens_saved",
            "Estimated input tokens removed from those requests (active: sent; shadow: "
            "would have been).",
            ("route", "mode"),
            registry=r,
        )
        self.upstream_prompt_tokens = Counter(
            "ctxwarden_upstream_prompt_tokens",
            "Prompt tokens as reported by the upstream.",
            ("route",),
            registry=r,
        )
        self.upstream_cached_tokens = Counter(
            "ctxwarden_upstream_cached_tokens",
            "Cached prompt tokens as reported by the upstream.",
            ("route",),
            registry=r,
        )
        self.fallbacks = Counter(
            "ctxwarden_fallbacks",
            "Requests sent uncondensed after a failure.",
            ("route", "kind"),
            registry=r,
        )
        self.recall_rounds = Counter(
            "ctxwarden_recall_rounds", "Server-side recall rounds.", ("route",), registry=r
        )
        self.overhead = Histogram(
            "ctxwarden_overhead_seconds",
            "Time the proxy adds (total minus upstream).",
            ("route", "mode"),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "ctxwarden_upstream_seconds",
            "Upstream time to response headers (first round).",
            ("route",),
            buckets=_UPSTREAM_BUCKETS,
            registry=r,
        )

        self.memo_bytes = Gauge(
            "ctxwarden_memo_bytes",
            "Estimated bytes the process's memos keep alive (at most --memo-mb).",
            registry=r,
        )
        self.memo_bytes.set_function(memo_weight)
        self.engine_queued = Gauge(
            "ctxwarden_engine_queued_jobs",
            "Condenses waiting for the engine thread, by lane (background: the telemetry-only "
            "condenses of sessions outside the canary).",
            ("lane",),
            registry=r,
        )

    def watch_engine(self, queued: Callable[[], tuple[int, int]]) -> None:
        """Report ``queued()`` (foreground, background jobs waiting) at every scrape."""
        self.engine_queued.labels("foreground").set_function(lambda: queued()[0])
        self.engine_queued.labels("background").set_function(lambda: queued()[1])

    def render(self) -> bytes:
        """The text exposition format for ``GET /metrics``."""
        return bytes(generate_latest(self.registry))


class MetricsSink:
    """Updates :class:`ProxyMetrics` from request events (a :class:`Sink`)."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics

    def emit(self, event: Mapping[str, Any]) -> None:
        m = self.metrics
        route = str(event.get("route", "other"))
        mode = str(event.get("mode", "exact"))
        m.requests.labels(route, mode, str(event.get("status", 0))).inc()
        tokens_before = count(event.get("tokens_before"))
        if tokens_before:
            m.tokens_before.labels(route, mode).inc(tokens_before)
            saved = count(event.get("tokens_saved"))
            if saved:
                m.tokens_saved.labels(route, mode).inc(saved)
        prompt = count(event.get("usage_prompt_tokens"))
        if prompt:
            m.upstream_prompt_tokens.labels(route).inc(prompt)
        cached = count(event.get("usage_cached_tokens"))
        if cached:
            m.upstream_cached_tokens.labels(route).inc(cached)
        if event.get("fallback_reason"):
            m.fallbacks.labels(route, _fallback_kind(str(event["fallback_reason"]))).inc()
        rounds = count(event.get("recall_rounds"))
        if rounds:
            m.recall_rounds.labels(route).inc(rounds)
        if event.get("overhead_ms") is not None:
            m.overhead.labels(route, mode).observe(float(event["overhead_ms"]) / 1000)
        if event.get("upstream_ms") is not None:
            m.upstream_latency.labels(route).observe(float(event["upstream_ms"]) / 1000)
