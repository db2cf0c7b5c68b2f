"""The recall loop against adversarial upstreams and models (helper-120's fixes of
review G): an upstream error event ends the turn in any round; a streamed Responses
round that cannot be asked again keeps the reasoning before its recall call hidden;
a turn's recall answers are bounded as a whole; a Chat stream recognises a recall
call whose name comes late, split or repeated; an upstream that answers a stream with
JSON does not leak the recall call; the client is never told the upstream's address.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, RunningServer
from ctxwarden.proxy.recall import RecallAnswer, RecallCall
from ctxwarden.proxy.sse import SSESplitter, encode_event
from ctxwarden.proxy.stream_filters import ResponsesFilter
from ctxwarden.proxy.upstream import Upstream, UpstreamUnavailable, translate_read_error
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, free_port, openai_client

R = RECALL_TOOL_NAME
ORIGINAL = "line 1\nline 2 secret-alpha\nline 3"

# An answer script: round n (0: the client's request) and its JSON body give
# ("sse", [event, ...]) (an event: a dict or string sent as ``data:``, or (name, dict)),
# ("json", obj) or ("cut", [event, ...]) (the connection closed after them).
Script = Callable[[int, dict[str, Any]], tuple[str, Any]]


@asynccontextmanager
async def _upstream(script: Script) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A scripted upstream for the three APIs: its URL and the bodies it received."""
    received: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        received.append(body)
        kind, given = script(len(received) - 1, body)
        if kind == "json":
            return web.json_response(given)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for event in given:
            name, obj = event if isinstance(event, tuple) else (None, event)
            data = obj if isinstance(obj, str) else orjson.dumps(obj).decode()
            head = f"event: {name}\n" if name else ""
            await out.write(f"{head}data: {data}\n\n".encode())
        if kind == "cut":
            assert request.transport is not None
            request.transport.close()
        return out

    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        app.router.add_post(path, handle)
    async with RunningServer(app) as server:
        yield server.url, received


def _ref(proxy: Proxy, text: str = ORIGINAL) -> str:
    return proxy.engine.store.put(proxy.tenant(KEY_A), text)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}  # fmt: skip


def _recall_call(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": R, "arguments": orjson.dumps(arguments).decode()}}  # fmt: skip


async def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[bytes, bool]:
    """The bytes a raw client gets, and whether the connection was cut."""
    got = b""
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        try:
            async for chunk in r.content.iter_any():
                got += chunk
        except aiohttp.ClientPayloadError:
            return got, True
    return got, False


def _events(raw: bytes) -> list[tuple[str | None, Any]]:
    return [(e.name, e.json() if e.data != "[DONE]" else "[DONE]")
            for e in SSESplitter().feed(raw)]  # fmt: skip


# -- 1. an upstream error event ends the turn, the first round included -------------


def _messages_round0(n: int, body: dict[str, Any]) -> tuple[str, Any]:
    if n > 0:
        return "sse", [("message_start", {"type": "message_start", "message": {
            "id": "msg_2", "type": "message", "role": "assistant", "content": [],
            "model": "m", "usage": {"input_tokens": 1, "output_tokens": 0}}}),
            ("message_stop", {"type": "message_stop"})]  # fmt: skip
    return "sse", [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
            "usage": {"input_tokens": 1, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Looking. "}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("content_block_start", {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "tu_r", "name": R, "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {
            "type": "input_json_delta", "partial_json": '{"ref": "cw:0000'}}),
        ("error", {"type": "error",
                   "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]  # fmt: skip


def _chat_round0(n: int, body: dict[str, Any]) -> tuple[str, Any]:
    if n > 0:
        return "sse", [_chunk({"role": "assistant", "content": "Second."}), _chunk({}, "stop"),
                       "[DONE]"]  # fmt: skip
    return "sse", [
        _chunk({"role": "assistant", "content": "Looking. "}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_r", "type": "function",
                                "function": {"name": R, "arguments": '{"ref": "cw:00'}}]}),
        {"error": {"message": "The server had an error", "type": "server_error"}},
    ]  # fmt: skip


