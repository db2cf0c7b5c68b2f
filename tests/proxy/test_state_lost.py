"""A binding session whose state is lost: its thinking follows replacements nobody knows.

A session condensed before its thinking began carries thinking blocks produced after the
condensed texts. When its state is lost (expired, evicted, a flushed Redis), neither the
request as the client sent it nor the engine's new rewrite matches what those blocks
followed, and a model binding thinking to its prefix refuses both. The proxy then sends
it once more asking Anthropic to drop the failing blocks (``drop_block``, with the beta
header it needs; the fake refuses it without): the session goes on, never a 400 the
client would not have had without ctxwarden.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import Reply
from ctxwarden.proxy.block_binding import BETA, dropping_blocks, is_prefix_mismatch, with_beta
from tests.proxy.conftest import KEY_A, Proxy
from tests.proxy.test_exact_rescue import MODEL, _condensed_then_thinking
from tests.proxy.test_thinking_session_e2e import _HEADERS, SYSTEM, THINKING, TOOLS, _turn


def _lose_state(proxy: Proxy, messages: list[Any]) -> None:
    """The engine forgets the session, as if its stored state were gone."""
    body = {"model": MODEL, "max_tokens": 512, "system": SYSTEM, "tools": TOOLS,
            "messages": messages, "thinking": THINKING}  # fmt: skip
    tenant = proxy.tenant(KEY_A)
    report = proxy.engine.condense(body, "anthropic.messages", mode="exact", tenant=tenant).report
    proxy.engine.forget_session(report["session"], tenant)


@pytest.mark.parametrize("mode", ["active", "exact"])
async def test_a_session_whose_state_is_lost_goes_on_with_its_stale_thinking_dropped(
    proxy: Proxy, mode: str
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    headers = {"x-ctxwarden-mode": "exact"} if mode == "exact" else {}
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        _lose_state(proxy, messages)
        sent = len(proxy.fake.received)
        events = [
            await _turn(http, proxy, MODEL, messages, k, True, headers) for k in range(12, 15)
        ]
    assert [e["status"] for e in events] == [200, 200, 200]  # _turn asserts it too
    assert "drop those blocks" in events[0]["fallback_reason"]
    received = proxy.fake.received[sent:]
    dropping = [r for r in received if b'"drop_block"' in r.body]
    assert len(dropping) == len(events)  # the last try of each turn, once
    if mode == "active":  # the choice is kept with the session: later turns ask so at once
        assert all("asked so at once" in e["fallback_reason"] for e in events[1:])
        assert len(received) == len(proxy.fake.received[sent:]) <= 3 + 2  # 1 each later
        assert received[-2:] == dropping[-2:]
    else:  # exact mode knows no session key: each turn is refused once first
        assert all("drop those blocks" in e["fallback_reason"] for e in events)
        assert len(received) == 2 * len(events)
    for r in dropping:
        assert BETA in r.headers["anthropic-beta"].split(",")
        assert r.json()["thinking"] == {**THINKING, "block_binding": {
            "prefix_mismatch_behavior": "drop_block"}}  # fmt: skip


async def test_a_session_with_its_state_is_never_sent_with_drop_block(proxy: Proxy) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        for k in range(12, 15):
            await _turn(http, proxy, MODEL, messages, k, True)
    assert not any(b"drop_block" in r.body for r in proxy.fake.received)


def test_drop_block_is_asked_only_where_the_client_left_it_open() -> None:
    asked = {"model": MODEL, "messages": [], "thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert dropping_blocks(asked) == {**asked, "thinking": {
        "type": "enabled", "budget_tokens": 2048,
        "block_binding": {"prefix_mismatch_behavior": "drop_block"}}}  # fmt: skip
    chosen = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}
    assert dropping_blocks({**asked, "thinking": chosen}) is None  # the client's own choice
    assert dropping_blocks({**asked, "thinking": {"type": "disabled"}}) is None
    assert dropping_blocks({"model": MODEL, "messages": []}) is None  # thinking unasked
    assert dropping_blocks({**asked, "thinking": {"type": "adaptive", "block_binding": 3}}) is None


def test_the_refusal_and_the_beta_header_are_read_as_anthropic_writes_them() -> None:
    refusal = (b'{"type":"error","error":{"type":"invalid_request_error","message":'
               b'"messages.3.content.0: Invalid `signature` in `thinking` block. The block is'
               b' bound to a different conversation. Remove the block, or set ..."}}')  # fmt: skip
    assert is_prefix_mismatch(refusal)
    assert not is_prefix_mismatch(b'{"error":{"message":"max_tokens: too large"}}')
    assert not is_prefix_mismatch(b"not json") and not is_prefix_mismatch(None)
    from multidict import CIMultiDict

    headers: CIMultiDict[str] = CIMultiDict({"Anthropic-Beta": "a-1, b-2"})
    with_beta(headers)
    assert headers.getall("anthropic-beta") == [f"a-1,b-2,{BETA}"]
    with_beta(headers)  # once
    assert headers.getall("anthropic-beta") == [f"a-1,b-2,{BETA}"]


# -- after helper-101's review ------------------------------------------------------


async def _turn_as(
    http: aiohttp.ClientSession, proxy: Proxy, messages: list[Any], k: int,
    headers: dict[str, str], path: str = "/v1/messages",
) -> tuple[int, Any]:  # fmt: skip
    """One more request of the session (not kept in ``messages``): status and answer."""
    proxy.fake.script(Reply(text="ok", thinking=f"turn {k}"))
    body: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "tools": TOOLS,
                            "messages": messages, "thinking": THINKING}  # fmt: skip
    if path == "/v1/messages":
        body["max_tokens"] = 512
    async with http.post(
        f"{proxy.url}{path}", data=orjson.dumps(body), headers=_HEADERS | headers
    ) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("how", ["shadow_header", "canary_rolled_back"])
@pytest.mark.parametrize("lost", [False, True])
async def test_a_session_condensed_while_active_is_rescued_in_shadow_too(
    proxy: Proxy, how: str, lost: bool
) -> None:
    """Shadow sends what exact sends: the client's bytes, which a binding model refuses
    once its thinking followed a rewrite; rescued as in exact mode (it got the 400)."""
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        if lost:
            _lose_state(proxy, messages)
        headers: dict[str, str] = {}
        if how == "shadow_header":
            headers = {"x-ctxwarden-mode": "shadow"}
        else:  # the operator rolls the canary back (a restart with canary_percent = 0)
            proxy.state.settings = dataclasses.replace(proxy.state.settings, canary_percent=0.0)
        before = len(proxy.fake.received)
        status, answer = await _turn_as(http, proxy, messages, 12, headers)
    assert status == 200, answer
    # (a shadow request's event waits for its condense: the upstream's side is read)
    as_sent, rescued = proxy.fake.received[before:]
    assert orjson.loads(as_sent.body)["messages"] == messages  # the client's bytes first
    assert rescued.body != as_sent.body


@pytest.mark.parametrize("mode", ["active", "exact"])
async def test_a_refused_drop_answers_with_the_first_refusal(
    proxy: Proxy, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that passes no beta value it does not know: the drop request is refused
    too ("Extra inputs are not permitted", about a setting the client never sent); the
    client gets Anthropic's answer to its own request, which it can act on."""
    import ctxwarden.proxy.relay as relay

    monkeypatch.setattr(relay, "with_beta", lambda headers: None)
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    headers = {"x-ctxwarden-mode": "exact"} if mode == "exact" else {}
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        _lose_state(proxy, messages)
        status, answer = await _turn_as(http, proxy, messages, 12, headers)
    assert status == 400
    assert "bound to a different conversation" in answer["error"]["message"]
    assert b'"drop_block"' in proxy.fake.received[-1].body  # it was tried
    assert "asking to drop those blocks" in proxy.recorder.events[-1]["fallback_reason"]


async def test_a_token_count_is_never_sent_with_drop_block(proxy: Proxy) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        _lose_state(proxy, messages)
        for headers in ({}, {"x-ctxwarden-mode": "exact"}):
            status, _ = await _turn_as(
                http, proxy, messages, 12, headers, "/v1/messages/count_tokens"
            )
            assert status == 400
    assert not any(b"drop_block" in r.body for r in proxy.fake.received)


def test_a_null_block_binding_is_every_default() -> None:
    asked = {
        "model": MODEL,
        "messages": [],
        "thinking": {"type": "adaptive", "block_binding": None},
    }
    binding = {"prefix_mismatch_behavior": "drop_block"}
    assert dropping_blocks(asked) == {
        **asked,
        "thinking": {"type": "adaptive", "block_binding": binding},
    }
