"""A session that thinks from its first turn on, on a model binding thinking to its
prefix, through the proxy against a fake that checks signatures as Anthropic does.

Without leaving thinking out, nothing before the newest thinking block could ever be
condensed (every assistant message carries one). At the opening of a user turn a step
may rewrite old outputs; the thinking from there on is then left out, on that request
and every later one, and no request is ever refused.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden import Engine
from ctxwarden.config import EngineConfig
from ctxwarden.proxy import Reply, ToolCall
from tests.proxy.conftest import Proxy, ProxyFactory
from tests.proxy.test_thinking_session_e2e import _HEADERS, SYSTEM, THINKING, TOOLS, _output


async def _send(
    http: aiohttp.ClientSession, proxy: Proxy, model: str, messages: list[Any], reply: Reply
) -> dict[str, Any]:
    proxy.fake.script(reply)
    body = {"model": model, "max_tokens": 512, "system": SYSTEM, "tools": TOOLS,
            "messages": messages, "thinking": THINKING}  # fmt: skip
    async with http.post(
        f"{proxy.url}/v1/messages", data=orjson.dumps(body), headers=_HEADERS
    ) as r:
        answer = await r.json()
        assert r.status == 200, answer
    messages.append({"role": "assistant", "content": answer["content"]})
    return proxy.recorder.events[-1]


async def _session(proxy: Proxy, model: str, turns: int, calls: int) -> list[dict[str, Any]]:
    """``turns`` user turns of ``calls`` tool calls each, then a closing text."""
    messages: list[Any] = []
    events = []
    k = 0
    async with aiohttp.ClientSession() as http:
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Task {turn}: check the next dirs."})
            for _ in range(calls):
                call = ToolCall("bash", {"command": f"ls dir{k}"}, f"tu_{k}")
                reply = Reply(text="", tool_calls=[call], thinking=f"List dir{k}.")
                events.append(await _send(http, proxy, model, messages, reply))
                result = {"type": "tool_result", "tool_use_id": f"tu_{k}", "content": _output(k)}
                messages.append({"role": "user", "content": [result]})
                k += 1
            done = Reply(text=f"Task {turn} done.", thinking="All listed.")
            events.append(await _send(http, proxy, model, messages, done))
    return events


def _engine() -> Engine:
    """An engine whose window fills within the session: steps are forced by the band
    (a long session near a window; the prompt-cache sums alone rarely pay for a step
    that rewrites several turns)."""
    config = {"store": {"backend": "memory"}, "budget": {"context_window": 64_000}}
    return Engine(EngineConfig.model_validate(config))


@pytest.mark.parametrize("model", ["claude-fable-5-1", "claude-opus-5-5", "claude-sonnet-5-5"])
async def test_a_thinking_session_is_condensed_at_user_turns_and_never_refused(
    make_proxy: ProxyFactory, model: str
) -> None:
    engine = _engine()
    try:
        async with make_proxy(engine=engine) as proxy:
            events = await _session(proxy, model, turns=8, calls=4)
    finally:
        engine.close()
    assert all(e["status"] == 200 and not e.get("fallbacks") for e in events)
    dropped = [e for e in events if e.get("thinking_dropped")]
    assert dropped  # thinking left out ...
    assert sum(e["tokens_saved"] for e in events) > 0  # ... so old outputs are condensed
    # once left out, the blocks stay out: each later request drops at least as many
    first = events.index(dropped[0])
    assert all(e.get("thinking_dropped", 0) >= 1 for e in events[first:])
    # steps are taken only at user turns; between them the request extends the last
    steps = [e for e in events if e.get("compaction_step")]
    assert steps and all(e in dropped for e in steps)
    # the history outgrew the window; what is sent fits it
    assert events[-1]["tokens_before"] > 100_000 and events[-1]["tokens_after"] < 64_000


async def test_without_user_turns_nothing_before_the_newest_block_is_condensed(
    make_proxy: ProxyFactory,
) -> None:
    # one long turn: no opening where thinking could be left out, even under pressure
    engine = _engine()
    try:
        async with make_proxy(engine=engine) as proxy:
            events = await _session(proxy, "claude-fable-5-1", turns=1, calls=14)
    finally:
        engine.close()
    assert all(e["status"] == 200 and not e.get("fallbacks") for e in events)
    assert not any(e.get("thinking_dropped") for e in events)
    assert not any(e.get("compaction_step") for e in events)
