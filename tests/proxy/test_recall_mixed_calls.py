"""A recall call next to the client's own calls, and the client's next request.

The proxy cannot finish a recall round while the client owes its own calls an answer:
it hands the client's calls back and hides the recall calls. Chat and Messages
clients resend their history, which then simply has no recall call. A Responses
client continuing a stored response (``previous_response_id``) cannot: the stored
response holds the recall calls, and OpenAI refuses a continuation that leaves one
unanswered ("No tool output found for function call ..."); the fake upstream checks
it as OpenAI does.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import pytest

from ctxwarden.proxy import RECALL_TOOL_NAME, FakeUpstream, Reply, ToolCall
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, openai_client, respond

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3 secret-beta\nline 4"
READ_ARGS = {"path": "a.py"}
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
]
RESPONSES_TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
MESSAGES_TOOLS: Any = [{"name": "read", "input_schema": {"type": "object"}}]


def _ref(proxy: Proxy) -> str:
    return proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)


def _prompt(ref: str) -> str:
    return f"[output elided by ctxwarden: 4 lines; recall {ref}] read a.py too"


def _mixed(ref: str, text: str = "") -> Reply:
    """One answer calling recall and the client's ``read`` tool."""
    calls = [ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1"),
             ToolCall("read", READ_ARGS, "call_read_1")]  # fmt: skip
    return Reply(text=text, tool_calls=calls)


def _calls(items: list[Any]) -> list[Any]:
    return [i for i in items if isinstance(i, dict) and i.get("type") == "function_call"]