@pytest.mark.parametrize("api", ["messages", "chat"])
async def test_an_error_event_in_the_first_round_ends_the_turn(
    make_proxy: ProxyFactory, api: str
) -> None:
    script = _messages_round0 if api == "messages" else _chat_round0
    async with (
        _upstream(script) as (url, received),
        make_proxy(openai_upstream=url, anthropic_upstream=url) as proxy,
    ):
        content = "see cw:000000000000"
        if api == "messages":
            path, headers = "/v1/messages", {"x-api-key": KEY_A,
                                             "anthropic-version": "2023-06-01"}  # fmt: skip
            body: dict[str, Any] = {"model": "claude-opus-5", "max_tokens": 64}
        else:
            path, headers = "/v1/chat/completions", {"Authorization": f"Bearer {KEY_A}"}
            body = {"model": "m"}
        body |= {"stream": True, "messages": [{"role": "user", "content": content}]}
        raw, cut = await _post(proxy.url + path, body, headers)
        await proxy.state.drain()
        event = proxy.recorder.last(route=api)
    assert len(received) == 1  # no continuation billed after the error
    events = _events(raw)
    last = events[-1][1]
    assert isinstance(last, dict) and "error" in last  # the error, as sent, ends it
    assert last["error"]["message"] in ("Overloaded", "The server had an error")
    # ended as the upstream ended it (helper-129: a cut connection read as a network
    # failure to clients, which retry it otherwise), logged as a plain relay logs it
    assert not cut
    assert event["status"] == 200 and "stream_cut" not in event
    assert event["error_type"] == "UpstreamStreamError" and event["level"] == "warning"


# -- 2. a streamed Responses round that cannot be asked again ------------------------


