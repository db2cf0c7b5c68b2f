"""Streamed recall rounds against an upstream that streams the way OpenAI does (role
and the first call in one chunk) or stops short; the client sees one honest stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from ctxwarden.proxy import RECALL_TOOL_NAME, RunningServer
from tests.proxy.conftest import KEY_A, ProxyFactory

Script = Callable[[int], list[dict[str, Any] | str]]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


_RECALL_ARGS = '{"ref": "cw:000000000000"}'
_RECALL_CALL = {"index": 0, "id": "call_r", "type": "function",
                "function": {"name": RECALL_TOOL_NAME, "arguments": _RECALL_ARGS}}  # fmt: skip


@asynccontextmanager
async def _streaming_upstream(script: Script) -> AsyncIterator[str]:
    """An upstream whose round ``n`` (0: the client's request) streams ``script(n)``."""
    rounds = 0

    async def chat(request: web.Request) -> web.StreamResponse:
        nonlocal rounds
        await request.read()
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for event in script(rounds):
            data = event if isinstance(event, str) else orjson.dumps(event).decode()
            await out.write(f"data: {data}\n\n".encode())
        rounds += 1
        return out  # a script without [DONE] ends the body early but cleanly

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with RunningServer(app) as server:
        yield server.url


async def _ask(proxy_url: str) -> Any:
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy_url, max_retries=0) as client:
        messages = [{"role": "user", "content": "see cw:000000000000"}]
        async with client.chat.completions.stream(model="m", messages=messages) as stream:
            return await stream.get_final_completion()


async def test_the_role_reaches_the_client_when_the_first_round_only_calls_recall(
    make_proxy: ProxyFactory,
) -> None:
    def script(n: int) -> list[dict[str, Any] | str]:
        if n == 0:  # OpenAI: the role comes with the first piece of the call
            return [_chunk({"role": "assistant", "content": None, "tool_calls": [_RECALL_CALL]}),
                    _chunk({}, "tool_calls"), "[DONE]"]  # fmt: skip
        return [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Done."}),
                _chunk({}, "stop"), "[DONE]"]  # fmt: skip

    async with _streaming_upstream(script) as url, make_proxy(openai_upstream=url) as proxy:
        completion = await _ask(proxy.openai_url)
    message = completion.choices[0].message
    assert message.role == "assistant" and message.content == "Done."
    assert not message.tool_calls


@pytest.mark.parametrize("ending", ["cut short", "error event"])
async def test_a_continuation_that_fails_is_never_given_a_complete_ending(
    make_proxy: ProxyFactory, ending: str
) -> None:
    def script(n: int) -> list[dict[str, Any] | str]:
        if n == 0:
            return [_chunk({"role": "assistant", "content": "Checking. "}),
                    _chunk({"tool_calls": [_RECALL_CALL]}), _chunk({}, "tool_calls"),
                    "[DONE]"]  # fmt: skip
        if ending == "cut short":
            return [_chunk({"content": "Half an ans"})]
        return [_chunk({"content": "Half"}), {"error": {"message": "overloaded",
                                                        "type": "server_error"}}]  # fmt: skip

    async with _streaming_upstream(script) as url, make_proxy(openai_upstream=url) as proxy:
        with pytest.raises(openai.APIError):
            await _ask(proxy.openai_url)
        event = proxy.recorder.last(route="chat")
    if ending == "cut short":  # the client is told by an error event and a cut
        assert event["stream_cut"] is True and event["status"] == 502
    else:  # the upstream's error event told it; the response ended as the upstream's did
        assert "stream_cut" not in event and event["status"] == 200
        assert event["error_type"] == "UpstreamStreamError" and event["level"] == "warning"


def test_a_server_tool_use_keeps_its_streamed_input_for_the_continuation() -> None:
    from ctxwarden.proxy.sse import SSESplitter, encode_event
    from ctxwarden.proxy.stream_filters import MessagesFilter

    events = [
        {"type": "content_block_start", "index": 0, "content_block": {
            "type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"query": "q"}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_r", "name": RECALL_TOOL_NAME, "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": _RECALL_ARGS}},
        {"type": "content_block_stop", "index": 1},
    ]  # fmt: skip
    flt = MessagesFilter()
    splitter = SSESplitter()
    for obj in events:
        for event in splitter.feed(encode_event(obj, obj["type"])):
            flt.process(event)
    result = flt.round_result()
    assert result.assistant[0]["input"] == {"query": "q"}
    assert len(result.calls) == 1 and result.other_calls == 0  # it ran upstream


