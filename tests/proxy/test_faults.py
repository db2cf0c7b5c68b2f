"""Faults: upstream down / slow / erroring, bad client input, disconnects, store down."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.errors import StoreError
from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.upstream import client_timeout
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, free_port

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


async def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers or AUTH) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


async def test_upstream_down_is_502_in_each_apis_shape(make_proxy: ProxyFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with make_proxy(openai_upstream=dead, anthropic_upstream=dead) as proxy:
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=0) as client:  # fmt: skip
            with pytest.raises(openai.APIStatusError) as oe:
                await client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
        assert oe.value.status_code == 502
        assert oe.value.body["type"] == "upstream_error"  # type: ignore[index]
        async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url,
                                            max_retries=0) as ac:  # fmt: skip
            with pytest.raises(anthropic.APIStatusError) as ae:
                await ac.messages.create(model="claude-opus-5", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        assert ae.value.status_code == 502
        message = "upstream unavailable: ClientConnectorError"  # not where: the log says
        assert ae.value.body == {
            "type": "error",
            "error": {"type": "api_error", "message": message},
        }
        assert proxy.recorder.last(route="chat")["status"] == 502


async def test_slow_upstream_is_504(make_proxy: ProxyFactory) -> None:
    async with make_proxy(read_timeout=0.2) as proxy:
        proxy.fake.script(Reply(delay=2.0))
        status, body = await _post(proxy.openai_url + "/chat/completions", orjson.dumps(CHAT))
        assert status == 504 and body["error"]["type"] == "timeout"
        assert proxy.recorder.last(route="chat")["error_type"] == "UpstreamTimeout"


async def test_a_client_waiting_longer_than_the_proxy_gets_its_slow_answer(
    make_proxy: ProxyFactory,
) -> None:
    """helper-129: a non-streamed answer sends no byte until it is whole; an SDK client
    stating a longer timeout than the proxy's read timeout got a 504, which it retried
    (the upstream generated the answer three times)."""
    async with make_proxy(read_timeout=0.3) as proxy:
        proxy.fake.script(Reply(text="slow but fine", delay=1.0), Reply(text="slow", delay=1.0))
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=2, timeout=30.0) as client:  # fmt: skip
            answer = await client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
        assert answer.choices[0].message.content == "slow but fine"
        async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url,
                                            max_retries=2, timeout=30.0) as ac:  # fmt: skip
            reply = await ac.messages.create(
                model="claude-opus-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert reply.content[0].text == "slow"  # type: ignore[union-attr]
        assert len(proxy.fake.received) == 2  # once each: no retry


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"X-Stainless-Read-Timeout": "30.0", "X-Stainless-Timeout": "NOT_GIVEN"}, 30.0),
        ({"x-stainless-timeout": "45"}, 45.0),
        ({"x-stainless-read-timeout": "NOT_GIVEN", "x-stainless-timeout": "12"}, 12.0),
        ({"x-stainless-read-timeout": "inf"}, None),
        ({"x-stainless-read-timeout": "-3"}, None),
        ({"x-stainless-timeout": "1e12"}, 24 * 3600.0),
        ({}, None),
    ],
)
def test_the_clients_stated_timeout_is_read_defensively(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert client_timeout(headers) == seconds


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
async def test_upstream_errors_pass_through_unchanged(proxy: Proxy, status: int) -> None:
    proxy.fake.script(Reply(status=status, error=f"scripted {status}"))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.openai_url + "/chat/completions", data=orjson.dumps(CHAT), headers=AUTH
        ) as resp,
    ):
        body = await resp.read()
        assert resp.headers["x-fake-upstream"] == "error"
    assert resp.status == status
    assert orjson.loads(body)["error"]["message"] == f"scripted {status}"


async def test_a_body_no_api_reads_is_400_and_a_malformed_one_is_relayed(proxy: Proxy) -> None:
    """Not JSON, or no object: refused by the proxy with 400 (every API refuses it). A
    JSON object the adapters find malformed goes upstream as sent, which judges it (an
    API may accept what the adapters read strictly): its event names where, at warning."""
    url = proxy.openai_url + "/chat/completions"
    status, body = await _post(url, b'{"model": "gpt-4o", "messages": [')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    bad = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a"}, {"role": 7}]}
    status, body = await _post(url, orjson.dumps(bad))
    assert status == 400 and body["error"]["param"] == "messages.[1]"  # the upstream's
    headers = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01",
               "Content-Type": "application/json"}  # fmt: skip
    status, body = await _post(proxy.url + "/v1/messages", b"[1, 2]", headers)
    assert status == 400 and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert [r.body for r in proxy.fake.received] == [orjson.dumps(bad)]
    await proxy.state.drain()
    events = [(e["level"], e["mode"], e["status"], e.get("error_type"), e.get("error_at"),
               e.get("fallback_reason")) for e in proxy.recorder.events]  # fmt: skip
    assert events == [
        ("warning", "active", 400, "invalid_json", "/", None),
        ("warning", "active", 400, None, None, "proxy: malformed request at /messages/1/role"),
        ("warning", "active", 400, "not_an_object", "/", None),
    ]


async def test_condensed_body_past_the_cap_is_forwarded_untouched(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(max_body_bytes=10_000) as proxy:
        big = {**CHAT, "messages": [{"role": "user", "content": "x " * 10_000}]}
        raw = orjson.dumps(big, option=orjson.OPT_INDENT_2)  # any re-serialization would show

        async def chunks() -> Any:  # no Content-Length: the cap is found while reading
            for i in range(0, len(raw), 3_000):
                yield raw[i : i + 3_000]

        for body in (raw, chunks()):
            status, answer = await _post(proxy.openai_url + "/chat/completions", body)
            assert status == 200 and answer["choices"][0]["message"]["content"]
            assert proxy.fake.received[-1].body == raw
            event = proxy.recorder.last(route="chat")
            assert event["fallback_reason"] == "limit: body over 10000 bytes"
            assert event["mode"] == "exact" and event["bytes_before"] == len(raw)


async def test_json_only_the_stdlib_reads_is_forwarded_as_sent(proxy: Proxy) -> None:
    # a lone surrogate escape: valid JSON (JS clients send it), but orjson refuses it
    raw = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a \\ud83d b"}]}'
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    status, body = await _post(proxy.openai_url + "/chat/completions", raw)
    assert status == 200 and body["choices"][0]["message"]["content"]
    assert proxy.fake.received[-1].body == raw
    event = proxy.recorder.last(route="chat")
    assert event["fallback_reason"].startswith("proxy: JSON only the stdlib parser reads")
    assert event["status"] == 200
    status, body = await _post(proxy.openai_url + "/chat/completions", b'["\\ud83d"]')
    assert status == 400 and "not valid JSON" in body["error"]["message"]
    assert len(proxy.fake.received) == 1


async def test_client_disconnect_mid_stream_cancels_upstream(proxy: Proxy) -> None:
    proxy.fake.script(Reply(text=" ".join(["word"] * 200), chunk_delay=0.02))
    body = orjson.dumps({**CHAT, "stream": True})
    async with aiohttp.ClientSession() as session:
        resp = await session.post(proxy.openai_url + "/chat/completions", data=body, headers=AUTH)
        first = await resp.content.readany()
        assert first.startswith(b"data: ")
        resp.close()  # drop the connection mid-stream
    for _ in range(100):
        if proxy.fake.received[-1].cancelled:
            break
        await asyncio.sleep(0.02)
    assert proxy.fake.received[-1].cancelled and not proxy.fake.received[-1].finished
    for _ in range(50):
        if proxy.recorder.events:
            break
        await asyncio.sleep(0.02)
    assert proxy.recorder.last(route="chat")["client_disconnected"] is True


class BrokenStore:
    """A store whose every call fails the way an unreachable backend does."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise StoreError("store unreachable")

        return fail


