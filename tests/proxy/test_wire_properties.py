"""Properties of what reaches the upstream through the proxy, for all three APIs.

The engine's own property tests check a condensed request against its original. These
check the whole path a client's bytes take (body read, condense, render, the recall
tool appended, Anthropic cache breakpoints added, relay): for generated sessions sent
turn by turn, every request is answered 200, and what the upstream receives, once the
proxy's two documented additions are taken off, keeps every invariant the engine's
tests check (the same check functions): control plane exact, pairing, protected
messages byte for byte, error lines visible, every rewritten text recallable.

Hypothesis is synchronous, so the fake upstream and the proxy are served by an event
loop in a thread of their own (:class:`LiveProxy`), once for the module.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden import Engine
from ctxwarden.breakpoints import MAX_BREAKPOINTS
from ctxwarden.proxy import (
    RECALL_TOOL_NAME,
    FakeUpstream,
    ProxySettings,
    RunningServer,
    build_app,
    canary_bucket,
)
from ctxwarden.proxy.state import STATE
from ctxwarden.telemetry import MemoryRecorder
from tests.passes.convo import FORCE, make_engine, refs_in
from tests.passes.strategies import chat_requests, check_invariants
from tests.pipeline.test_fixture_properties import (
    _check_anthropic,
    _check_responses,
    _strings,
    anthropic_requests,
    responses_requests,
)
from tests.proxy.conftest import KEY_A, SECRET

T = TypeVar("T")

PROPERTY = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CALL_SECONDS = 60.0


class LiveProxy:
    """The package's fake upstream and a proxy (aggressive preset, every proposal
    adopted) in front of it, on an event loop in a daemon thread."""

    def __init__(self, canary_percent: float = 100.0) -> None:
        self.canary_percent = canary_percent
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.engine: Engine = make_engine("aggressive", FORCE)
        self.recorder = MemoryRecorder()
        self.fake = FakeUpstream()
        self._stack = AsyncExitStack()
        self.url = ""
        self.tenant = ""
        self._http: aiohttp.ClientSession | None = None
        self._sessions = 0

    def __enter__(self) -> LiveProxy:
        self.thread.start()
        self._call(self._open())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self._stack.aclose())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CALL_SECONDS)
            self.loop.close()
            self.engine.close()

    async def _open(self) -> None:
        await self._stack.enter_async_context(self.fake)
        settings = ProxySettings(
            openai_upstream=self.fake.url,
            anthropic_upstream=self.fake.url,
            max_engine_wait=0.0,
            canary_percent=self.canary_percent,
        )
        app = build_app(self.engine, settings, sinks=[self.recorder], tenant_secret=SECRET)
        server = await self._stack.enter_async_context(RunningServer(app))
        self.url = server.url
        self.tenant = app[STATE].tenants.for_credential(KEY_A)
        self._http = await self._stack.enter_async_context(aiohttp.ClientSession())

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(CALL_SECONDS)

    def new_session(self) -> str:
        self._sessions += 1
        return f"wire-prop-{self._sessions}"

    def send(self, path: str, wire: dict[str, Any], session: str) -> dict[str, Any]:
        """POST ``wire`` as tenant A in ``session``; assert 200 and no fallback; what
        the upstream received."""
        return self._call(self._send(path, wire, session))

    async def _send(self, path: str, wire: dict[str, Any], session: str) -> dict[str, Any]:
        assert self._http is not None
        headers = {
            "Authorization": f"Bearer {KEY_A}",
            "x-api-key": KEY_A,
            "anthropic-version": "2023-06-01",
            "Content-Type": "application/json",
            "x-ctxwarden-session": session,
        }
        seen = len(self.fake.received)
        async with self._http.post(self.url + path, data=orjson.dumps(wire), headers=headers) as r:
            await r.read()
            assert r.status == 200, r.status
        assert len(self.fake.received) == seen + 1
        await self._settled()
        event = self.recorder.events[-1]
        assert event["fallback_reason"] is None, event["fallback_reason"]
        received: dict[str, Any] = self.fake.received[-1].json()
        return received

    async def _settled(self) -> None:
        """Until the request's event is out (it is emitted as its exchange ends)."""
        for _ in range(int(CALL_SECONDS / 0.01)):
            if len(self.recorder.events) == len(self.fake.received):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the request's event was never emitted")


@pytest.fixture(scope="module")
def live() -> Iterator[LiveProxy]:
    with LiveProxy() as proxy:
        yield proxy


@pytest.fixture(scope="module")
def live_canary() -> Iterator[LiveProxy]:
    with LiveProxy(canary_percent=50) as proxy:
        yield proxy


def _ours(tool: Any) -> bool:
    if not isinstance(tool, dict):
        return False
    spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    return bool(spec.get("name") == RECALL_TOOL_NAME)


