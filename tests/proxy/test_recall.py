"""Server-side recall through the real SDKs: tool offered, calls answered, hidden."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import orjson
import pytest

from ctxwarden.errors import ArtifactMissing
from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.dialects import DIALECTS, MAX_TOOLS
from tests.proxy.conftest import KEY_A, KEY_B, Proxy, ProxyFactory

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3 secret-beta\nline 4"
FINAL = "The answer after recall."


def _store(proxy: Proxy, key: str = KEY_A) -> str:
    return proxy.engine.store.put(proxy.tenant(key), ORIGINAL)


def _placeholder(ref: str) -> str:
    return f"[output elided by ctxwarden: 4 lines; recall {ref}] please summarize"


def _script_recall(proxy: Proxy, ref: str, lines: str | None = "2-3") -> None:
    args = {"ref": ref, **({"lines": lines} if lines else {})}
    proxy.fake.script(
        Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, args, "call_recall_1")]),
        Reply(text=FINAL),
    )


async def _chat(proxy: Proxy, ref: str, *, stream: bool, key: str = KEY_A, **extra: Any) -> Any:
    async with openai.AsyncOpenAI(api_key=key, base_url=proxy.openai_url, max_retries=0) as c:
        messages = [{"role": "user", "content": _placeholder(ref)}]
        if not stream:
            r = await c.chat.completions.create(model="gpt-4o", messages=messages, **extra)
            return r.choices[0]
        async with c.chat.completions.stream(model="gpt-4o", messages=messages, **extra) as s:
            return (await s.get_final_completion()).choices[0]


def _tool(i: int) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"tool_{i}", "parameters": {}}}


def _tool_result_text(body: dict[str, Any]) -> str:
    return orjson.dumps(body).decode()


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_recall_is_answered_and_hidden(proxy: Proxy, stream: bool) -> None:
    ref = _store(proxy)
    _script_recall(proxy, ref)
    choice = await _chat(proxy, ref, stream=stream)
    assert choice.message.content == FINAL
    assert not choice.message.tool_calls and choice.finish_reason == "stop"
    first, second = (r.json() for r in proxy.fake.received[-2:])
    assert first["tools"][-1]["function"]["name"] == RECALL_TOOL_NAME
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_recall_1"
    assert second["messages"][-1] == {
        "role": "tool", "tool_call_id": "call_recall_1",
        "content": "line 2 secret-alpha\nline 3 secret-beta",
    }  # fmt: skip
    event = proxy.recorder.last(route="chat")
    assert event["recall_rounds"] == 1 and event["recall_calls"] == 1 and event["recall_injected"]


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_recall_is_answered_and_hidden(proxy: Proxy, stream: bool) -> None:
    ref = _store(proxy)
    _script_recall(proxy, ref, lines=None)
    messages = [{"role": "user", "content": _placeholder(ref)}]
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as c:
        if stream:
            async with c.messages.stream(
                model="claude-opus-5", max_tokens=64, messages=messages, tools=tools
            ) as s:
                kinds = [e.type async for e in s]
                message = await s.get_final_message()
            assert kinds.count("message_start") == 1 and kinds[-1] == "message_stop"
        else:
            message = await c.messages.create(
                model="claude-opus-5", max_tokens=64, messages=messages, tools=tools
            )
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text" and message.content[0].text == FINAL
    assert message.stop_reason == "end_turn"
    first, second = (r.json() for r in proxy.fake.received[-2:])
    assert [t["name"] for t in first["tools"]] == ["read", RECALL_TOOL_NAME]
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"] == ORIGINAL
    assert proxy.recorder.last(route="messages")["recall_rounds"] == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_recall_is_answered_and_hidden(proxy: Proxy, stream: bool) -> None:
    ref = _store(proxy)
    _script_recall(proxy, ref)
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        if stream:
            async with c.responses.stream(model="gpt-4o", input=_placeholder(ref)) as s:
                events = [e async for e in s]
                response = await s.get_final_response()
            numbers = [e.sequence_number for e in events]
            assert numbers == list(range(len(numbers)))  # from 0, no gaps
            assert [e.type for e in events].count("response.created") == 1
        else:
            response = await c.responses.create(model="gpt-4o", input=_placeholder(ref))
    assert response.output_text == FINAL
    assert all(item.type != "function_call" for item in response.output)
    second = proxy.fake.received[-1].json()
    outputs = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert outputs == [{"type": "function_call_output", "call_id": "call_recall_1",
                        "output": "line 2 secret-alpha\nline 3 secret-beta"}]  # fmt: skip


async def test_tenant_cannot_recall_another_tenants_artifact(proxy: Proxy) -> None:
    ref = _store(proxy, KEY_A)
    with pytest.raises(ArtifactMissing):
        proxy.engine.recall(ref, tenant=proxy.tenant(KEY_B))
    _script_recall(proxy, ref, lines=None)
    choice = await _chat(proxy, ref, stream=False, key=KEY_B)
    assert choice.message.content == FINAL
    second = proxy.fake.received[-1]
    assert b"secret-alpha" not in second.body
    assert second.json()["messages"][-1]["content"] == "ctxwarden_recall: no such reference"
    event = proxy.recorder.last(route="chat")
    assert event["recall_errors"] == 1
    assert proxy.tenant(KEY_A) != proxy.tenant(KEY_B)
    assert KEY_B not in orjson.dumps(proxy.recorder.events).decode()


async def test_no_injection_without_refs_in_exact_mode_or_with_clients_own_tool(
    proxy: Proxy,
) -> None:
    ref = _store(proxy)
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        await c.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "no references here"}]
        )
        assert "tools" not in proxy.fake.received[-1].json()
        await c.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": _placeholder(ref)}],
            extra_headers={"x-ctxwarden-mode": "exact"},
        )  # fmt: skip
        assert "tools" not in proxy.fake.received[-1].json()
        own = [{"type": "function", "function": {"name": RECALL_TOOL_NAME, "parameters": {}}}]
        await c.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": _placeholder(ref)}], tools=own
        )
        assert proxy.fake.received[-1].json()["tools"] == own


async def test_recall_rounds_are_limited(make_proxy: ProxyFactory) -> None:
    async with make_proxy(max_recall_rounds=2) as proxy:
        ref = _store(proxy)
        call = ToolCall(RECALL_TOOL_NAME, {"ref": ref})
        proxy.fake.default = Reply(text="still thinking", tool_calls=[call])
        for stream in (False, True):
            before = len(proxy.fake.received)
            choice = await _chat(proxy, ref, stream=stream)
            assert choice.message.content is not None and "still thinking" in choice.message.content
            assert not choice.message.tool_calls
            assert len(proxy.fake.received) - before == 3  # first + 2 continuations
            assert proxy.recorder.last(route="chat", stream=stream)["recall_rounds"] == 2
            # the last round the limit allows asks for an answer, not another call
            choices = [r.json().get("tool_choice") for r in proxy.fake.received[before:]]
            assert choices == [None, None, "none"]


async def test_no_recall_tool_when_rounds_are_off(make_proxy: ProxyFactory) -> None:
    async with make_proxy(max_recall_rounds=0) as proxy:
        await _chat(proxy, _store(proxy), stream=False)
        assert "tools" not in proxy.fake.received[-1].json()


@pytest.mark.parametrize(
    ("extra", "injected"),
    [
        ({"prediction": {"type": "content", "content": "x"}}, False),
        ({"tools": [_tool(i) for i in range(MAX_TOOLS)]}, False),
        ({"tools": [_tool(i) for i in range(MAX_TOOLS - 1)]}, True),
    ],
)
async def test_no_recall_tool_where_openai_refuses_one(
    proxy: Proxy, extra: dict[str, Any], injected: bool
) -> None:
    await _chat(proxy, _store(proxy), stream=False, **extra)
    tools = proxy.fake.received[-1].json().get("tools", [])
    sent = {t["function"]["name"] for t in tools}
    assert (RECALL_TOOL_NAME in sent) is injected
    assert len(tools) == len(extra.get("tools", [])) + injected


@pytest.mark.parametrize(
    ("api", "given", "expected"),
    [
        ("openai.chat", None, "none"),
        ("openai.chat", "auto", "none"),
        ("openai.chat", "required", "required"),
        ("openai.responses", None, "none"),
        ("anthropic.messages", None, {"type": "none"}),
        (
            "anthropic.messages",
            {"type": "auto", "disable_parallel_tool_use": True},
            {"type": "none"},
        ),
        ("anthropic.messages", {"type": "tool", "name": "x"}, {"type": "tool", "name": "x"}),
    ],
)
def test_last_round_asks_for_no_tool_unless_the_client_forced_one(
    api: str, given: Any, expected: Any
) -> None:
    request: dict[str, Any] = {"model": "m", **({"tool_choice": given} if given else {})}
    assert DIALECTS[api].last_round(request)["tool_choice"] == expected


async def test_recall_next_to_a_client_tool_call_is_stripped_not_answered(proxy: Proxy) -> None:
    ref = _store(proxy)
    calls = [ToolCall(RECALL_TOOL_NAME, {"ref": ref}), ToolCall("read", {"path": "a.py"}, "c2")]
    proxy.fake.script(Reply(text="", tool_calls=calls), Reply(text="", tool_calls=calls))
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    for stream in (False, True):
        choice = await _chat(proxy, ref, stream=stream, tools=tools)
        assert [c.function.name for c in choice.message.tool_calls] == ["read"]
        assert choice.finish_reason == "tool_calls"
    assert proxy.recorder.last(route="chat").get("recall_rounds") == 0


async def test_responses_stream_answers_with_the_final_rounds_id(proxy: Proxy) -> None:
    ref = _store(proxy)
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        for stream in (False, True):
            _script_recall(proxy, ref)
            if stream:
                async with c.responses.stream(model="gpt-4o", input=_placeholder(ref)) as s:
                    events = [e async for e in s]
                    response = await s.get_final_response()
                created = [e for e in events if e.type == "response.created"]
                assert [e.response.id for e in created] == [response.id]
            else:
                response = await c.responses.create(model="gpt-4o", input=_placeholder(ref))
            # each fake reply has the next id: the last request got the final round's
            assert response.id == f"resp_fake{len(proxy.fake.received)}"
            assert response.output_text == FINAL
        # a round that showed text before calling recall was announced: its id stays,
        # since clients (the SDK checks) need one id on every lifecycle event
        call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_r")
        proxy.fake.script(Reply(text="Let me look.", tool_calls=[call]), Reply(text=FINAL))
        async with c.responses.stream(model="gpt-4o", input=_placeholder(ref)) as s:
            response = await s.get_final_response()
        assert response.id == f"resp_fake{len(proxy.fake.received) - 1}"
        assert "Let me look." in response.output_text and FINAL in response.output_text


@pytest.mark.parametrize("stream", [False, True])
async def test_failed_continuation_is_an_error_not_an_empty_answer(
    proxy: Proxy, stream: bool
) -> None:
    ref = _store(proxy)
    call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_r")
    proxy.fake.script(Reply(text="", tool_calls=[call]), Reply(status=429, error="slow down"))
    if stream:  # the stream had started: the SDK raises the error event
        with pytest.raises(openai.APIError, match="slow down"):
            await _chat(proxy, ref, stream=True)
    else:  # nothing was sent yet: the upstream's status and body, as the first round's
        with pytest.raises(openai.RateLimitError) as raised:
            await _chat(proxy, ref, stream=False)
        assert raised.value.status_code == 429
    event = proxy.recorder.last(route="chat")
    assert event["upstream_status"] == 429 and event["recall_rounds"] == 1
    assert event["status"] == 429  # a started stream ends in the error too (stream_cut)
    assert event.get("stream_cut", False) is stream
    proxy.fake.script(Reply(text="", tool_calls=[call]), Reply(status=529, error="overloaded"))
    messages = [{"role": "user", "content": _placeholder(ref)}]
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as a:
        with pytest.raises(anthropic.APIStatusError, match="overloaded") as failed:
            if stream:
                async with a.messages.stream(model="claude-opus-5", max_tokens=64,
                                             messages=messages) as s:  # fmt: skip
                    await s.get_final_message()
            else:
                await a.messages.create(model="claude-opus-5", max_tokens=64, messages=messages)
    if not stream:
        assert failed.value.status_code == 529


async def test_no_recall_tool_when_chat_asks_for_several_choices(proxy: Proxy) -> None:
    ref = _store(proxy)
    await _chat(proxy, ref, stream=False, n=2)
    assert "tools" not in proxy.fake.received[-1].json()
    await _chat(proxy, ref, stream=False, n=1)
    assert proxy.fake.received[-1].json()["tools"][-1]["function"]["name"] == RECALL_TOOL_NAME


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_is_summed_over_recall_rounds(proxy: Proxy, stream: bool) -> None:
    ref = _store(proxy)
    call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_r")
    proxy.fake.script(
        Reply(text="", tool_calls=[call], prompt_tokens=1000, completion_tokens=10),
        Reply(text=FINAL, prompt_tokens=1100, completion_tokens=20),
    )
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    await _chat(proxy, ref, stream=stream, **extra)
    event = proxy.recorder.last(route="chat")
    assert event["usage_prompt_tokens"] == 2100 and event["usage_completion_tokens"] == 30


@pytest.mark.parametrize("store", [None, True, False])
def test_a_stateless_responses_continuation_sends_only_what_it_can(store: bool | None) -> None:
    """With store false nothing of round one was persisted: its items go back without
    ids, and a reasoning item without encrypted content cannot go back at all."""
    from ctxwarden.proxy.recall import RecallAnswer, RecallCall, RoundResult

    output = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": RECALL_TOOL_NAME,
         "arguments": "{}"},
    ]  # fmt: skip
    request: dict[str, Any] = {
        "model": "m",
        "input": "q",
        **({} if store is None else {"store": store}),
    }
    result = RoundResult(calls=[RecallCall("c1", "{}")], assistant=output)
    sent = DIALECTS["openai.responses"].continuation(
        request, result, [RecallAnswer("c1", "text", True)]
    )["input"]
    echoed = sent[1:-1]
    if store is False:
        assert echoed == [
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "c1", "name": RECALL_TOOL_NAME, "arguments": "{}"},
        ]
    else:
        assert echoed == output
    assert sent[-1] == {"type": "function_call_output", "call_id": "c1", "output": "text"}


async def test_an_agent_gets_the_recall_tool_from_its_first_turn(proxy: Proxy) -> None:
    """A request offering tools gets the recall tool before it holds any reference, so
    the tool list, where the cached prompt starts, stays the same all session."""
    own = [_tool(0)]
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        messages = [{"role": "user", "content": "no references yet"}]
        await c.chat.completions.create(model="gpt-4o", messages=messages, tools=own)
        sent = proxy.fake.received[-1].json()["tools"]
        assert [t["function"]["name"] for t in sent] == ["tool_0", RECALL_TOOL_NAME]
        await c.chat.completions.create(
            model="gpt-4o", messages=messages, tools=own,
            extra_headers={"x-ctxwarden-mode": "exact"},
        )  # fmt: skip
        assert proxy.fake.received[-1].json()["tools"] == own


async def test_the_recall_tool_goes_with_a_forced_choice_as_with_any_other(
    proxy: Proxy,
) -> None:
    """An agent that forces a call on one turn and not on the next keeps one tool list
    (the start of its cached prompt): offering recall only once references appeared
    under a forced choice re-sent the whole prompt, on every turn of a Responses chain
    whose new input held none. The last round allowed goes without it
    (tests/proxy/test_forced_tool_choice.py)."""
    names = []
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        for choice in ("required", "auto"):
            await c.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "go"}], tools=[_tool(0)],
                tool_choice=choice,
            )  # fmt: skip
            names.append([t["function"]["name"] for t in proxy.fake.received[-1].json()["tools"]])
    assert names == [["tool_0", RECALL_TOOL_NAME]] * 2


def test_the_responses_recall_tool_is_not_strict() -> None:
    injected = DIALECTS["openai.responses"].inject({"model": "m", "input": "q", "tools": []})
    assert injected is not None and injected["tools"][-1]["strict"] is False


def test_a_stateless_continuation_keeps_server_tool_items_as_they_came() -> None:
    from ctxwarden.proxy.recall import RecallAnswer, RecallCall, RoundResult

    search = {"type": "web_search_call", "id": "ws_1", "status": "completed"}
    result = RoundResult(calls=[RecallCall("c1", "{}")], assistant=[search])
    sent = DIALECTS["openai.responses"].continuation(
        {"model": "m", "input": "q", "store": False}, result, [RecallAnswer("c1", "t", True)]
    )["input"]
    assert sent[1] == search


@pytest.mark.parametrize("stream", [False, True])
async def test_a_responses_answer_does_not_show_the_recall_tool(proxy: Proxy, stream: bool) -> None:
    """Responses echo the request's tools and tool_choice; the client sees its own."""
    tools: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
        if stream:
            async with c.responses.stream(model="gpt-4o", input="hi", tools=tools) as s:
                response = await s.get_final_response()
        else:
            response = await c.responses.create(model="gpt-4o", input="hi", tools=tools)
    assert [t.name for t in response.tools] == ["read"]
    sent = proxy.fake.received[-1].json()
    assert [t["name"] for t in sent["tools"]] == ["read", RECALL_TOOL_NAME]