async def test_store_unavailable_passes_through_and_logs_an_error(
    make_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(EngineConfig(store={"backend": "memory"}), store=BrokenStore())  # type: ignore[arg-type]
    async with make_proxy(engine) as proxy:
        original = engine.condense

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise StoreError("store unreachable")

        engine.condense = failing  # type: ignore[method-assign]
        with caplog.at_level(logging.INFO, logger="ctxwarden"):
            status, body = await _post(proxy.openai_url + "/chat/completions", orjson.dumps(CHAT))
        assert status == 200 and body["choices"][0]["message"]["content"]
        assert proxy.fake.received[-1].body == orjson.dumps(CHAT)
        event = proxy.recorder.last(route="chat")
        assert event["level"] == "error" and event["fallback_reason"] == "proxy: StoreError"
        assert any(r.levelno == logging.ERROR and r.name == "ctxwarden.requests"
                   for r in caplog.records)  # fmt: skip
        engine.condense = original  # type: ignore[method-assign]
        # recall against a dead store: the model gets a readable error, the client an answer
        ref = "cw:0123456789ab"
        proxy.fake.script(Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, {"ref": ref})]))
        req = {**CHAT, "messages": [{"role": "user", "content": f"see {ref}"}]}
        status, body = await _post(proxy.openai_url + "/chat/completions", orjson.dumps(req))
        assert status == 200
        tool_msg = proxy.fake.received[-1].json()["messages"][-1]
        assert tool_msg["content"] == "ctxwarden_recall: the store is unavailable"
        assert proxy.recorder.last(route="chat")["level"] == "error"
        async with aiohttp.ClientSession() as session, session.get(proxy.url + "/readyz") as r:
            assert r.status == 503 and "store" in (await r.json())["problems"]