def _without_recall_tool(sent: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """``got`` without the recall tool the proxy appends (at the end of ``tools``, a key
    it adds last when the client sent none); asserts it is at most that."""
    tools = got.get("tools")
    if not isinstance(tools, list) or not tools or not _ours(tools[-1]):
        return got
    assert not any(_ours(t) for t in tools[:-1])
    out = dict(got)
    if "tools" in sent:
        out["tools"] = tools[:-1]
    else:
        assert list(got)[-1] == "tools" and tools[:-1] == []
        del out["tools"]
    return out


def _without_added_breakpoints(sent: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """``got`` without the cache breakpoints the proxy adds (a copy of a client marker on
    the last block of a message whose block had none, at most two: where the previous
    request ended and where a step started); asserts the request then has at most
    Anthropic's four markers."""
    out = copy.deepcopy(got)
    markers = 0
    for old, new in zip(sent["messages"], out["messages"], strict=True):
        for a, b in zip(_blocks(old), _blocks(new), strict=True):
            if "cache_control" in b and "cache_control" not in a:
                assert b is _blocks(new)[-1], "a breakpoint off a message's last block"
                assert list(b)[-1] == "cache_control"
                del b["cache_control"]
                markers += 1
    assert markers <= 2
    if markers:  # only into a request with room: Anthropic takes four in all
        assert orjson.dumps(got).count(b'"cache_control"') <= MAX_BREAKPOINTS
    return out


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _assert_refs_resolve(live: LiveProxy, items: list[Any]) -> None:
    """Every reference in ``items`` (a history; the recall tool's own description
    holds an example one) resolves in the tenant's store."""
    for ref in set(refs_in("\n".join(_strings(items)))):
        assert live.engine.recall(ref, tenant=live.tenant)


def _turns(items: list[dict[str, Any]], cuts: int = 3) -> list[int]:
    """Where a session's requests end: before its last assistant turns, then all."""
    ends = [k for k, m in enumerate(items) if m.get("role") == "assistant" and k > 2]
    return [*ends[-(cuts - 1) :], len(items)]


def _check_chat(live: LiveProxy, sent: dict[str, Any], got: dict[str, Any]) -> None:
    check_invariants(live.engine, sent, _without_recall_tool(sent, got), live.tenant)


def _check_messages(live: LiveProxy, sent: dict[str, Any], got: dict[str, Any]) -> None:
    _assert_refs_resolve(live, got["messages"])
    _check_anthropic(sent, _without_added_breakpoints(sent, _without_recall_tool(sent, got)))


def _check_responses_wire(live: LiveProxy, sent: dict[str, Any], got: dict[str, Any]) -> None:
    _assert_refs_resolve(live, got["input"])
    _check_responses(sent, _without_recall_tool(sent, got))


Checker = Callable[[LiveProxy, dict[str, Any], dict[str, Any]], None]
APIS: dict[str, tuple[str, str, st.SearchStrategy[dict[str, Any]], Checker]] = {
    "openai.chat": ("/v1/chat/completions", "messages", chat_requests(), _check_chat),
    "anthropic.messages": ("/v1/messages", "messages", anthropic_requests(), _check_messages),
    "openai.responses": ("/v1/responses", "input", responses_requests(), _check_responses_wire),
}


@pytest.mark.parametrize("api", list(APIS))
@PROPERTY
@given(data=st.data())
def test_a_session_reaches_the_upstream_with_every_invariant(
    live: LiveProxy, api: str, data: st.DataObject
) -> None:
    path, key, requests, check = APIS[api]
    wire = data.draw(requests)
    session = live.new_session()
    for end in _turns(wire[key]):
        request = {**wire, key: wire[key][:end]}
        check(live, request, live.send(path, request, session))


@PROPERTY
@given(wire=chat_requests())
def test_under_a_canary_a_session_outside_reaches_the_upstream_byte_for_byte(
    live_canary: LiveProxy, wire: dict[str, Any]
) -> None:
    """A session outside the canary is relayed exactly as sent on every turn (its
    condense is telemetry only); one inside keeps every invariant."""
    session = live_canary.new_session()
    outside = canary_bucket(session) >= 50
    for end in _turns(wire["messages"]):
        request = {**wire, "messages": wire["messages"][:end]}
        got = live_canary.send("/v1/chat/completions", request, session)
        event = live_canary.recorder.events[-1]
        assert event["rollout_reason"] == ("canary_out" if outside else "canary_in")
        if outside:
            assert live_canary.fake.received[-1].body == orjson.dumps(request)
        else:
            _check_chat(live_canary, request, got)


def test_a_long_chat_session_is_condensed_on_its_way_upstream(live: LiveProxy) -> None:
    """The properties above are not vacuous: a session with large old outputs arrives
    condensed, its originals recallable."""
    rows = "\n".join(f"row {i}: checked item_{i} in module_{i % 7}.py ok" for i in range(400))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the build."},
    ]
    for k in range(4):
        call = {
            "id": f"call_{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": f'{{"command": "make t{k}"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": f"{k}\n{rows}"})
    messages.append({"role": "user", "content": "continue"})
    request = {"model": "gpt-4o", "messages": messages}
    got = live.send("/v1/chat/completions", request, live.new_session())
    assert check_invariants(live.engine, request, _without_recall_tool(request, got), live.tenant)
    assert _ours(got["tools"][-1])  # the agent can recall what was condensed