def _filtered(output: list[dict[str, Any]], may_ask_again: bool = True) -> list[str]:
    """The ids of the items a stream of ``output`` shows the client."""
    flt = ResponsesFilter()
    flt.may_ask_again = may_ask_again
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "r1"}}]
    for index, item in enumerate(output):
        events += [
            {"type": "response.output_item.added", "output_index": index, "item": item},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    events.append({"type": "response.completed", "response": {"id": "r1", "output": output}})
    sent: list[bytes] = []
    for n, event in enumerate(events):
        for parsed in SSESplitter().feed(encode_event({**event, "sequence_number": n},
                                                      str(event["type"]))):  # fmt: skip
            sent += flt.process(parsed)
    sent += flt.finish()
    shown = [obj["item"]["id"] for _, obj in _events(b"".join(sent))
             if obj.get("type") == "response.output_item.done"]  # fmt: skip
    completed = _events(b"".join(sent))[-1][1]["response"]["output"]
    assert [i["id"] for i in completed] == shown
    return shown


_MESSAGE = {"type": "message", "id": "msg_0", "role": "assistant", "content": []}
_REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}
_RECALL = {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": R, "arguments": "{}"}
_READ = {"type": "function_call", "id": "fc_3", "call_id": "c3", "name": "read",
         "arguments": "{}"}  # fmt: skip


def test_a_stream_that_showed_the_round_keeps_the_reasoning_before_recall_hidden() -> None:
    assert _filtered([_MESSAGE, _REASONING, _RECALL, _READ]) == ["msg_0", "fc_3"]


def test_a_stream_at_the_round_limit_keeps_the_reasoning_before_recall_hidden() -> None:
    """As a whole answer past the limit shows it (``Dialect.strip``)."""
    assert _filtered([_REASONING, _RECALL, _READ], may_ask_again=False) == ["fc_3"]


async def test_a_client_keeping_its_history_can_send_back_what_the_stream_showed(
    proxy: Proxy,
) -> None:
    ref = _ref(proxy)
    tools: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
    text = [{"type": "output_text", "text": "Let me check.", "annotations": []}]
    items = (
        {"type": "message", "id": "msg_a", "status": "completed", "role": "assistant",
         "content": text},
        {"type": "reasoning", "id": "rs_a", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "function_call", "id": "fc_r", "call_id": "call_r", "name": R,
         "arguments": orjson.dumps({"ref": ref}).decode(), "status": "completed"},
        {"type": "function_call", "id": "fc_c", "call_id": "call_c", "name": "read",
         "arguments": "{}", "status": "completed"},
    )  # fmt: skip
    proxy.fake.script(Reply(items=items), Reply(text="fine"))
    history: list[Any] = [{"role": "user", "content": f"see {ref}"}]
    async with openai_client(proxy) as c:
        async with c.responses.stream(model="gpt-4o", input=history, tools=tools) as s:
            first = await s.get_final_response()
        shown: list[Any] = [i.model_dump(exclude_none=True) for i in first.output]
        assert [i["id"] for i in shown] == ["msg_a", "fc_c"]
        answer: Any = {"type": "function_call_output", "call_id": "call_c", "output": "file"}
        second = await c.responses.create(
            model="gpt-4o", input=[*history, *shown, answer], tools=tools
        )  # the fake refuses the reasoning sent back without its following item
    assert second.output_text == "fine"


# -- 3. a turn's recall answers are bounded as a whole ------------------------------


def _tool_messages(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def _calling(rounds: list[list[dict[str, Any]]]) -> Script:
    """Round n calls ``rounds[n]`` (the JSON answer), then answers "done"."""

    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        if n < len(rounds):
            message = {"role": "assistant", "content": None, "tool_calls": rounds[n]}
            return "json", _completion(message, "tool_calls")
        return "json", _completion({"role": "assistant", "content": "done"}, "stop")

    return script


async def _chat(url: str, content: str, stream: bool = False) -> str | None:
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=url + "/v1", max_retries=0) as c:
        messages: Any = [{"role": "user", "content": content}]
        if stream:
            async with c.chat.completions.stream(model="m", messages=messages) as s:
                return (await s.get_final_completion()).choices[0].message.content
        return (
            (await c.chat.completions.create(model="m", messages=messages))
            .choices[0]
            .message.content
        )


async def test_a_repeated_recall_in_a_turn_points_at_the_earlier_answer(
    make_proxy: ProxyFactory,
) -> None:
    rounds: list[list[dict[str, Any]]] = [[], []]
    async with (
        _upstream(_calling(rounds)) as (url, received),
        make_proxy(openai_upstream=url) as proxy,
    ):
        ref = _ref(proxy)
        rounds[0] += [_recall_call("c1", {"ref": ref}), _recall_call("c2", {"ref": ref})]
        rounds[1] += [_recall_call("c3", {"ref": ref})]  # a later round, the same
        assert await _chat(proxy.url, f"see {ref}") == "done"
    first, second = _tool_messages(received[1]), _tool_messages(received[2])
    assert first["c1"] == ORIGINAL
    assert "already answered in this turn (call c1)" in first["c2"]
    assert ORIGINAL not in first["c2"] and "already answered" in second["c3"]


async def test_max_recall_calls_counts_the_turn_not_the_round(make_proxy: ProxyFactory) -> None:
    rounds: list[list[dict[str, Any]]] = [[], []]
    async with (
        _upstream(_calling(rounds)) as (url, received),
        make_proxy(openai_upstream=url, max_recall_calls=2) as proxy,
    ):
        refs = [_ref(proxy, f"text {i}") for i in range(3)]
        rounds[0] += [_recall_call("c1", {"ref": refs[0]})]
        rounds[1] += [_recall_call("c2", {"ref": refs[1]}),
                      _recall_call("c3", {"ref": refs[2]})]  # fmt: skip
        assert await _chat(proxy.url, f"see {refs}") == "done"
    answers = _tool_messages(received[2])
    assert answers["c2"] == "text 1"
    assert answers["c3"] == "ctxwarden_recall: at most 2 calls per turn"


@pytest.mark.parametrize("stream", [False, True])
async def test_the_recalled_text_of_a_turn_is_capped(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    rounds: list[list[dict[str, Any]]] = [[]]

    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        if n == 0 and stream:  # the calls, streamed
            deltas = [{"index": i, **c} for i, c in enumerate(rounds[0])]
            return "sse", [_chunk({"role": "assistant", "tool_calls": deltas}),
                           _chunk({}, "tool_calls"), "[DONE]"]  # fmt: skip
        if n > 0 and stream:
            return "sse", [_chunk({"role": "assistant", "content": "done"}),
                           _chunk({}, "stop"), "[DONE]"]  # fmt: skip
        return _calling(rounds)(n, body)

    async with (
        _upstream(script) as (url, received),
        make_proxy(openai_upstream=url, max_recall_bytes=100) as proxy,
    ):
        # a turn takes four answers' worth (400 bytes here): 5 x 70, then 50 of the 6th
        refs = [_ref(proxy, f"{i}" * 70) for i in range(7)]
        rounds[0] += [_recall_call(f"c{i}", {"ref": ref}) for i, ref in enumerate(refs)]
        assert await _chat(proxy.url, f"see {refs}", stream) == "done"
    answers = _tool_messages(received[1])
    assert [answers[f"c{i}"] for i in range(5)] == [f"{i}" * 70 for i in range(5)]
    assert answers["c5"].startswith("5" * 50 + "\n[ctxwarden_recall: truncated at this turn's")
    assert answers["c6"] == (
        "ctxwarden_recall: this turn's limit of 400 bytes of recalled text is reached; "
        "answer with what you have"
    )


async def test_an_answer_cut_at_its_cap_leaves_room_for_the_range_it_asks_for(
    make_proxy: ProxyFactory,
) -> None:
    # helper-125: the cap of one answer was the turn's too, so the line range the cut
    # answer asked for was refused as over the turn's limit
    rounds: list[list[dict[str, Any]]] = [[], []]
    async with (
        _upstream(_calling(rounds)) as (url, received),
        make_proxy(openai_upstream=url, max_recall_bytes=100) as proxy,
    ):
        ref = _ref(proxy, "\n".join(f"line {i:03d}" for i in range(1, 41)))  # 359 bytes
        rounds[0] += [_recall_call("whole", {"ref": ref})]
        rounds[1] += [_recall_call("range", {"ref": ref, "lines": "20-22"})]
        assert await _chat(proxy.url, f"see {ref}") == "done"
    answers = _tool_messages(received[2])
    assert "truncated" in answers["whole"] and "ask for a line range" in answers["whole"]
    assert answers["range"] == "line 020\nline 021\nline 022"


def test_the_turn_budget_keys_repeats_by_ref_and_lines() -> None:
    from ctxwarden.proxy.recall import TurnBudget  # new with the fix

    budget = TurnBudget(max_calls=8, max_bytes=1000)

    def ask(call_id: str, arguments: str) -> str | None:
        call = RecallCall(call_id, arguments)
        screened = budget.screen(call)
        if screened is None:
            budget.spend(call, RecallAnswer(call_id, "text", True))
            return None
        return screened.text

    assert ask("a", '{"ref": "cw:000000000001"}') is None
    assert ask("b", '{"ref": "cw:000000000001", "lines": "1-2"}') is None  # another range
    assert "(call a)" in str(ask("c", '{"ref": "cw:000000000001"}'))
    assert "(call b)" in str(ask("d", '{"ref": "cw:000000000001", "lines": " 1-2"}'))
    assert budget.calls == 4 and budget.used == 8


# -- 4. a Chat stream's recall call with its name late, split or repeated ------------


def _streamed_calls(case: str, ref: str) -> list[dict[str, Any]]:
    """Round 0's tool-call deltas as an OpenAI-compatible server may send them."""
    args = orjson.dumps({"ref": ref}).decode()
    head, tail = args[:9], args[9:]
    fn = {"name": R}
    if case == "name-late":
        return [{"index": 0, "id": "call_r", "type": "function", "function": {"arguments": ""}},
                {"index": 0, "function": {"name": R, "arguments": head}},
                {"index": 0, "function": {"arguments": tail}}]  # fmt: skip
    if case == "name-split":
        return [{"index": 0, "id": "call_r", "type": "function",
                 "function": {"name": "ctxwarden_", "arguments": ""}},
                {"index": 0, "function": {"name": "recall", "arguments": head}},
                {"index": 0, "function": {"arguments": tail}}]  # fmt: skip
    first = {"index": 0, "id": "call_r", "type": "function", "function": {**fn, "arguments": head}}
    if case == "name-repeated":
        return [first, {**first, "function": {**fn, "arguments": tail}}]
    assert case == "name-repeated-no-id"
    return [first, {"index": 0, "function": {**fn, "arguments": tail}}]


@pytest.mark.parametrize(
    "case", ["name-late", "name-split", "name-repeated", "name-repeated-no-id"]
)
async def test_a_chat_stream_recall_call_is_recognised_however_its_name_comes(
    make_proxy: ProxyFactory, case: str
) -> None:
    refs: list[str] = []

    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        if n == 0:
            deltas = _streamed_calls(case, refs[0])
            return "sse", [_chunk({"role": "assistant", "content": "Checking. "}),
                           *[_chunk({"tool_calls": [d]}) for d in deltas],
                           _chunk({}, "tool_calls"), "[DONE]"]  # fmt: skip
        return "sse", [_chunk({"role": "assistant", "content": "Done."}), _chunk({}, "stop"),
                       "[DONE]"]  # fmt: skip

    async with _upstream(script) as (url, received), make_proxy(openai_upstream=url) as proxy:
        refs.append(_ref(proxy))
        raw, _ = await _post(
            proxy.url + "/v1/chat/completions",
            {"model": "m", "stream": True,
             "messages": [{"role": "user", "content": f"see {refs[0]}"}]},
            {"Authorization": f"Bearer {KEY_A}"},
        )  # fmt: skip
    assert b"tool_calls" not in raw.replace(b'"finish_reason":"tool_calls"', b"")
    assert R.encode() not in raw
    assert len(received) == 2
    assistant = received[1]["messages"][-2]
    assert assistant["tool_calls"] == [_recall_call("call_r", {"ref": refs[0]})]
    assert _tool_messages(received[1]) == {"call_r": ORIGINAL}


@pytest.mark.parametrize("name", ["read", "ctxwarden"])  # "ctxwarden": a prefix of recall's
async def test_a_client_call_whose_name_comes_late_reaches_the_client_whole(
    make_proxy: ProxyFactory, name: str
) -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        deltas = [{"index": 0, "id": "call_c", "type": "function", "function": {"arguments": ""}},
                  {"index": 0, "function": {"name": name, "arguments": '{"pa'}},
                  {"index": 0, "function": {"arguments": 'th": "a"}'}}]  # fmt: skip
        return "sse", [_chunk({"role": "assistant", "content": None}),
                       *[_chunk({"tool_calls": [d]}) for d in deltas],
                       _chunk({}, "tool_calls"), "[DONE]"]  # fmt: skip

    tools: Any = [{"type": "function", "function": {"name": name, "parameters": {}}}]
    async with (
        _upstream(script) as (url, received),
        make_proxy(openai_upstream=url) as proxy,
        openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c,
        c.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "go"}], tools=tools
        ) as s,
    ):
        completion = await s.get_final_completion()
    assert R in orjson.dumps(received[0]["tools"]).decode()  # the recall tool was offered
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    assert calls == [("call_c", name, '{"path": "a"}')]