def test_no_recall_tool_for_a_background_response_and_null_choices_stay_the_default() -> None:
    from ctxwarden.proxy.dialects import hide_recall_tool

    responses = DIALECTS["openai.responses"]
    assert responses.inject({"model": "m", "input": "q", "background": True}) is None
    echoed = {"tools": [], "tool_choice": "auto"}
    assert hide_recall_tool(echoed, {"tool_choice": None}) is None
    assert hide_recall_tool({**echoed, "tool_choice": "none"}, {})["tool_choice"] == "auto"


def test_a_chunk_with_a_null_error_field_is_not_an_error() -> None:
    from ctxwarden.proxy.sse import SSESplitter, encode_event
    from ctxwarden.proxy.stream_filters import ChatFilter

    flt = ChatFilter()
    choice = {"index": 0, "delta": {"content": "x"}, "finish_reason": None}
    chunk = {"id": "c", "error": None, "choices": [choice]}
    for event in SSESplitter().feed(encode_event(chunk)):
        flt.process(event)
    assert not flt.errored


async def _visible(proxy: Proxy, api: str, ref: str, stream: bool) -> tuple[list[str], str]:
    """``(the texts the client sees, in order, as the SDK parses them; the stop or finish
    reason)`` of one request through the recall loop."""
    prompt = _placeholder(ref)
    if api == "chat":
        choice = await _chat(proxy, ref, stream=stream)
        assert not choice.message.tool_calls
        return [choice.message.content], choice.finish_reason
    if api == "responses":
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url,
                                      max_retries=0) as c:  # fmt: skip
            if stream:
                async with c.responses.stream(model="gpt-4o", input=prompt) as s:
                    response = await s.get_final_response()
            else:
                response = await c.responses.create(model="gpt-4o", input=prompt)
        assert [i.type for i in response.output] == ["message", "message"]
        texts = [p.text for i in response.output if i.type == "message" for p in i.content
                 if p.type == "output_text"]  # fmt: skip
        return texts, str(response.status)
    messages = [{"role": "user", "content": prompt}]
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as a:
        if stream:
            async with a.messages.stream(model="claude-opus-5", max_tokens=64, messages=messages,
                                         tools=tools) as s:  # fmt: skip
                message = await s.get_final_message()
        else:
            message = await a.messages.create(
                model="claude-opus-5", max_tokens=64, messages=messages, tools=tools
            )
    assert [b.type for b in message.content] == ["text", "text"]
    return [b.text for b in message.content if b.type == "text"], str(message.stop_reason)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_rounds_text_before_its_recall_call_stays_streamed_or_not(
    proxy: Proxy, api: str, stream: bool
) -> None:
    """What the model wrote before calling recall reaches the client with the final
    answer, whole or streamed alike (a stream cannot take it back, and a whole answer
    used to drop it); the recall call itself is never shown."""
    ref = _store(proxy)
    call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_r")
    proxy.fake.script(Reply(text="Let me look.", tool_calls=[call]), Reply(text=FINAL))
    texts, reason = await _visible(proxy, api, ref, stream)
    wanted = {
        "chat": (["Let me look." + FINAL], "stop"),  # one message: the deltas joined
        "responses": (["Let me look.", FINAL], "completed"),
        "messages": (["Let me look.", FINAL], "end_turn"),
    }[api]
    assert (texts, reason) == wanted
    continuation = proxy.fake.received[-1].json()
    assert RECALL_TOOL_NAME in orjson.dumps(continuation).decode()  # the model saw its call
    assert proxy.recorder.last(route=api)["recall_rounds"] == 1


