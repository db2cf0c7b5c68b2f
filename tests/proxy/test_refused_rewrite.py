"""A rewrite the upstream refuses is never the client's failure.

When the upstream answers 400 to a request ctxwarden rewrote (or offered the recall
tool in), before anything reached the client, the request goes again as the client sent
it, and the client gets that answer. When the request as sent is accepted, the refusal
was the rewrite's: the session's next requests go as the client sends them (for a
while, in this process). When it is refused too, the client gets that refusal, as
without ctxwarden, and nothing is remembered.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.pipeline.state import SessionState
from ctxwarden.proxy import Reply
from ctxwarden.proxy.state import REFUSED_SECONDS
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory
from tests.proxy.test_sdk_shapes_e2e import CHAT_MODEL, CHAT_TOOLS, _chat_history

REFUSAL = "messages.3.content.0: the block is bound to a different conversation"


def _body(stream: bool, tools: bool = True, extra_turn: bool = False) -> bytes:
    messages, _ = _chat_history()
    if extra_turn:  # the next turn of the same session
        messages = [*messages, {"role": "assistant", "content": "Done."},
                    {"role": "user", "content": "Go on."}]  # fmt: skip
    request: dict[str, Any] = {"model": CHAT_MODEL, "messages": messages, "stream": stream}
    if tools:
        request["tools"] = CHAT_TOOLS
    return orjson.dumps(request)


async def _post(proxy: Proxy, body: bytes, session: str = "s-refused") -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json",
               "x-ctxwarden-session": session}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy.openai_url}/chat/completions", data=body, headers=headers) as r,
    ):
        return r.status, await r.read()


def _text(status: int, data: bytes, stream: bool) -> str:
    assert status == 200, data
    if not stream:
        return str(orjson.loads(data)["choices"][0]["message"]["content"])
    events = [line[6:] for line in data.decode().splitlines() if line.startswith("data: {")]
    return "".join(
        orjson.loads(e)["choices"][0]["delta"].get("content") or ""
        for e in events
        if orjson.loads(e).get("choices")
    )


@pytest.mark.parametrize("tools", [True, False], ids=["recall-offered", "no-recall"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_refused_rewrite_goes_again_as_sent_and_so_does_the_session(
    proxy: Proxy, make_proxy: ProxyFactory, stream: bool, tools: bool
) -> None:
    proxy.fake.script(Reply(status=400, error=REFUSAL), Reply(text="accepted as sent"))
    body = _body(stream, tools)
    status, data = await _post(proxy, body)
    assert _text(status, data, stream) == "accepted as sent"
    rewritten, as_sent = proxy.fake.received
    assert len(rewritten.body) < len(body)  # the engine really condensed it
    assert as_sent.body == body
    event = proxy.recorder.last(route="chat")
    assert event["status"] == 200 and event["fallbacks"] == 1
    assert event["fallback_reason"].startswith("refused: ")
    assert event["upstream_status"] == 200 and event["bytes_after"] == len(body)
    assert event["tokens_saved"] == 0 and event["transforms"] == {}  # nothing was saved
    assert REFUSAL not in orjson.dumps(proxy.recorder.events).decode()  # no contents
    # the engine forgot the session: what the provider answers follows the request as sent
    state = SessionState.decode(proxy.engine.store.get_state(proxy.tenant(KEY_A), "s-refused"))
    assert not state.decisions and not state.sent_hashes
    assert state.as_sent_until > time.time() + REFUSED_SECONDS - 60  # for every replica
    metrics = proxy.state.metrics.registry.get_sample_value(
        "ctxwarden_fallbacks_total", {"route": "chat", "kind": "refused"}
    )
    assert metrics == 1

    # the next turn of the session goes as the client sends it: one upstream request
    proxy.fake.received.clear()
    nxt = _body(stream, tools, extra_turn=True)
    status, data = await _post(proxy, nxt)
    assert _text(status, data, stream) == "Hello from the fake upstream."
    assert [r.body for r in proxy.fake.received] == [nxt]
    assert proxy.recorder.last(route="chat")["fallback_reason"].startswith("proxy: refused: ")

    # another session is condensed as before
    proxy.fake.received.clear()
    status, _ = await _post(proxy, body, session="s-other")
    assert status == 200 and len(proxy.fake.received[-1].body) < len(body)

    # a replica (its own memory, the same store) sends the refused session as sent too
    async with make_proxy(engine=proxy.engine) as replica:
        assert not replica.state.refused_sessions
        replica.fake.received.clear()
        status, data = await _post(replica, nxt)
        assert _text(status, data, stream) == "Hello from the fake upstream."
        assert [r.body for r in replica.fake.received] == [nxt]
        event = replica.recorder.last(route="chat")
        assert event["fallback_reason"].startswith("proxy: refused: ")


async def test_a_request_refused_as_sent_too_gets_that_refusal_and_nothing_is_kept(
    proxy: Proxy,
) -> None:
    proxy.fake.script(Reply(status=400, error="first"), Reply(status=400, error="second"))
    body = _body(False)
    status, data = await _post(proxy, body)
    assert status == 400 and b"second" in data
    assert proxy.fake.received[-1].body == body and len(proxy.fake.received) == 2
    assert not proxy.state.refused_sessions
    proxy.fake.received.clear()
    status, _ = await _post(proxy, body)  # rewritten again
    assert status == 200 and len(proxy.fake.received[-1].body) < len(body)


@pytest.mark.parametrize("status", [401, 429, 500])
async def test_other_refusals_are_the_answer(proxy: Proxy, status: int) -> None:
    proxy.fake.script(Reply(status=status, error="not about the body"))
    got, _ = await _post(proxy, _body(False))
    assert got == status and len(proxy.fake.received) == 1


async def test_an_unchanged_request_refused_is_not_sent_twice(proxy: Proxy) -> None:
    proxy.fake.script(Reply(status=400, error="bad parameter"))
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    got, _ = await _post(proxy, body)
    assert got == 400 and len(proxy.fake.received) == 1


def test_a_refused_session_is_remembered_for_a_while_only(proxy: Proxy) -> None:
    state = proxy.state
    state.remember_refusal("t", "s")
    assert state.refuses("t", "s") and not state.refuses("t2", "s")
    state.refused_sessions[("t", "s")] -= REFUSED_SECONDS + 1
    assert not state.refuses("t", "s") and ("t", "s") not in state.refused_sessions


async def test_only_the_first_upstream_request_carries_the_idempotency_key(
    proxy: Proxy,
) -> None:
    """The request sent again as the client sent it is another request of the proxy's:
    the key would make a server that honours it answer with the refusal again."""
    proxy.fake.script(Reply(status=400, error=REFUSAL), Reply(text="accepted as sent"))
    body = _body(False)
    headers = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json",
               "x-ctxwarden-session": "s-key", "Idempotency-Key": "client-key-1"}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy.openai_url}/chat/completions", data=body, headers=headers) as r,
    ):
        assert _text(r.status, await r.read(), False) == "accepted as sent"
    rewritten, as_sent = proxy.fake.received
    assert rewritten.headers.get("Idempotency-Key") == "client-key-1"
    assert "Idempotency-Key" not in as_sent.headers
