"""Telemetry: request events, sinks (log line, Prometheus, in-memory), JSON logs.

One seam: a :class:`Sink` receives one event per request. The proxy fans each
event out to a :class:`LogSink`, a :class:`MetricsSink` and whatever the embedder
adds (tests add a :class:`MemoryRecorder`).
"""

from ctxwarden.telemetry.events import EVENT_FIELDS, Fanout, LogSink, MemoryRecorder, Sink
from ctxwarden.telemetry.logs import JsonFormatter, configure_json_logging
from ctxwarden.telemetry.metrics import CONTENT_TYPE_LATEST, MetricsSink, ProxyMetrics

__all__ = [
    "CONTENT_TYPE_LATEST",
    "EVENT_FIELDS",
    "Fanout",
    "JsonFormatter",
    "LogSink",
    "MemoryRecorder",
    "MetricsSink",
    "ProxyMetrics",
    "Sink",
    "configure_json_logging",
]