async def test_text_of_every_round_stays_when_the_round_limit_strips_a_call(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(max_recall_rounds=1) as proxy:
        ref = _store(proxy)
        call = ToolCall(RECALL_TOOL_NAME, {"ref": ref})
        proxy.fake.default = Reply(text="still thinking.", tool_calls=[call])
        for stream in (False, True):
            choice = await _chat(proxy, ref, stream=stream)
            assert choice.message.content == "still thinking." * 2
            assert not choice.message.tool_calls and choice.finish_reason == "stop"


@pytest.mark.parametrize(
    ("thinking", "injected"),
    [
        (None, True),
        ({"type": "disabled"}, True),
        ({"type": "enabled", "budget_tokens": 2048}, False),
        ({"type": "adaptive"}, False),
    ],
)
def test_no_recall_tool_for_a_messages_request_that_asks_for_thinking(
    thinking: dict[str, Any] | None, injected: bool
) -> None:
    # its recall rounds would be spliced into one assistant message, and signed
    # thinking blocks come back valid only in the message they were produced in
    request: dict[str, Any] = {
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
    }  # fmt: skip
    if thinking is not None:
        request["thinking"] = thinking
    out = DIALECTS["anthropic.messages"].inject(request)
    assert (out is not None) is injected
    if out is not None:
        assert [t["name"] for t in out["tools"]] == ["bash", RECALL_TOOL_NAME]


@pytest.mark.parametrize(
    ("model", "injected"),
    [("claude-opus-5", True), ("claude-opus-4-1-20250805", True), ("claude-fable-5-1", False),
     ("claude-opus-5-5", False), ("claude-from-next-year", False), (None, False)],
)  # fmt: skip
def test_no_recall_tool_for_a_model_that_binds_thinking_asked_or_not(
    model: str | None, injected: bool
) -> None:
    # a binding model may think unasked (Claude Opus 5.5 always does): the choice goes
    # by the model alone, so the agent's tool list is the same on every turn
    request: dict[str, Any] = {
        "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
    }  # fmt: skip
    if model is not None:
        request["model"] = model
    assert (DIALECTS["anthropic.messages"].inject(request) is not None) is injected
