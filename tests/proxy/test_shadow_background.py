"""Shadow work runs beside the client's exchange, never before it.

A request known to be shadow before condensing (the server mode, the
``x-ctxwarden-mode: shadow`` header, or a canary-out session the client names) is
relayed at once; its condense runs on the
engine thread meanwhile, tracked on the proxy state, and the request's one event is
emitted when both are done, with the shadow report in it. The engine is held on a
gate here, so every ordering below is deterministic: the client's answer comes while
the condense is still blocked.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall, canary_bucket, handlers
from ctxwarden.proxy import app as proxy_app
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory
from tests.proxy.gate import GATE_SECONDS, Gate
from tests.proxy.gate import entered as _entered

AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
SHADOW = {"x-ctxwarden-mode": "shadow"}
NAMED = {"x-ctxwarden-session": "agent-run-7"}
CHAT = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "count the lines " + "and again " * 200},
    ],
}


async def _post(
    proxy: Proxy, body: bytes, path: str = "/v1/chat/completions", **headers: str
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.url + path, data=body, headers={**AUTH, **headers}) as r,
    ):
        return r.status, await r.read()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("how", ["server", "header", "canary_out"])
async def test_the_answer_comes_first_and_the_event_carries_the_shadow_report(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate],
    stream: bool, how: str,
) -> None:  # fmt: skip
    settings: dict[str, Any] = {
        "server": {"mode": "shadow"},
        "header": {},
        "canary_out": {"canary_percent": 0},  # a session the client names buckets at once
    }[how]
    headers = {"header": SHADOW, "canary_out": NAMED}.get(how, {})
    async with make_proxy(**settings) as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        body = orjson.dumps({**CHAT, "stream": stream})
        status, answer = await _post(proxy, body, **headers)
        # the whole answer is in while the condense is still held
        assert status == 200
        assert (b"data: [DONE]" in answer) if stream else orjson.loads(answer)["choices"]
        assert proxy.fake.received[-1].body == body
        await _entered(gate)
        assert proxy.recorder.events == [] and len(proxy.state.background) == 1
        gate.open()
        await proxy.state.drain()
        assert not proxy.state.background
        events = list(proxy.recorder.events)
    assert len(events) == 1 and gate.calls == 1
    assert proxy.recorder.events == events  # exactly once: app cleanup emitted nothing more
    (event,) = events
    assert (event["mode"], event["rollout_reason"], event["status"]) == ("shadow", how, 200)
    assert event["stream"] is stream and event["level"] == "info"
    assert event["tokens_before"] > 0 and event["tokens_after"] > 0
    assert event["tokens_saved"] == event["tokens_before"] - event["tokens_after"]
    assert event["condense_ms"] is not None and event.get("fallback_reason") is None
    assert event["upstream_status"] == 200  # and the relay's own fields
    assert event["usage_completion_tokens"] == (None if stream else 7)
    assert event["total_ms"] < GATE_SECONDS * 1000 / 2  # the times end with the exchange


async def test_a_fast_shadow_condense_is_emitted_when_the_exchange_ends(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(mode="shadow") as proxy:
        proxy.fake.script(Reply(delay=0.3))  # the condense ends well before the answer
        assert (await _post(proxy, orjson.dumps(CHAT)))[0] == 200
        # no background task left: _run emitted the event itself, fields complete
        assert not proxy.state.background
        (event,) = proxy.recorder.events
    assert event["tokens_before"] > 0 and event["mode"] == "shadow"


class _Broken:
    """A condense result whose report is not a report."""

    report = "not a dict"


@pytest.mark.parametrize(
    ("failure", "reason", "level"),
    [
        ("raises", "proxy: RuntimeError", "error"),
        ("malformed result", "proxy: TypeError", "error"),
        # the client's fault, relayed for the upstream to judge: not an error of ours
        ("malformed request", "proxy: malformed request at /messages/0", "warning"),
    ],
)
async def test_a_failing_shadow_condense_never_reaches_the_client(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, failure: str, reason: str,
    level: str,
) -> None:  # fmt: skip
    body = orjson.dumps(CHAT)
    async with make_proxy(mode="shadow") as proxy:
        if failure == "raises":

            def broken(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("boom")

            monkeypatch.setattr(proxy.engine, "condense", broken)
        elif failure == "malformed result":
            monkeypatch.setattr(proxy.engine, "condense", lambda *a, **k: _Broken())
        else:  # content the engine refuses to parse (the fake upstream accepts it)
            body = b'{"model":"gpt-4o","messages":[{"role":"user","content":5}]}'
        status, answer = await _post(proxy, body)
        assert status == 200 and orjson.loads(answer)["choices"]
        assert proxy.fake.received[-1].body == body
        await proxy.state.drain()
        (event,) = proxy.recorder.events
    assert event["status"] == 200 and event["mode"] == "shadow"
    assert event["fallback_reason"].startswith(reason) and event["level"] == level


async def test_a_client_that_goes_away_leaves_no_task_behind(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    async with make_proxy(mode="shadow") as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        proxy.fake.script(Reply(text=" ".join(["word"] * 200), chunk_delay=0.02))
        async with aiohttp.ClientSession() as session:
            body = orjson.dumps({**CHAT, "stream": True})
            resp = await session.post(proxy.url + "/v1/chat/completions", data=body, headers=AUTH)
            assert (await resp.content.readany()).startswith(b"data: ")
            resp.close()  # drop the connection mid-stream
        for _ in range(250):
            if proxy.fake.received[-1].cancelled:
                break
            await asyncio.sleep(0.02)
        assert proxy.fake.received[-1].cancelled
        await _entered(gate)
        (task,) = proxy.state.background  # tracked, still held by the engine
        assert proxy.recorder.events == []
        gate.open()
        await asyncio.wait_for(asyncio.shield(task), GATE_SECONDS)
        await asyncio.sleep(0)  # the done callbacks
        assert not proxy.state.background
        (event,) = proxy.recorder.events
    assert event["client_disconnected"] is True and event["status"] == 499
    assert event["tokens_before"] > 0
    assert len(proxy.recorder.events) == 1


async def test_app_cleanup_cancels_a_shadow_condense_that_overruns(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    monkeypatch.setattr(proxy_app, "_DRAIN_SECONDS", 0.1)
    async with make_proxy(mode="shadow") as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        assert (await _post(proxy, orjson.dumps(CHAT)))[0] == 200
        await _entered(gate)
        (task,) = proxy.state.background
        # the engine thread ends its call later; the executor shutdown waits for it
        threading.Timer(0.5, gate.open).start()
    assert task.cancelled() and not proxy.state.background
    (event,) = proxy.recorder.events  # emitted once, without the shadow report
    assert event["mode"] == "shadow" and event["status"] == 200
    assert "tokens_before" not in event


async def test_a_shadow_backlog_skips_the_condense_not_the_request(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    monkeypatch.setattr(handlers, "SHADOW_BACKLOG", 1)
    async with make_proxy(mode="shadow") as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        assert (await _post(proxy, orjson.dumps(CHAT)))[0] == 200
        assert (await _post(proxy, orjson.dumps(CHAT)))[0] == 200
        skipped = proxy.recorder.events[-1]
        gate.open()
        await proxy.state.drain()
        events = proxy.recorder.events
    assert gate.calls == 1 and len(events) == 2
    assert skipped["fallback_reason"] == "proxy: limit: 1 shadow condenses pending"
    assert skipped["level"] == "warning"  # a load signal, not an error
    assert "tokens_before" not in skipped
    assert events[1]["tokens_before"] > 0  # the first request's, emitted last


@pytest.mark.parametrize("how", ["header", "canary_out"])
async def test_a_shadow_responses_continuation_gets_what_its_response_owes(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate], how: str
) -> None:
    original = "line 1\nline 2 secret-alpha\nline 3"
    tools = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
    path = "/v1/responses"
    # canary_out: the first request is in the canary (active), the continuation names a
    # session outside it, so it takes the shadow-first path with answers owed
    named = [f"run-{i}" for i in range(200)]
    inside = next(s for s in named if canary_bucket(s) < 50)
    outside = next(s for s in named if canary_bucket(s) >= 50)
    first_headers = {"x-ctxwarden-session": inside} if how == "canary_out" else {}
    headers = {"x-ctxwarden-session": outside} if how == "canary_out" else SHADOW
    settings: dict[str, Any] = {"canary_percent": 50} if how == "canary_out" else {}
    async with make_proxy(**settings) as proxy:
        ref = proxy.engine.store.put(proxy.tenant(KEY_A), original)
        calls = [ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1"),
                 ToolCall("read", {"path": "a.py"}, "call_read_1")]  # fmt: skip
        proxy.fake.script(Reply(text="", tool_calls=calls))
        first_body = {"model": "gpt-4o", "input": f"see {ref}", "tools": tools}
        status, first = await _post(proxy, orjson.dumps(first_body), path, **first_headers)
        assert status == 200  # active: recall offered, its call hidden and owed
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        given = [{"type": "function_call_output", "call_id": "call_read_1", "output": "ok"}]
        body = {"model": "gpt-4o", "input": given, "tools": tools,
                "previous_response_id": orjson.loads(first)["id"]}  # fmt: skip
        status, answer = await _post(proxy, orjson.dumps(body), path, **headers)
        assert status == 200, answer  # the fake refuses a call left unanswered
        sent = proxy.fake.received[-1].json()
        assert [i["call_id"] for i in sent["input"]] == ["call_recall_1", "call_read_1"]
        assert sent["input"][0]["output"] == original and "ctxwarden_recall" not in str(
            sent["tools"]
        )
        await _entered(gate)
        assert len(proxy.recorder.events) == 1  # the first request's only
        gate.open()
        await proxy.state.drain()
        event = proxy.recorder.events[-1]
    assert len(proxy.recorder.events) == 2
    assert event["mode"] == "shadow" and event["tokens_before"] > 0
    assert event["rollout_reason"] == ("canary_out" if how == "canary_out" else "header")
    assert event["bytes_after"] == len(proxy.fake.received[-1].body)