async def test_burst_of_bad_requests_then_a_good_one(make_proxy: ProxyFactory) -> None:
    async with make_proxy(max_body_bytes=50_000) as proxy:
        url = proxy.openai_url + "/chat/completions"
        bad: list[bytes] = [b"", b"{", b"null", b"[]", b'{"messages": 5}', b"\xff\xfe",
                            orjson.dumps({"model": 1, "messages": [{"role": None}]}),
                            orjson.dumps({"model": "m", "input": [{}]})]  # fmt: skip
        results = await asyncio.gather(*(_post(url, b) for b in bad * 5))
        assert all(400 <= status < 500 for status, _ in results)
        status, body = await _post(url, orjson.dumps(CHAT))
        assert status == 200 and body["choices"][0]["message"]["content"]
        async with aiohttp.ClientSession() as session, session.get(proxy.url + "/healthz") as r:
            assert r.status == 200


async def test_a_port_in_use_fails_start_and_closes_the_upstream_client(
    proxy: Proxy,
) -> None:
    """Binding fails (the port is the running proxy's): start raises, and the app's
    startup is undone - its upstream client closed, not left for the garbage collector
    to report as an unclosed session."""
    from ctxwarden.proxy import ProxySettings, RunningServer, build_app
    from ctxwarden.proxy.state import STATE
    from tests.proxy.conftest import SECRET

    port = int(proxy.url.rsplit(":", 1)[1])
    app = build_app(proxy.engine, ProxySettings(), tenant_secret=SECRET)
    with pytest.raises(OSError):
        await RunningServer(app, port=port).start()
    upstream = app[STATE].upstream
    assert upstream is not None and upstream.session.closed


async def test_a_shadow_request_that_is_no_json_object_is_forwarded_as_sent(
    make_proxy: ProxyFactory,
) -> None:
    """Shadow is transparent: the upstream, not the proxy, judges a body it cannot read."""
    async with make_proxy(mode="shadow") as proxy:
        url = proxy.openai_url + "/chat/completions"
        for raw, kind in ((b'{"model": "gpt-4o", "messages": [', "invalid_json"),
                          (b"[1, 2]", "not_an_object")):  # fmt: skip
            status, _ = await _post(url, raw)
            assert proxy.fake.received[-1].body == raw
            await proxy.state.drain()
            event = proxy.recorder.events[-1]
            assert (event["mode"], event["error_type"], event["status"]) == (
                "shadow", kind, status)  # fmt: skip


async def test_a_request_the_adapters_refuse_but_the_upstream_accepts_succeeds(
    proxy: Proxy,
) -> None:
    """Active mode: a shape the adapters do not read (the fake upstream, like an API
    more lenient than them, accepts it) is not failed by the proxy: relayed as sent."""
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":5}]}'
    status, answer = await _post(proxy.openai_url + "/chat/completions", body)
    assert status == 200 and answer["choices"]
    assert proxy.fake.received[-1].body == body
    await proxy.state.drain()
    event = proxy.recorder.last(route="chat")
    assert event["mode"] == "active" and event["level"] == "warning"
    assert event["fallback_reason"] == "proxy: malformed request at /messages/0/content"
