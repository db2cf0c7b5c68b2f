"""The real anthropic SDK (sync and async) through the proxy against the fake upstream."""

from __future__ import annotations

import asyncio

import aiohttp
import anthropic

from tests.proxy.conftest import KEY_A, Proxy

MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "Hello from the fake upstream."


def _client(proxy: Proxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0)


async def test_messages_create_async(proxy: Proxy) -> None:
    async with _client(proxy) as client:
        message = await client.messages.create(
            model="claude-opus-5", max_tokens=64, system="Be brief.", messages=MESSAGES
        )
    assert message.content[0].type == "text" and message.content[0].text == TEXT
    received = proxy.fake.received[-1]
    assert received.path == "/v1/messages"
    assert received.json()["messages"] == MESSAGES
    assert "anthropic-version" in {k.lower() for k in received.headers}
    event = proxy.recorder.last(route="messages")
    assert event["usage_prompt_tokens"] == message.usage.input_tokens


async def test_messages_stream_async_events_in_order(proxy: Proxy) -> None:
    async with (
        _client(proxy) as client,
        client.messages.stream(model="claude-opus-5", max_tokens=64, messages=MESSAGES) as stream,
    ):
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.content[0].type == "text" and final.content[0].text == TEXT
    assert final.stop_reason == "end_turn"


async def test_messages_sync_create_stream_and_count_tokens(proxy: Proxy) -> None:
    def run() -> tuple[str, str, int]:
        with anthropic.Anthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as client:
            created = client.messages.create(
                model="claude-opus-5", max_tokens=64, messages=MESSAGES
            )
            with client.messages.stream(
                model="claude-opus-5", max_tokens=64, messages=MESSAGES
            ) as stream:
                streamed = "".join(stream.text_stream)
            counted = client.messages.count_tokens(model="claude-opus-5", messages=MESSAGES)
        block = created.content[0]
        assert block.type == "text"
        return block.text, streamed, counted.input_tokens

    created, streamed, counted = await asyncio.to_thread(run)
    assert created == TEXT and streamed == TEXT and counted > 0
    assert proxy.fake.received[-1].path == "/v1/messages/count_tokens"
    assert proxy.recorder.last(route="count_tokens")["status"] == 200


async def test_count_tokens_async_and_models_go_to_anthropic_shape(proxy: Proxy) -> None:
    async with _client(proxy) as client:
        counted = await client.messages.count_tokens(model="claude-opus-5", messages=MESSAGES)
        models = await client.models.list()
    assert counted.input_tokens > 0
    assert [m.id for m in models.data] == ["claude-fake"]


async def test_old_style_x_api_key_header_works_and_is_forwarded(proxy: Proxy) -> None:
    headers = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01"}
    body = {"model": "claude-opus-5", "max_tokens": 16, "messages": MESSAGES}
    async with (
        aiohttp.ClientSession() as session,
        session.post(proxy.url + "/v1/messages", json=body, headers=headers) as resp,
    ):
        data = await resp.json()
    assert resp.status == 200 and data["content"][0]["text"] == TEXT
    received = proxy.fake.received[-1].headers
    assert received["x-api-key"] == KEY_A and "Authorization" not in received
    # both credential styles map to the same tenant
    assert proxy.state.tenants.for_headers({"x-api-key": KEY_A}) == proxy.state.tenants.for_headers(
        {"authorization": f"Bearer {KEY_A}"}
    )
