"""A whole agent session with thinking through the proxy, against a fake that checks
thinking signatures as Anthropic does (``fake_thinking``): no request is ever refused.

The agent works ten turns without thinking (the proxy condenses its old outputs, in
steps), then turns thinking on and works on, echoing every assistant message exactly as
it was answered. For a model that binds thinking blocks to their prefix, a block is
refused once anything before it differs from what the model saw when it wrote it; for
any model, a block whose text changed. The proxy must keep sending what each block was
produced after (its adopted replacements, even when their artifacts are lost) and
condense nothing new before the newest block; for a model that does not bind, it goes
on condensing what precedes the blocks.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import Reply, ToolCall
from ctxwarden.store import MemoryStore
from tests.proxy.conftest import KEY_A, Proxy

SYSTEM = "You are a coding agent."
TOOLS = [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
_HEADERS = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01",
            "content-type": "application/json"}  # fmt: skip


def _output(k: int) -> str:
    return "\n".join(f"file_{k}_{i}.py: checked module_{k}_{i} ok" for i in range(150))


async def _turn(
    http: aiohttp.ClientSession, proxy: Proxy, model: str, messages: list[Any], k: int,
    thinking: bool, headers: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One agent turn: the model calls bash; the answer is echoed and the output added
    (``headers``: sent besides the usual ones)."""
    reply = Reply(text="", tool_calls=[ToolCall("bash", {"command": f"ls dir{k}"}, f"tu_{k}")],
                  thinking=f"I will list dir{k} next." if thinking else None)  # fmt: skip
    proxy.fake.script(reply)
    body: dict[str, Any] = {"model": model, "max_tokens": 512, "system": SYSTEM,
                            "tools": TOOLS, "messages": messages}  # fmt: skip
    if thinking:
        body["thinking"] = THINKING
    async with http.post(
        f"{proxy.url}/v1/messages", data=orjson.dumps(body), headers=_HEADERS | (headers or {})
    ) as r:
        answer = await r.json()
        assert r.status == 200, (k, answer)
    messages.append({"role": "assistant", "content": answer["content"]})
    result = {"type": "tool_result", "tool_use_id": f"tu_{k}", "content": _output(k)}
    messages.append({"role": "user", "content": [result]})
    return proxy.recorder.events[-1]


@pytest.mark.parametrize("model", ["claude-fable-5-1", "claude-opus-5-5", "claude-opus-4-1"])
async def test_an_agent_session_that_turns_thinking_on_is_never_refused(
    proxy: Proxy, model: str
) -> None:
    binds = model != "claude-opus-4-1"
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        plain = [await _turn(http, proxy, model, messages, k, False) for k in range(12)]
        assert any(e["tokens_saved"] > 0 for e in plain)  # condensed before thinking
        assert isinstance(proxy.engine.store, MemoryStore)
        thinking = []
        for k in range(12, 24):
            if k == 18:  # every artifact lost: what the blocks followed is still sent
                proxy.engine.store._items.clear()
            thinking.append(await _turn(http, proxy, model, messages, k, True))
        # the agent counts its history's tokens: checked as a turn is (a binding model
        # refuses the client's original texts before blocks written after condensed ones)
        count = {"model": model, "system": SYSTEM, "tools": TOOLS, "messages": messages,
                 "thinking": THINKING}  # fmt: skip
        async with http.post(f"{proxy.url}/v1/messages/count_tokens", data=orjson.dumps(count),
                             headers=_HEADERS) as r:  # fmt: skip
            assert r.status == 200, await r.text()
            assert (await r.json())["input_tokens"] > 0
        counted = proxy.fake.received[-1]
        assert counted.path == "/v1/messages/count_tokens"
        assert (len(counted.body) < len(orjson.dumps(count))) is binds
    assert all(e["status"] == 200 and not e.get("fallbacks") for e in plain + thinking)
    tools = {tuple(t["name"] for t in r.json()["tools"]) for r in proxy.fake.received}
    if binds:  # no recall tool ever: the tool list is part of every block's prefix
        assert tools == {("bash",)}
        assert not any(e.get("compaction_step") for e in thinking)
    else:  # what precedes the blocks is still condensed
        assert any(e.get("compaction_step") for e in thinking)


async def test_a_count_the_upstream_refuses_rewritten_goes_again_as_sent(proxy: Proxy) -> None:
    # condensed turns, then thinking turns sent as the client sent them (the kill switch
    # is on): their blocks follow the original texts, and the count, which goes with the
    # session's adopted replacements once the switch is off, is refused; it goes again
    # as sent, as a turn would
    model = "claude-fable-5-1"
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        for k in range(12):
            await _turn(http, proxy, model, messages, k, False)
        proxy.state.kill_switch.set(True, "test")
        for k in range(12, 14):
            await _turn(http, proxy, model, messages, k, True)
        proxy.state.kill_switch.set(False, "test")
        count = {"model": model, "system": SYSTEM, "tools": TOOLS, "messages": messages}
        async with http.post(f"{proxy.url}/v1/messages/count_tokens", data=orjson.dumps(count),
                             headers=_HEADERS) as r:  # fmt: skip
            assert r.status == 200, await r.text()
    rewritten, as_sent = proxy.fake.received[-2:]
    assert rewritten.path == as_sent.path == "/v1/messages/count_tokens"
    assert len(rewritten.body) < len(as_sent.body) and as_sent.json() == count
    event = proxy.recorder.last(route="count_tokens")
    assert event["fallback_reason"].startswith("refused: ") and event["mode"] == "active"