# -- 5. an upstream that answers a stream with JSON ---------------------------------


async def test_a_json_answer_to_a_streamed_recall_turn_runs_the_recall_loop(
    make_proxy: ProxyFactory,
) -> None:
    refs: list[str] = []

    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        assert body["stream"] is True
        return _calling([[_recall_call("c1", {"ref": refs[0]})]])(n, body)

    async with _upstream(script) as (url, received), make_proxy(openai_upstream=url) as proxy:
        refs.append(_ref(proxy))
        async with aiohttp.ClientSession() as s:
            body = {"model": "m", "stream": True,
                    "messages": [{"role": "user", "content": f"see {refs[0]}"}]}  # fmt: skip
            headers = {"Authorization": f"Bearer {KEY_A}"}
            async with s.post(proxy.url + "/v1/chat/completions", json=body,
                              headers=headers) as r:  # fmt: skip
                status, kind, answer = r.status, r.content_type, await r.json()
    assert (status, kind) == (200, "application/json")  # as the upstream gave it
    assert answer["choices"][0]["message"]["content"] == "done"
    assert R not in orjson.dumps(answer).decode()
    assert _tool_messages(received[1]) == {"c1": ORIGINAL}


# -- 6. the client is never told the upstream's address -----------------------------


def test_a_body_read_failure_names_no_address() -> None:
    error = translate_read_error(aiohttp.ClientPayloadError("cut"))
    assert str(error) == "upstream body failed: ClientPayloadError"
    assert str(translate_read_error(TimeoutError())) == "upstream stalled while sending the body"


