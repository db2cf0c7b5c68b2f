"""A request sent as the client sent it, in a session whose thinking followed a rewrite.

A session condensed before its thinking began has thinking blocks produced after the
condensed texts. Sent as the client sent it (the kill switch, an exact-mode header, an
engine failure), a model that binds thinking to its prefix refuses it; the proxy then
sends it with the session's adopted replacements (nothing new), which the blocks
followed. Anything else refused is the answer, sent once.
"""

from __future__ import annotations

import gzip
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import Reply
from ctxwarden.proxy.fake_thinking import SIGNATURE_PREFIX
from tests.proxy.conftest import Proxy
from tests.proxy.test_thinking_session_e2e import _HEADERS, SYSTEM, THINKING, TOOLS, _turn

MODEL = "claude-fable-5-1"


async def _condensed_then_thinking(
    http: aiohttp.ClientSession, proxy: Proxy, messages: list[Any], model: str = MODEL
) -> None:
    """Ten turns condensed without thinking, then two with it (their blocks follow the
    condensed texts)."""
    plain = [await _turn(http, proxy, model, messages, k, False) for k in range(10)]
    assert any(e["tokens_saved"] > 0 for e in plain)
    for k in range(10, 12):
        await _turn(http, proxy, model, messages, k, True)


def _exact_events(proxy: Proxy) -> list[dict[str, Any]]:
    return [e for e in proxy.recorder.events if e.get("mode") == "exact"]


@pytest.mark.parametrize("how", ["kill_switch", "header", "header_gzip"])
async def test_a_turn_sent_as_sent_that_is_refused_goes_with_the_adopted_replacements(
    proxy: Proxy, how: str
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        sent = len(proxy.fake.received)
        if how == "kill_switch":
            proxy.state.kill_switch.set(True, "test")
            for k in range(12, 15):
                await _turn(http, proxy, MODEL, messages, k, True)
        elif how == "header":
            for k in range(12, 15):
                await _turn(http, proxy, MODEL, messages, k, True, {"x-ctxwarden-mode": "exact"})
        else:  # a gzip body: read through its coding, the rewrite goes plain
            proxy.fake.script(Reply(text="done", thinking="All done."))
            body = {"model": MODEL, "max_tokens": 512, "system": SYSTEM, "tools": TOOLS,
                    "messages": messages, "thinking": THINKING}  # fmt: skip
            headers = _HEADERS | {"x-ctxwarden-mode": "exact", "content-encoding": "gzip"}
            async with http.post(
                f"{proxy.url}/v1/messages", data=gzip.compress(orjson.dumps(body)),
                headers=headers,
            ) as r:  # fmt: skip
                assert r.status == 200, await r.text()
    events = _exact_events(proxy)
    assert events and all(e["status"] == 200 for e in events)
    assert all(e["fallback_reason"].startswith("refused: ") for e in events)
    received = proxy.fake.received[sent:]
    assert len(received) == 2 * len(events)  # each: as sent (refused), then rewritten
    for as_sent, rewritten in zip(received[::2], received[1::2], strict=True):
        assert len(rewritten.body) < len(as_sent.body)
        assert "content-encoding" not in {k.lower() for k in rewritten.headers}


async def test_a_count_sent_as_sent_that_is_refused_goes_with_the_adopted_replacements(
    proxy: Proxy,
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        proxy.state.kill_switch.set(True, "test")
        count = {"model": MODEL, "system": SYSTEM, "tools": TOOLS, "messages": messages}
        async with http.post(
            f"{proxy.url}/v1/messages/count_tokens", data=orjson.dumps(count), headers=_HEADERS
        ) as r:
            assert r.status == 200, await r.text()
    as_sent, rewritten = proxy.fake.received[-2:]
    assert as_sent.json() == count and len(rewritten.body) < len(as_sent.body)
    assert proxy.recorder.last(route="count_tokens")["fallback_reason"].startswith("refused: ")


async def test_a_turn_whose_condense_failed_goes_with_the_adopted_replacements_when_refused(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        await _condensed_then_thinking(http, proxy, messages)
        condense = proxy.engine.condense

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("condense broke")

        monkeypatch.setattr(proxy.engine, "condense", broken)
        event = await _turn(http, proxy, MODEL, messages, 12, True)
        monkeypatch.setattr(proxy.engine, "condense", condense)
    assert event["status"] == 200 and event["fallback_reason"].startswith("refused: ")
    as_sent, rewritten = proxy.fake.received[-2:]
    assert len(rewritten.body) < len(as_sent.body)


async def test_a_refusal_with_nothing_to_rescue_is_the_answer_sent_once(proxy: Proxy) -> None:
    # a block the client made up: refused as sent; the session has no replacements
    messages: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "made up", "signature": f"{SIGNATURE_PREFIX}0.0"},
            {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "Go on"},
    ]  # fmt: skip
    proxy.state.kill_switch.set(True, "test")
    body = {"model": MODEL, "max_tokens": 64, "messages": messages, "thinking": THINKING}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy.url}/v1/messages", data=orjson.dumps(body), headers=_HEADERS) as r,
    ):
        assert r.status == 400
        assert (await r.json())["type"] == "error"
    assert len(proxy.fake.received) == 1
    assert not proxy.recorder.events[-1].get("fallback_reason")


@pytest.mark.parametrize("model", ["claude-opus-4-1", MODEL])
async def test_a_session_whose_thinking_followed_its_texts_as_sent_goes_as_sent_once(
    proxy: Proxy, model: str
) -> None:
    # a model that does not bind thinking, or a binding one whose thinking began during
    # the spell: accepted as sent, nothing sent twice
    messages: list[Any] = [{"role": "user", "content": "Fix the failing build."}]
    async with aiohttp.ClientSession() as http:
        for k in range(10):
            await _turn(http, proxy, model, messages, k, False)
        proxy.state.kill_switch.set(True, "test")
        sent = len(proxy.fake.received)
        for k in range(10, 13):
            event = await _turn(http, proxy, model, messages, k, True)
            assert event["status"] == 200 and not event.get("fallback_reason")
    assert len(proxy.fake.received) - sent == 3