async def test_text_in_the_closing_chunk_of_a_recall_round_reaches_the_client(
    make_proxy: ProxyFactory,
) -> None:
    def script(n: int) -> list[dict[str, Any] | str]:
        if n == 0:  # some providers send text, the whole call and the finish at once
            one = _chunk({"role": "assistant", "content": "Checking. ",
                          "tool_calls": [_RECALL_CALL]}, "tool_calls")  # fmt: skip
            return [one, "[DONE]"]
        return [_chunk({"content": "Final answer."}), _chunk({}, "stop"), "[DONE]"]

    async with _streaming_upstream(script) as url, make_proxy(openai_upstream=url) as proxy:
        completion = await _ask(proxy.openai_url)
    choice = completion.choices[0]
    assert choice.message.content == "Checking. Final answer."
    assert choice.finish_reason == "stop" and not choice.message.tool_calls


async def _raw_chunks(proxy_url: str, **extra: Any) -> list[dict[str, Any]]:
    """The data objects of the stream as the proxy sent it (no SDK filling gaps)."""
    import aiohttp

    body = {"model": "m", "stream": True, **extra,
            "messages": [{"role": "user", "content": "see cw:000000000000"}]}  # fmt: skip
    async with aiohttp.ClientSession() as session, session.post(
        proxy_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY_A}"}
    ) as resp:  # fmt: skip
        text = await resp.text()
    return [orjson.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: {")]  # fmt: skip


async def test_the_role_goes_out_once_even_from_a_held_closing_chunk(
    make_proxy: ProxyFactory,
) -> None:
    def script(n: int) -> list[dict[str, Any] | str]:
        if n == 0:  # role, the recall call and the finish in one chunk
            return [_chunk({"role": "assistant", "content": None, "tool_calls": [_RECALL_CALL]},
                           "tool_calls"), "[DONE]"]  # fmt: skip
        return [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Done."}),
                _chunk({}, "stop"), "[DONE]"]  # fmt: skip

    async with _streaming_upstream(script) as url, make_proxy(openai_upstream=url) as proxy:
        chunks = await _raw_chunks(proxy.openai_url)
    roles = [c["choices"][0]["delta"].get("role") for c in chunks if c.get("choices")]
    assert [r for r in roles if r] == ["assistant"]


async def test_a_split_closing_chunk_carries_usage_and_logprobs_once(
    make_proxy: ProxyFactory,
) -> None:
    logprobs = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
                             "top_logprobs": []}]}  # fmt: skip

    def script(n: int) -> list[dict[str, Any] | str]:
        one = _chunk({"role": "assistant", "content": "Hi"}, "stop")
        one["choices"][0]["logprobs"] = logprobs
        one["usage"] = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        return [one, "[DONE]"]

    async with _streaming_upstream(script) as url, make_proxy(openai_upstream=url) as proxy:
        chunks = await _raw_chunks(proxy.openai_url, logprobs=True, tools=[{
            "type": "function", "function": {"name": "read", "parameters": {}}}])  # fmt: skip
    assert sum(1 for c in chunks if c.get("usage")) == 1
    assert sum(1 for c in chunks for ch in c["choices"] if ch.get("logprobs")) == 1


def test_every_chunk_of_a_recall_stream_has_the_first_rounds_identity() -> None:
    """helper-103's review: only the id was kept; a later round's ``created``,
    ``system_fingerprint`` and ``service_tier`` reached the client mid-stream (OpenAI:
    every chunk of a stream has the same)."""
    from ctxwarden.proxy.sse import SSESplitter, encode_event
    from ctxwarden.proxy.stream_filters import ChatFilter

    def chunk(n: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_event({
            "id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1000 + n,
            "model": "gpt-4o", "system_fingerprint": f"fp_{n}", "service_tier": "default",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })  # fmt: skip

    call = {"index": 0, "id": "c1", "type": "function",
            "function": {"name": RECALL_TOOL_NAME, "arguments": "{}"}}  # fmt: skip
    rounds = [
        [chunk(1, {"role": "assistant", "content": "Looking. "}),
         chunk(1, {"tool_calls": [call]}), chunk(1, {}, "tool_calls")],
        [chunk(2, {"role": "assistant", "content": "Found it."}), chunk(2, {}, "stop")],
    ]  # fmt: skip
    flt = ChatFilter()
    out: list[bytes] = []
    for n, events in enumerate(rounds):
        if n:
            flt.start_round()
        for raw in events:
            for event in SSESplitter().feed(raw):
                out += flt.process(event)
    out += flt.finish()
    seen = [orjson.loads(raw.split(b"data: ", 1)[1]) for raw in out if b"data: {" in raw]
    assert seen and {(c["id"], c["created"], c["system_fingerprint"]) for c in seen} == {
        ("chatcmpl-1", 1001, "fp_1")
    }
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in seen) == (
        "Looking. Found it."
    )