async def test_a_connect_failure_tells_the_client_no_address() -> None:
    port = free_port()
    client = Upstream(connect_timeout=2, read_timeout=2, total_timeout=None, pool_size=1)
    try:
        with pytest.raises(UpstreamUnavailable) as caught:
            async with client.open("POST", f"http://127.0.0.1:{port}/v1/x", {}, b"{}"):
                pass
    finally:
        await client.close()
    assert f"127.0.0.1:{port}" in str(caught.value)  # for the operator
    assert caught.value.public == "upstream unavailable: ClientConnectorError"


async def test_a_continuation_cut_off_tells_the_client_no_address(
    make_proxy: ProxyFactory,
) -> None:
    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        if n == 0:
            deltas = [{"index": 0, **_recall_call("c1", {"ref": "cw:000000000000"})}]
            return "sse", [_chunk({"role": "assistant", "tool_calls": deltas}),
                           _chunk({}, "tool_calls"), "[DONE]"]  # fmt: skip
        return "cut", [_chunk({"role": "assistant", "content": "Half"})]

    async with _upstream(script) as (url, _), make_proxy(openai_upstream=url) as proxy:
        raw, cut = await _post(
            proxy.url + "/v1/chat/completions",
            {"model": "m", "stream": True,
             "messages": [{"role": "user", "content": "see cw:000000000000"}]},
            {"Authorization": f"Bearer {KEY_A}"},
        )  # fmt: skip
    host = re.escape(url.removeprefix("http://"))
    errors = [obj for _, obj in _events(raw) if isinstance(obj, dict) and "error" in obj]
    assert cut and len(errors) == 1
    assert errors[0]["error"]["message"].startswith("upstream ")
    assert not re.search(host, raw.decode())