def _outputs(items: list[Any]) -> dict[str, Any]:
    return {
        i["call_id"]: i["output"]
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_continuation_of_a_mixed_answer_is_accepted(
    proxy: Proxy, stream: bool
) -> None:
    ref = _ref(proxy)
    proxy.fake.script(_mixed(ref))
    async with openai_client(proxy) as c:
        first = await respond(c, stream, input=_prompt(ref), tools=RESPONSES_TOOLS)
        # the client gets its own call exactly as the model made it, and no recall call
        calls = [i for i in first.output if i.type == "function_call"]
        assert [(i.name, i.call_id, i.arguments, i.id) for i in calls] == [
            ("read", "call_read_1", '{"path":"a.py"}', f"fc_{len(proxy.fake.received)}_1")
        ]
        given = [{"type": "function_call_output", "call_id": "call_read_1", "output": "print()"}]
        second = await respond(
            c, stream, input=given, previous_response_id=first.id, tools=RESPONSES_TOOLS
        )
    assert second.output_text == "Hello from the fake upstream."
    sent = proxy.fake.received[-1].json()
    assert sent["previous_response_id"] == first.id
    # the recall call the stored response holds is answered, the client's own output kept
    assert _outputs(sent["input"]) == {
        "call_recall_1": ORIGINAL,
        "call_read_1": "print()",
    }
    assert sent["input"][-1] == given[0]


@pytest.mark.parametrize("mixed", [False, True])
async def test_responses_stream_that_showed_output_before_recall_can_be_continued(
    proxy: Proxy, mixed: bool
) -> None:
    """The streamed round that showed text before calling recall keeps its id; the
    stored response of that id ends in the recall call and lacks the later rounds."""
    ref = _ref(proxy)
    recall = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_0")
    final = _mixed(ref, "Now reading.") if mixed else Reply(text="Done.")
    proxy.fake.script(Reply(text="Let me look.", tool_calls=[recall]), final)
    async with openai_client(proxy) as c:
        first = await respond(c, True, input=_prompt(ref), tools=RESPONSES_TOOLS)
        assert first.id == f"resp_fake{len(proxy.fake.received) - 1}"
        later = proxy.fake.received[-1].json()  # the continuation the proxy sent
        if mixed:
            assert [i.name for i in first.output if i.type == "function_call"] == ["read"]
            given: Any = [
                {"type": "function_call_output", "call_id": "call_read_1", "output": "print()"}
            ]
        else:
            given = "thanks"
        second = await respond(
            c, False, input=given, previous_response_id=first.id, tools=RESPONSES_TOOLS
        )
    assert second.output_text == "Hello from the fake upstream."
    sent = proxy.fake.received[-1].json()["input"]
    wanted = {"call_recall_0": ORIGINAL}
    if mixed:
        wanted |= {"call_recall_1": ORIGINAL, "call_read_1": "print()"}
    assert _outputs(sent) == wanted
    # the model also sees what the client saw of the later round
    echoed = proxy.fake.stored[f"resp_fake{len(proxy.fake.received) - 1}"]
    assert [i["call_id"] for i in _calls(echoed)] == [
        "call_recall_0",
        *(["call_recall_1", "call_read_1"] if mixed else []),
    ]
    assert later["input"][-1] == {
        "type": "function_call_output", "call_id": "call_recall_0", "output": ORIGINAL,
    }  # fmt: skip


async def test_responses_recall_stripped_at_the_round_limit_is_answered_next_turn(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(max_recall_rounds=1) as proxy:
        ref = _ref(proxy)
        proxy.fake.default = Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, {"ref": ref})])
        async with openai_client(proxy) as c:
            # the fake calls recall even in the last round, which does not offer it (a
            # model would call the client's tool): stripped, and answered next turn
            first = await c.responses.create(
                model="gpt-4o", input=_prompt(ref), tools=RESPONSES_TOOLS, tool_choice="required"
            )
            assert _calls(first.model_dump()["output"]) == []
            proxy.fake.default = Reply(text="ok")
            second = await c.responses.create(
                model="gpt-4o", input="go on", previous_response_id=first.id
            )
        assert second.output_text == "ok"
        sent = proxy.fake.received[-1].json()["input"]
        assert list(_outputs(sent).values()) == [ORIGINAL]


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_without_store_owe_nothing(proxy: Proxy, stream: bool) -> None:
    """Nothing was stored: the client replays what it saw, which has no recall call."""
    ref = _ref(proxy)
    proxy.fake.script(_mixed(ref))
    async with openai_client(proxy) as c:
        first = await respond(c, stream, input=_prompt(ref), tools=RESPONSES_TOOLS, store=False)
        seen = [i.model_dump(exclude_none=True) for i in first.output]
        output = {"type": "function_call_output", "call_id": "call_read_1", "output": "x"}
        given: Any = [{"role": "user", "content": _prompt(ref)}, *seen, output]
        await respond(c, stream, input=given, tools=RESPONSES_TOOLS, store=False)
    sent = proxy.fake.received[-1].json()
    assert [i["call_id"] for i in _calls(sent["input"])] == ["call_read_1"]
    assert _outputs(sent["input"]) == {"call_read_1": "x"}


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_mixed_answer_gives_the_client_its_call_and_a_valid_history(
    proxy: Proxy, stream: bool
) -> None:
    ref = _ref(proxy)
    proxy.fake.script(_mixed(ref))
    messages: list[Any] = [{"role": "user", "content": _prompt(ref)}]
    async with openai_client(proxy) as c:
        if stream:
            async with c.chat.completions.stream(
                model="gpt-4o", messages=messages, tools=CHAT_TOOLS
            ) as s:
                message = (await s.get_final_completion()).choices[0].message
        else:
            completion = await c.chat.completions.create(
                model="gpt-4o", messages=messages, tools=CHAT_TOOLS
            )
            message = completion.choices[0].message
        assert [
            (t.id, t.function.name, t.function.arguments) for t in message.tool_calls or []
        ] == [("call_read_1", "read", '{"path":"a.py"}')]
        assistant = message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
        for call in assistant["tool_calls"]:  # the stream helper adds parsed arguments
            call["function"].pop("parsed_arguments", None)
        messages += [assistant, {"role": "tool", "tool_call_id": "call_read_1", "content": "x"}]
        await c.chat.completions.create(model="gpt-4o", messages=messages, tools=CHAT_TOOLS)
    sent = proxy.fake.received[-1].json()["messages"]
    calls = [t["id"] for m in sent if m["role"] == "assistant" for t in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert calls == answered == ["call_read_1"]


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_mixed_answer_gives_the_client_its_call_and_a_valid_history(
    proxy: Proxy, stream: bool
) -> None:
    ref = _ref(proxy)
    proxy.fake.script(_mixed(ref))
    messages: list[Any] = [{"role": "user", "content": _prompt(ref)}]
    kwargs: Any = {"model": "claude-opus-5", "max_tokens": 64, "tools": MESSAGES_TOOLS}
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as c:
        if stream:
            async with c.messages.stream(messages=messages, **kwargs) as s:
                message = await s.get_final_message()
        else:
            message = await c.messages.create(messages=messages, **kwargs)
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [(b.id, b.name, b.input) for b in uses] == [("call_read_1", "read", READ_ARGS)]
        assert message.stop_reason == "tool_use"
        content = [b.model_dump(exclude_none=True) for b in message.content]
        result = {"type": "tool_result", "tool_use_id": "call_read_1", "content": "x"}
        messages += [{"role": "assistant", "content": content},
                     {"role": "user", "content": [result]}]  # fmt: skip
        await c.messages.create(messages=messages, **kwargs)
    sent = proxy.fake.received[-1].json()["messages"]
    uses_sent = [b["id"] for b in sent[-2]["content"] if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for b in sent[-1]["content"] if b["type"] == "tool_result"]
    assert uses_sent == results == ["call_read_1"]


async def test_the_fake_refuses_a_continuation_that_leaves_a_call_unanswered(
    fake: FakeUpstream,
) -> None:
    fake.script(Reply(text="", tool_calls=[ToolCall("read", READ_ARGS, "c1")]))
    url = fake.url + "/v1/responses"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"model": "m", "input": "hi"}) as r:
            first = await r.json()
        async with session.post(
            url, json={"model": "m", "input": "more", "previous_response_id": first["id"]}
        ) as r:
            assert r.status == 400
            assert (await r.json())["error"][
                "message"
            ] == "No tool output found for function call c1."
        stray = {"type": "function_call_output", "call_id": "c9", "output": "x"}
        answer = {"type": "function_call_output", "call_id": "c1", "output": "x"}
        async with session.post(
            url, json={"model": "m", "input": [answer, stray], "previous_response_id": first["id"]}
        ) as r:
            assert r.status == 400
        async with session.post(
            url, json={"model": "m", "input": [answer], "previous_response_id": first["id"]}
        ) as r:
            assert r.status == 200
