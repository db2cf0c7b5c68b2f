"""The log line, /metrics, /healthz and /readyz, and the public surface."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging

import aiohttp
import openai
import orjson
import pytest

import ctxwarden.proxy
import ctxwarden.telemetry
from ctxwarden import Engine, EngineConfig
from ctxwarden.proxy.tenant import TenantKeys
from ctxwarden.store import MemoryStore
from ctxwarden.telemetry import (
    EVENT_FIELDS,
    JsonFormatter,
    LogSink,
    MetricsSink,
    ProxyMetrics,
    configure_json_logging,
)
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, json_logged

SECRET_TEXT = "do-not-log-this-message-content"


async def _chat(proxy: Proxy) -> None:
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        await c.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": SECRET_TEXT}],
            extra_headers={"x-ctxwarden-session": "my-session-name"},
        )  # fmt: skip


async def test_one_json_log_line_without_contents_or_secrets(proxy: Proxy) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("ctxwarden.requests")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        await _chat(proxy)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    line = orjson.loads(lines[0])
    assert line["route"] == "chat" and line["status"] == 200 and line["level"] == "info"
    assert line["window_source"] == "registry"  # gpt-4o; an unknown model says "fallback"
    for key in ("tokens_before", "tokens_after", "bytes_before", "bytes_after", "overhead_ms",
                "compaction_step",
                "upstream_ms", "band", "usage_prompt_tokens", "rollout_reason"):  # fmt: skip
        assert key in line
    text = lines[0]
    assert SECRET_TEXT not in text and KEY_A not in text and "my-session-name" not in text
    assert set(proxy.recorder.events[-1]) <= EVENT_FIELDS
    # the session's label is keyed: nobody without the proxy's secret can test a guess
    assert line["session"] == proxy.state.tenants.session_label("my-session-name")
    unkeyed = "h-" + hashlib.blake2b(b"my-session-name", digest_size=8).hexdigest()
    assert line["session"] != unkeyed
    other = TenantKeys(b"another secret of enough bytes")
    assert other.session_label("my-session-name") != line["session"]


async def test_metrics_health_and_ready(proxy: Proxy) -> None:
    await _chat(proxy)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/metrics") as r:
            text = await r.text()
        async with s.get(proxy.url + "/healthz") as r:
            assert r.status == 200
        async with s.get(proxy.url + "/readyz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ready"
    assert 'ctxwarden_requests_total{mode="active",route="chat",status="200"} 1.0' in text
    assert "ctxwarden_overhead_seconds_bucket" in text
    assert 'ctxwarden_upstream_prompt_tokens_total{route="chat"}' in text
    memo_line = next(line for line in text.splitlines() if line.startswith("ctxwarden_memo_bytes "))
    assert float(memo_line.split()[1]) > 0  # the request just condensed left memo entries
    assert SECRET_TEXT not in text and KEY_A not in text
    assert len(proxy.fake.received) == 1  # operational endpoints are not forwarded


def test_metrics_sink_counts_savings_fallbacks_and_recall_rounds() -> None:
    metrics = ProxyMetrics()
    sink = MetricsSink(metrics)
    sink.emit({"route": "chat", "mode": "active", "status": 200, "tokens_before": 100,
               "tokens_saved": 40, "recall_rounds": 2, "overhead_ms": 3.0, "upstream_ms": 9.0,
               "fallback_reason": "StoreError"})  # fmt: skip
    r = metrics.registry
    labels = {"route": "chat", "mode": "active"}
    assert r.get_sample_value("ctxwarden_tokens_saved_total", labels) == 40
    assert r.get_sample_value("ctxwarden_recall_rounds_total", {"route": "chat"}) == 2
    assert r.get_sample_value("ctxwarden_fallbacks_total", {"route": "chat", "kind": "store"}) == 1
    assert ProxyMetrics().registry is not r  # one registry per app


def test_log_sink_levels_and_formatter_drop_exception_text() -> None:
    with json_logged("ctxwarden.test-sink") as (logger, stream):
        LogSink(logger).emit({"route": "chat", "level": "error"})
        try:
            raise ValueError(SECRET_TEXT)
        except ValueError:
            logger.exception("boom")
    first, second = (orjson.loads(x) for x in stream.getvalue().splitlines())
    assert first["level"] == "error" and first["route"] == "chat"
    assert second["exc_type"] == "ValueError" and SECRET_TEXT not in stream.getvalue()


async def test_library_errors_are_logged_without_the_raw_request(
    proxy: Proxy, restored_loggers: None
) -> None:
    # aiohttp's parser errors carry the raw bytes (an API key, message text) in the
    # traceback; the serve command's logging keeps only the exception's type
    stream = io.StringIO()
    configure_json_logging(logging.INFO, stream)
    host, port = proxy.openai_url.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + KEY_A.encode() + b"\x01\r\nContent-Length: 2\r\n\r\n{}"
    )  # fmt: skip
    await writer.drain()
    assert (await reader.read(12)).startswith(b"HTTP/1.")
    writer.close()
    await writer.wait_closed()

    def logged() -> bool:
        records = [orjson.loads(line) for line in stream.getvalue().splitlines()]
        return any(r["logger"] == "aiohttp.server" and r.get("exc_type") for r in records)

    for _ in range(500):  # the server logs after it answered (later on a busy machine)
        if logged():
            break
        await asyncio.sleep(0.01)
    text = stream.getvalue()
    assert logged(), text
    assert KEY_A not in text and "Traceback" not in text


def test_exported_names() -> None:
    assert set(ctxwarden.proxy.__all__) == {
        "ADMIN_PATH", "RECALL_TOOL_NAME", "FakeUpstream", "KillSwitch", "ProxySettings",
        "Received", "Reply", "RunningServer", "TenantKeys", "ToolCall", "build_app",
        "canary_bucket", "serve_forever",
    }  # fmt: skip
    assert set(ctxwarden.telemetry.__all__) == {
        "CONTENT_TYPE_LATEST", "EVENT_FIELDS", "Fanout", "JsonFormatter", "LogSink",
        "MemoryRecorder", "MetricsSink", "ProxyMetrics", "Sink", "configure_json_logging",
    }  # fmt: skip
    for name in ctxwarden.proxy.__all__:
        assert getattr(ctxwarden.proxy, name) is not None


class _CountingStore(MemoryStore):
    """A memory store that counts garbage collections and refuses to walk itself."""

    def __init__(self) -> None:
        super().__init__()
        self.collections = 0

    def gc(self, now: float | None = None) -> int:
        self.collections += 1
        return super().gc(now)

    def stats(self) -> dict[str, int]:
        raise AssertionError("readiness must not walk the whole store")


@pytest.mark.parametrize("interval", [1.0, 0.0])
async def test_the_store_is_collected_on_schedule_and_probed_cheaply(
    make_proxy: ProxyFactory, interval: float
) -> None:
    store = _CountingStore()
    engine = Engine(EngineConfig(store={"backend": "memory"}), store=store)
    async with make_proxy(engine, gc_interval=interval) as proxy:
        await asyncio.sleep(2.3 if interval else 0.3)
        async with aiohttp.ClientSession() as s, s.get(proxy.url + "/readyz") as r:
            assert r.status == 200
    assert (store.collections >= 2) if interval else store.collections == 0


@pytest.mark.parametrize("interval", [-1.0, 1e-9, 0.5, float("inf"), float("nan")])
def test_a_gc_interval_is_never_or_at_least_a_second(interval: float) -> None:
    from ctxwarden.errors import ConfigError
    from ctxwarden.proxy import ProxySettings

    with pytest.raises(ConfigError, match="gc_interval"):
        ProxySettings(gc_interval=interval)


async def test_the_log_line_says_when_a_request_was_a_compaction_step(proxy: Proxy) -> None:
    """A step rewrites the prompt prefix the provider cached: the event says so (the
    engine's report had it; the log did not, so steps could not be counted)."""
    from tests.passes.convo import call, lines_of, result

    history: list[dict[str, object]] = [
        {"role": "system", "content": "agent"}, {"role": "user", "content": "fix it"},
    ]  # fmt: skip
    steps = []
    async with aiohttp.ClientSession() as session:
        for i in range(3):
            history += [call(f"c{i}", f"cat f{i}.py"), result(f"c{i}", lines_of(f"f{i}", 200))]
            body = {"model": "gpt-4o", "messages": history}
            headers = {"Authorization": f"Bearer {KEY_A}", "x-ctxwarden-session": "s"}
            async with session.post(
                proxy.openai_url + "/chat/completions", json=body, headers=headers
            ) as resp:
                assert resp.status == 200
            await proxy.state.drain()
            steps.append(proxy.recorder.last(route="chat")["compaction_step"])
    assert steps[0] is False and True in steps[1:]