# -- after helper-125's review: servers that send no tool_calls[].index ----------------


def _noindex_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gemini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


_CLIENT_NOINDEX = {"id": "call_a", "type": "function",
                   "function": {"name": "read_file", "arguments": '{"path": "a"}'}}  # fmt: skip
_RECALL_NOINDEX = {"id": "call_b", "type": "function",
                   "function": {"name": RECALL_TOOL_NAME,
                                "arguments": '{"ref": "cw:000000000001"}'}}  # fmt: skip


@pytest.mark.parametrize(
    "order",
    [
        "client then recall, two chunks",
        "client then recall, one chunk",
        "recall then client, two chunks",
    ],
)
def test_calls_without_an_index_are_told_apart_by_their_ids(order: str) -> None:
    # Gemini's OpenAI endpoint and older Ollama send no index: both calls were call 0
    # (the recall call reached the client, or the client's call was folded into it)
    from ctxwarden.proxy.sse import SSESplitter, encode_event
    from ctxwarden.proxy.stream_filters import ChatFilter

    first, second = (
        (_RECALL_NOINDEX, _CLIENT_NOINDEX)
        if order.startswith("recall")
        else (_CLIENT_NOINDEX, _RECALL_NOINDEX)
    )
    if order.endswith("one chunk"):
        chunks = [_noindex_chunk({"role": "assistant", "tool_calls": [first, second]})]
    else:
        chunks = [_noindex_chunk({"role": "assistant", "tool_calls": [first]}),
                  _noindex_chunk({"tool_calls": [second]})]  # fmt: skip
    flt = ChatFilter()
    out = b""
    for raw in [*map(encode_event, [*chunks, _noindex_chunk({}, "tool_calls")]),
                b"data: [DONE]\n\n"]:  # fmt: skip
        for event in SSESplitter().feed(raw):
            out += b"".join(flt.process(event))
    result = flt.round_result()
    out += b"".join(flt.finish())
    assert RECALL_TOOL_NAME.encode() not in out
    assert b"read_file" in out and b'{\\"path\\": \\"a\\"}' in out
    assert [c.arguments for c in result.calls] == ['{"ref": "cw:000000000001"}']
    assert result.other_calls == 1


async def test_an_error_event_is_named_alike_with_or_without_the_recall_tool(
    make_proxy: ProxyFactory,
) -> None:
    # helper-125: a plain relay logged the stream's error event as a clean 200, a recall
    # turn as a cut 502, so an alert on errors followed how often requests held refs
    def script(n: int, body: dict[str, Any]) -> tuple[str, Any]:
        error = {"message": "The server had an error", "type": "server_error"}
        return "sse", [_chunk({"role": "assistant", "content": "Hi"}), {"error": error}]

    types = []
    async with _upstream(script) as (url, _), make_proxy(openai_upstream=url) as proxy:
        for content in ("hello", "see cw:000000000000"):
            await _post(proxy.url + "/v1/chat/completions",
                        {"model": "m", "stream": True,
                         "messages": [{"role": "user", "content": content}]},
                        {"Authorization": f"Bearer {KEY_A}"})  # fmt: skip
            await proxy.state.drain()
            event = proxy.recorder.events[-1]
            recall = bool(event.get("recall_injected"))
            types.append((recall, event["error_type"], event["level"]))
    assert types == [(False, "UpstreamStreamError", "warning"),
                     (True, "UpstreamStreamError", "warning")]  # fmt: skip
