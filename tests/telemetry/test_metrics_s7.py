"""Metrics review (s7): fallback kinds, latency buckets, a valid exposition."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ctxwarden.telemetry import MetricsSink, ProxyMetrics


def _kinds(reason: str) -> set[str]:
    metrics = ProxyMetrics()
    MetricsSink(metrics).emit({"route": "chat", "mode": "active", "status": 200,
                               "fallback_reason": reason})  # fmt: skip
    families = text_string_to_metric_families(metrics.render().decode())
    return {
        s.labels["kind"]
        for f in families
        if f.name == "ctxwarden_fallbacks"
        for s in f.samples
        if s.name == "ctxwarden_fallbacks_total"
    }


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        # the reasons the proxy itself sets (handlers.py) carry a "proxy: " prefix
        ("proxy: limit: 20001 messages > 20000", "limit"),
        ("proxy: limit: body over 33554432 bytes", "limit"),
        ("proxy: StoreError", "store"),
        ("proxy: RuntimeError", "error"),
        ("limit: body over 33554432 bytes", "limit"),
        ("validation: message count changed", "validation"),
        ("ArtifactMissing", "store"),
        ("unreadable: TypeError", "error"),
    ],
)
def test_fallback_kind_of_every_reason_the_proxy_sets(reason: str, kind: str) -> None:
    assert _kinds(reason) == {kind}


def test_upstream_latency_buckets_reach_the_read_timeout() -> None:
    # a non-streamed answer's headers arrive after the whole generation: minutes are
    # normal, and the default read timeout is 600 s; a last finite bucket of 60 s puts
    # every slow answer into +Inf
    metrics = ProxyMetrics()
    sink = MetricsSink(metrics)
    for seconds in (90, 240, 500):
        sink.emit({"route": "chat", "mode": "active", "status": 200, "upstream_ms": seconds * 1e3})

    def below(le: str) -> float | None:
        labels = {"route": "chat", "le": le}
        return metrics.registry.get_sample_value("ctxwarden_upstream_seconds_bucket", labels)

    assert (below("60.0"), below("120.0"), below("300.0"), below("600.0")) == (0, 1, 2, 3)


def test_exposition_parses_and_follows_naming_conventions() -> None:
    metrics = ProxyMetrics()
    sink = MetricsSink(metrics)
    sink.emit({"route": "chat", "mode": "active", "status": 200, "tokens_before": 100,
               "tokens_saved": 40, "usage_prompt_tokens": 90, "usage_cached_tokens": 10,
               "recall_rounds": 1, "overhead_ms": 3.0, "upstream_ms": 9.0,
               "fallback_reason": "validation: x"})  # fmt: skip
    families = list(text_string_to_metric_families(metrics.render().decode()))
    assert families
    for family in families:
        assert family.name.startswith("ctxwarden_")
        if family.type == "counter":
            assert {s.name for s in family.samples} == {family.name + "_total"}
        elif family.type == "gauge":  # creation timestamps, a size in base units, a count
            assert family.name.endswith(("_created", "_bytes", "_jobs"))
        elif family.type == "histogram":
            assert family.name.endswith("_seconds")
        else:
            raise AssertionError(f"unexpected family {family.name} {family.type}")
