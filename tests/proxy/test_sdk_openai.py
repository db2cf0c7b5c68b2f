"""The real openai SDK (sync and async) through the proxy against the fake upstream."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
import orjson

from ctxwarden.proxy import Reply
from tests.proxy.conftest import KEY_A, Proxy

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
TEXT = "Hello from the fake upstream."


def _async(proxy: Proxy, **headers: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=KEY_A, base_url=proxy.openai_url, max_retries=0, default_headers=headers
    )


async def test_chat_create_async_reaches_upstream_and_returns_its_answer(proxy: Proxy) -> None:
    async with _async(proxy) as client:
        result = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert result.choices[0].message.content == TEXT
    assert result.usage is not None and result.usage.prompt_tokens > 0
    received = proxy.fake.received[-1]
    assert received.path == "/v1/chat/completions"
    assert received.json()["messages"] == MESSAGES
    assert received.headers["Authorization"] == f"Bearer {KEY_A}"
    event = proxy.recorder.last(route="chat")
    assert event["status"] == 200 and event["mode"] == "active"
    assert event["usage_prompt_tokens"] == result.usage.prompt_tokens


async def test_chat_stream_async_yields_every_chunk_in_order(proxy: Proxy) -> None:
    async with _async(proxy) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == TEXT
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    assert (
        proxy.recorder.last(route="chat")["usage_prompt_tokens"] == chunks[-1].usage.prompt_tokens
    )


async def test_chat_sync_client_create_and_stream_helper(proxy: Proxy) -> None:
    def run() -> tuple[str | None, str]:
        with openai.OpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as client:
            created = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
                final = stream.get_final_completion()
        return created.choices[0].message.content, final.choices[0].message.content or ""

    created, streamed = await asyncio.to_thread(run)
    assert created == TEXT and streamed == TEXT


async def test_exact_mode_header_forwards_the_original_bytes(proxy: Proxy) -> None:
    # an unusual but valid serialization: key order, spacing and escapes must survive
    raw = b'{ "messages":[{"content":"h\\u00e9llo  ","role":"user"}],\n "model":"gpt-4o" }'
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            proxy.openai_url + "/chat/completions",
            data=raw,
            headers={
                "Authorization": f"Bearer {KEY_A}",
                "Content-Type": "application/json",
                "x-ctxwarden-mode": "exact",
            },
        ) as resp,
    ):
        assert resp.status == 200
        body = await resp.json()
    assert proxy.fake.received[-1].body == raw
    assert "x-ctxwarden-mode" not in {k.lower() for k in proxy.fake.received[-1].headers}
    assert body["choices"][0]["message"]["content"] == TEXT
    assert proxy.recorder.last(route="chat")["mode"] == "exact"


async def test_sdk_request_in_exact_mode_arrives_byte_identical(proxy: Proxy) -> None:
    async with _async(proxy, **{"x-ctxwarden-mode": "exact"}) as client:
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    async with _async(proxy) as client:  # active: re-serialized only if rewritten
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    exact, active = proxy.fake.received[-2:]
    assert exact.body == active.body  # nothing to condense: the original bytes both times
    assert orjson.loads(exact.body)["messages"] == MESSAGES


async def test_responses_create_and_stream_async(proxy: Proxy) -> None:
    async with _async(proxy) as client:
        created = await client.responses.create(model="gpt-4o", input="hi", instructions="x")
        events = [
            e async for e in await client.responses.create(model="gpt-4o", input="hi", stream=True)
        ]
    assert created.output_text == TEXT
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == TEXT
    assert proxy.fake.received[-1].json()["input"] == "hi"
    assert proxy.recorder.last(route="responses", stream=True)["usage_prompt_tokens"] > 0


async def test_responses_sync_stream_helper(proxy: Proxy) -> None:
    def run() -> str:
        with (
            openai.OpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as client,
            client.responses.stream(model="gpt-4o", input="hi") as stream,
        ):
            return stream.get_final_response().output_text

    assert await asyncio.to_thread(run) == TEXT


async def test_models_list_is_forwarded_unchanged(proxy: Proxy) -> None:
    async with _async(proxy) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["gpt-fake"]
    assert proxy.fake.received[-1].method == "GET"
    assert proxy.recorder.last(route="models")["status"] == 200


async def test_upstream_usage_is_logged_next_to_the_estimate(proxy: Proxy) -> None:
    proxy.fake.script(Reply(prompt_tokens=1234, cached_tokens=1000))
    async with _async(proxy) as client:
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    event = proxy.recorder.last(route="chat")
    assert event["usage_prompt_tokens"] == 1234 and event["usage_cached_tokens"] == 1000
    assert event["tokens_before"] > 0
