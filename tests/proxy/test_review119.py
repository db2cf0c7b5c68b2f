"""Telemetry and forwarding after a review of the proxy's events (reviewer F).

- A request nested deeper than orjson writes (255 levels; it reads 1024) goes as the
  client sent it in active mode, counted as the client's input, never a 500: the
  engine could not read it, or its rewrite or recall tool could not be written.
- A shadow request's rescue (a refusal answered by sending it again) keeps its
  fallback when the shadow condense ends after it.
- Levels follow docs/proxy.md: a condense that raised is an error; a validation
  fallback and a request over ``--max-messages`` are warnings.
- The savings counters carry the mode, before and saved for the same requests.
- The model string is logged only when it is a plain model name.
- Upstream usage past 64 bits neither loses the log line nor reaches a counter.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.engine import CondenseResult
from ctxwarden.errors import ValidationFailed
from ctxwarden.proxy import Reply, ToolCall
from ctxwarden.telemetry import LogSink, MetricsSink, ProxyMetrics
from ctxwarden.telemetry.events import MAX_COUNT, count, model_label
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, json_logged
from tests.proxy.gate import Gate
from tests.proxy.test_thinking_session_e2e import _HEADERS, THINKING, TOOLS

AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


def _deep_schema(levels: int) -> dict[str, Any]:
    """A JSON schema nested about ``2 * levels`` deep."""
    top: dict[str, Any] = {"type": "object"}
    node = top
    for _ in range(levels):
        node["properties"] = {"x": {"type": "object"}}
        node = node["properties"]["x"]
    return top


def _deep_chat() -> bytes:
    tool = {"type": "function", "function": {"name": "f", "parameters": _deep_schema(135)}}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}
    return json.dumps(body).encode()  # orjson writes 255 levels at most


def _deep_messages() -> bytes:
    value: Any = "leaf"
    for _ in range(300):
        value = {"a": value}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "tu_1", "name": "bash", "input": value}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu_1", "content": "done"}]},
    ]  # fmt: skip
    body = {"model": "claude-opus-4-1", "max_tokens": 64, "tools": TOOLS, "messages": messages}
    return json.dumps(body).encode()


def _kind(proxy: Proxy, route: str, kind: str) -> float | None:
    labels = {"route": route, "kind": kind}
    value = proxy.state.metrics.registry.get_sample_value("ctxwarden_fallbacks_total", labels)
    return float(value) if value is not None else None


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_a_request_nested_deeper_than_orjson_writes_goes_as_sent(
    proxy: Proxy, api: str
) -> None:
    path, data, headers = (
        ("/v1/chat/completions", _deep_chat(), AUTH) if api == "chat"
        else ("/v1/messages", _deep_messages(), _HEADERS)
    )  # fmt: skip
    async with aiohttp.ClientSession() as http, http.post(
        proxy.url + path, data=data, headers=headers
    ) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    assert proxy.fake.received[-1].body == data  # as sent: no recall tool added
    event = proxy.recorder.events[-1]
    assert event["status"] == 200 and event["level"] == "warning"
    assert "nested deeper" in event["fallback_reason"]
    assert not event.get("error_type") and not event.get("recall_injected")
    assert _kind(proxy, api, "client") == 1 and _kind(proxy, api, "error") is None


async def test_a_rewrite_that_cannot_be_written_goes_as_sent(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an engine that reads the request (no fallback): the recall tool added to it would
    # be written past orjson's limit; the request goes as sent, the client's input
    def reads_it(request: dict[str, Any], **_: Any) -> CondenseResult:
        report = {"rewritten": False, "tokens_before": 10, "tokens_after": 10}
        return CondenseResult(dict(request), report)

    monkeypatch.setattr(proxy.engine, "condense", reads_it)
    data = _deep_chat()
    async with aiohttp.ClientSession() as http, http.post(
        proxy.url + "/v1/chat/completions", data=data, headers=AUTH
    ) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    assert proxy.fake.received[-1].body == data
    event = proxy.recorder.events[-1]
    assert event["level"] == "warning" and "nested deeper" in event["fallback_reason"]
    assert event["bytes_after"] == len(data) and not event.get("recall_injected")
    assert _kind(proxy, "chat", "client") == 1


async def test_a_rewrite_ctxwarden_cannot_write_is_its_own_failure(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # helper-125: any unwritable rewrite was called the client's deep nesting; a
    # request the client sent writable and ctxwarden made unwritable is ctxwarden's
    def breaks_it(request: dict[str, Any], **_: Any) -> CondenseResult:
        report = {"rewritten": True, "tokens_before": 10, "tokens_after": 9}
        return CondenseResult({**request, "metadata": {"odd": {1, 2}}}, report)

    monkeypatch.setattr(proxy.engine, "condense", breaks_it)
    data = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    async with aiohttp.ClientSession() as http, http.post(
        proxy.url + "/v1/chat/completions", data=data, headers=AUTH
    ) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    assert proxy.fake.received[-1].body == data
    for _ in range(500):
        if proxy.recorder.events:
            break
        await asyncio.sleep(0.01)
    event = proxy.recorder.events[-1]
    assert event["level"] == "error" and event["fallback_reason"].startswith("error: ")
    assert _kind(proxy, "chat", "error") == 1 and _kind(proxy, "chat", "client") is None


async def test_a_shadow_rescue_keeps_its_fallback_when_the_condense_ends_after_it(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Any]
) -> None:
    model = "claude-fable-5-1"
    async with make_proxy(max_bound_wait=0.3) as proxy, aiohttp.ClientSession() as http:
        proxy.fake.script(Reply(
            text="", tool_calls=[ToolCall("bash", {"command": "ls"}, "tu_1")],
            thinking="I will list."))  # fmt: skip
        messages: list[Any] = [{"role": "user", "content": "Fix the build."}]
        body = {"model": model, "max_tokens": 512, "system": "System A", "tools": TOOLS,
                "messages": messages, "thinking": THINKING}  # fmt: skip
        async with http.post(proxy.url + "/v1/messages", data=orjson.dumps(body),
                             headers=_HEADERS) as r:  # fmt: skip
            answer = await r.json()
            assert r.status == 200
        result = {"type": "tool_result", "tool_use_id": "tu_1", "content": "a b"}
        messages = [
            *messages,
            {"role": "assistant", "content": answer["content"]},
            {"role": "user", "content": [result]},
        ]
        # the same signed block under another system prompt: refused as bound to another
        # conversation, then sent asking the upstream to drop it - while the shadow
        # condense is held
        again = {**body, "system": "System B", "messages": messages}
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        proxy.recorder.clear()
        headers = _HEADERS | {"x-ctxwarden-mode": "shadow", "x-ctxwarden-session": "s1"}
        async with http.post(proxy.url + "/v1/messages", data=orjson.dumps(again),
                             headers=headers) as r:  # fmt: skip
            assert r.status == 200
            await r.read()
        assert b"drop_block" in proxy.fake.received[-1].body
        gate.open()
        await proxy.state.drain()
    (event,) = proxy.recorder.events
    assert event["fallback_reason"].startswith("refused: ") and event["fallbacks"] == 1
    assert event["level"] == "warning"
    assert _kind(proxy, "messages", "refused") == 1


async def _chat(proxy: Proxy, messages: int = 1, model: str = "gpt-4o") -> dict[str, Any]:
    turns = [{"role": "user", "content": f"hi {i}"} for i in range(messages)]
    body = {"model": model, "messages": turns}
    seen = len(proxy.recorder.events)
    async with aiohttp.ClientSession() as http, http.post(
        proxy.url + "/v1/chat/completions", data=orjson.dumps(body), headers=AUTH
    ) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    # the event is emitted as the handler ends, which may be after the client has read
    # the answer (a busy machine: the event list was still empty)
    for _ in range(500):
        if len(proxy.recorder.events) > seen:
            break
        await asyncio.sleep(0.01)
    return proxy.recorder.events[-1]


async def test_levels_say_whose_fault_a_fallback_was(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_proxy(max_messages=5) as proxy:
        condenser = proxy.engine.condenser

        def broken(*_: Any, **__: Any) -> Any:
            raise RuntimeError("a bug in a pass")

        def unsafe(*_: Any, **__: Any) -> Any:
            raise ValidationFailed("message count changed")

        monkeypatch.setattr(condenser, "run", broken)
        crashed = await _chat(proxy)
        monkeypatch.setattr(condenser, "run", unsafe)
        invalid = await _chat(proxy)
        monkeypatch.undo()
        over = await _chat(proxy, messages=6)
    assert (crashed["level"], crashed["fallback_reason"]) == ("error", "RuntimeError")
    assert invalid["level"] == "warning"
    assert invalid["fallback_reason"].startswith("validation: ")
    assert over["level"] == "warning" and "limit: 6 messages > 5" in over["fallback_reason"]


def test_the_savings_counters_count_the_same_requests_by_mode() -> None:
    metrics = ProxyMetrics()
    sink = MetricsSink(metrics)
    sink.emit({"route": "chat", "mode": "active", "status": 200, "tokens_before": 100,
               "tokens_saved": 40})  # fmt: skip
    sink.emit({"route": "chat", "mode": "shadow", "status": 200, "tokens_before": 300,
               "tokens_saved": 90})  # fmt: skip
    sink.emit({"route": "chat", "mode": "exact", "status": 200})
    r = metrics.registry

    def value(name: str, mode: str) -> float | None:
        return r.get_sample_value(f"ctxwarden_{name}_total", {"route": "chat", "mode": mode})

    assert (value("tokens_before", "active"), value("tokens_saved", "active")) == (100, 40)
    assert (value("tokens_before", "shadow"), value("tokens_saved", "shadow")) == (300, 90)
    assert value("tokens_before", "exact") is None and value("tokens_saved", "exact") is None


async def test_a_canary_out_request_counts_its_tokens_under_shadow(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(canary_percent=0) as proxy:
        await _chat(proxy)
        await proxy.state.drain()
        text = proxy.state.metrics.render().decode()
        assert proxy.recorder.events[-1]["rollout_reason"] == "canary_out"
    assert 'ctxwarden_tokens_before_total{mode="shadow",route="chat"}' in text
    assert 'ctxwarden_tokens_before_total{mode="active"' not in text


@pytest.mark.parametrize(
    ("sent", "logged"),
    [
        ("gpt-4o", "gpt-4o"),
        (
            "arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-x@v1",
            "arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude-x@v1",
        ),
        ("gpt-4o?api_key=sk-live-SECRET1234567890", "other"),
        ("gpt-4o\nfake log line", "other"),
        ("gpt-4o" + "x" * 200, "other"),
        ("", "other"),
    ],
)
def test_a_model_name_is_logged_only_when_plain(sent: str, logged: str) -> None:
    assert model_label(sent) == logged
    assert model_label(42) is None


async def test_an_odd_model_string_never_reaches_the_log_line(proxy: Proxy) -> None:
    event = await _chat(proxy, model="gpt-4o?api_key=sk-live-SECRET" + "y" * 5000)
    assert event["model"] == "other"
    assert (await _chat(proxy))["model"] == "gpt-4o"


def test_usage_past_64_bits_keeps_the_log_line_and_no_counter_takes_it() -> None:
    event = {"route": "messages", "mode": "active", "status": 200, "level": "info",
             "usage_prompt_tokens": 2**64, "usage_cached_tokens": 5,
             "usage_completion_tokens": -(2**70)}  # fmt: skip
    with json_logged("ctxwarden.test-review119") as (logger, stream):
        LogSink(logger).emit(event)
    (line,) = stream.getvalue().splitlines()
    written = orjson.loads(line)
    assert written["usage_prompt_tokens"] is None and written["usage_cached_tokens"] == 5
    assert written["usage_completion_tokens"] is None and written["route"] == "messages"
    metrics = ProxyMetrics()
    MetricsSink(metrics).emit(event)
    labels = {"route": "messages"}
    r = metrics.registry
    assert r.get_sample_value("ctxwarden_upstream_prompt_tokens_total", labels) is None
    assert r.get_sample_value("ctxwarden_upstream_cached_tokens_total", labels) == 5
    assert count(MAX_COUNT) == MAX_COUNT and count(MAX_COUNT + 1) is None
    assert count(True) is None and count(-1) is None and count(3.0) == 3
