"""The fake upstream's thinking blocks and Anthropic's signature checks on them.

The proxy's tests lean on these checks to prove it never makes Anthropic refuse a
request: a block sent back is refused when its text changed (every model), or, for a
model binding thinking to its prefix, when ``system``, ``tools`` or anything before it
changed by value (cache markers, formatting and key order do not count).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from ctxwarden.proxy.block_binding import BETA
from ctxwarden.proxy.fake_thinking import SIGNATURE_PREFIX, sign, thinking_error
from ctxwarden.proxy.fake_upstream import FakeUpstream, Reply, ToolCall

BINDING = ["claude-fable-5-1", "claude-opus-5-5"]
NOT_BINDING = ["claude-opus-4-1", "claude-sonnet-4-5"]
TOOLS = [
    {
        "name": "read",
        "description": "Read a file (caf\u00e9).",  # sent escaped or not
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
SYSTEM = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
FIRST_THOUGHT = "Read a.py first."
SECOND_THOUGHT = "The file prints hi."
READ = ToolCall("read", {"path": "a.py"}, "c1")


def bound_message(n: int, m: int) -> str:
    return (
        f"messages.{n}.content.{m}: Invalid `signature` in `thinking` block. The block is "
        "bound to a different conversation. Remove the block, or set "
        '`thinking.block_binding.prefix_mismatch_behavior` to "drop_block".'
    )


def body(model: str, messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 256, "system": SYSTEM, "tools": TOOLS,
            "thinking": THINKING, "messages": messages, **extra}  # fmt: skip


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post(
    session: aiohttp.ClientSession, fake: FakeUpstream, payload: Any, raw: bytes | None = None,
    beta: str | None = None,
) -> tuple[int, Any]:  # fmt: skip
    data = orjson.dumps(payload) if raw is None else raw
    headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
    if beta is not None:
        headers["anthropic-beta"] = beta
    async with session.post(f"{fake.url}/v1/messages", data=data, headers=headers) as resp:
        return resp.status, await resp.json()


def tool_result(text: str) -> dict[str, Any]:
    return {"role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": text}]}  # fmt: skip


async def history(session: aiohttp.ClientSession, fake: FakeUpstream, model: str) -> list[Any]:
    """Two answered turns: 0 user, 1 assistant [thinking, tool_use], 2 user
    [tool_result], 3 assistant [thinking, text], 4 user."""
    fake.script(
        Reply(text="", thinking=FIRST_THOUGHT, tool_calls=[READ]),
        Reply(text="It prints hi.", thinking=SECOND_THOUGHT),
    )  # fmt: skip
    messages: list[Any] = [{"role": "user", "content": "What does a.py do?"}]
    status, first = await post(session, fake, body(model, messages))
    assert status == 200, first
    messages += [{"role": "assistant", "content": first["content"]}, tool_result("print('hi')")]
    status, second = await post(session, fake, body(model, messages))
    assert status == 200, second
    messages += [{"role": "assistant", "content": second["content"]},
                 {"role": "user", "content": "And b.py?"}]  # fmt: skip
    return messages


async def test_a_thinking_reply_starts_with_a_signed_thinking_block(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script(Reply(text="", thinking="Hmm.", tool_calls=[ToolCall("read", {}, "c1")]))
    payload = body("claude-fable-5-1", [{"role": "user", "content": "hi"}])
    status, answer = await post(session, fake, payload)
    assert status == 200
    thinking, tool_use = answer["content"]
    assert thinking == {"type": "thinking", "thinking": "Hmm.", "signature": sign(payload, "Hmm.")}
    assert thinking["signature"].startswith(SIGNATURE_PREFIX)
    assert tool_use["type"] == "tool_use" and answer["stop_reason"] == "tool_use"


async def test_the_stream_sends_thinking_deltas_then_the_signature(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script(Reply(text="Done.", thinking="Two words."))
    payload = body("claude-opus-5-5", [{"role": "user", "content": "hi"}], stream=True)
    headers = {"anthropic-version": "2023-06-01"}
    async with session.post(f"{fake.url}/v1/messages", json=payload, headers=headers) as resp:
        raw = await resp.read()
    events = [
        orjson.loads(line[len(b"data: ") :])
        for line in raw.split(b"\n")
        if line.startswith(b"data: ")
    ]
    blocks = [e for e in events if e["type"].startswith("content_block")]
    empty = {"type": "thinking", "thinking": "", "signature": ""}
    assert blocks[0] == {"type": "content_block_start", "index": 0, "content_block": empty}
    deltas = [e["delta"] for e in blocks if e["type"] == "content_block_delta" and e["index"] == 0]
    assert "".join(d["thinking"] for d in deltas[:-1]) == "Two words."
    assert {d["type"] for d in deltas[:-1]} == {"thinking_delta"}
    assert deltas[-1] == {"type": "signature_delta", "signature": sign(payload, "Two words.")}
    stops = [e["index"] for e in blocks if e["type"] == "content_block_stop"]
    assert stops == [0, 1]
    assert [e["content_block"]["type"] for e in blocks if e["type"] == "content_block_start"] == [
        "thinking",
        "text",
    ]


async def test_chat_and_responses_ignore_thinking(
    fake: FakeUpstream, session: aiohttp.ClientSession
) -> None:
    fake.script(Reply(text="a", thinking="x"), Reply(text="b", thinking="y"))
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    async with session.post(f"{fake.url}/v1/chat/completions", json=chat) as resp:
        assert (await resp.json())["choices"][0]["message"]["content"] == "a"
    async with session.post(f"{fake.url}/v1/responses", json={"input": "hi"}) as resp:
        output = (await resp.json())["output"]
    assert [item["type"] for item in output] == ["message"]


@pytest.mark.parametrize("model", BINDING + NOT_BINDING)
async def test_history_sent_back_unchanged_is_accepted(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    status, _ = await post(session, fake, body(model, messages))
    assert status == 200
    sent = fake.received[-1].json()["messages"]
    assert [sent[1]["content"][0]["thinking"], sent[3]["content"][0]["thinking"]] == [
        FIRST_THOUGHT,
        SECOND_THOUGHT,
    ]


@pytest.mark.parametrize("model", BINDING[:1] + NOT_BINDING[:1])
async def test_streamed_blocks_round_trip_through_the_sdk(fake: FakeUpstream, model: str) -> None:
    fake.script(
        Reply(text="", thinking=FIRST_THOUGHT, tool_calls=[READ]),
        Reply(text="It prints hi.", thinking=SECOND_THOUGHT),
        Reply(text="b.py is empty."),
    )  # fmt: skip
    messages: list[Any] = [{"role": "user", "content": "What does a.py do?"}]
    extra: dict[str, Any] = {"system": SYSTEM, "tools": TOOLS, "thinking": THINKING}
    async with anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0) as client:
        for reply in (tool_result("print('hi')"), {"role": "user", "content": "And b.py?"}):
            async with client.messages.stream(
                model=model, max_tokens=256, messages=messages, **extra
            ) as stream:
                final = await stream.get_final_message()
            assert final.content[0].type == "thinking"
            assert final.content[0].signature.startswith(SIGNATURE_PREFIX)
            messages += [{"role": "assistant", "content": final.content}, reply]
        async with client.messages.stream(
            model=model, max_tokens=256, messages=messages, **extra
        ) as stream:
            final = await stream.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text == "b.py is empty."
    sent = fake.received[-1].json()["messages"]
    assert sent[1]["content"][0]["thinking"] == FIRST_THOUGHT
    assert sent[3]["content"][0]["thinking"] == SECOND_THOUGHT
    assert thinking_error(fake.received[-1].json(), binds=True) is None


@pytest.mark.parametrize("model", BINDING + NOT_BINDING)
async def test_an_earlier_tool_result_changed_unbinds_the_later_block(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    messages[2] = tool_result("print('bye')")
    status, answer = await post(session, fake, body(model, messages))
    if model in BINDING:
        assert status == 400
        assert answer == {"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": bound_message(3, 0)}}  # fmt: skip
    else:
        assert status == 200, answer
    assert len(fake.received) == 3  # a refused request is recorded too
    assert fake.received[-1].finished


@pytest.mark.parametrize("model", BINDING)
async def test_the_first_failing_block_is_named(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    payload = body(model, messages, system="Be verbose.")
    status, answer = await post(session, fake, payload)
    assert (status, answer["error"]["message"]) == (400, bound_message(1, 0))


@pytest.mark.parametrize("model", BINDING)
async def test_changes_after_a_block_do_not_unbind_it(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = (await history(session, fake, model))[:3]  # the first block only
    messages[1]["content"][1]["input"] = {"path": "b.py"}  # after it in its message
    messages[2] = tool_result("print('bye')")
    assert (await post(session, fake, body(model, messages)))[0] == 200
    full = await history(session, fake, model)
    full[4] = {"role": "user", "content": [{"type": "text", "text": "And c.py?"}]}
    full[3]["content"][1]["text"] = "It prints hello."  # after the second block
    assert (await post(session, fake, body(model, full)))[0] == 200


@pytest.mark.parametrize("model", BINDING)
async def test_cache_markers_added_moved_or_removed_are_ignored(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    marker = {"type": "ephemeral", "ttl": "1h"}
    moved = copy.deepcopy(messages)
    moved[2]["content"][0]["cache_control"] = marker
    moved[1]["content"][1]["cache_control"] = marker
    block = {"type": "text", "text": "What does a.py do?", "cache_control": marker}
    moved[0] = {"role": "user", "content": [block]}
    tools = [{**TOOLS[0], "cache_control": marker}]
    system = [{"type": "text", "text": "Be brief."}]
    payload = body(model, moved, tools=tools, system=system)
    status, answer = await post(session, fake, payload)
    # content given as a string and as one text block are different values here
    assert (status, answer["error"]["message"]) == (400, bound_message(1, 0))
    moved[0] = messages[0]
    status, answer = await post(session, fake, body(model, moved, tools=tools, system=system))
    assert status == 200, answer


def _reordered(value: Any) -> Any:
    """``value`` with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@pytest.mark.parametrize("model", BINDING)
async def test_key_order_and_whitespace_do_not_count(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)  # sent as orjson writes it
    raw = json.dumps(_reordered(body(model, messages)), indent=3, ensure_ascii=True).encode()
    status, answer = await post(session, fake, None, raw=raw)
    assert status == 200, answer


@pytest.mark.parametrize("model", BINDING)
async def test_drop_block_accepts_an_unbound_block(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    messages[2] = tool_result("print('bye')")
    thinking = {**THINKING, "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    beta = f"other-2026-01-01, {BETA}"
    status, answer = await post(session, fake, body(model, messages, thinking=thinking), beta=beta)
    assert status == 200, answer
    error = {**THINKING, "block_binding": {"prefix_mismatch_behavior": "error"}}
    assert (await post(session, fake, body(model, messages, thinking=error), beta=beta))[0] == 400
    # the setting needs its beta value, as Anthropic's does
    status, answer = await post(session, fake, body(model, messages, thinking=thinking))
    assert (status, answer["error"]["message"]) == (
        400,
        "thinking.block_binding: Extra inputs are not permitted",
    )


@pytest.mark.parametrize("model", BINDING + NOT_BINDING)
async def test_modified_thinking_text_is_refused_for_every_model(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    messages[3]["content"][0]["thinking"] = "The file prints bye."
    thinking = {**THINKING, "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    for payload in (body(model, messages), body(model, messages, thinking=thinking)):
        status, answer = await post(session, fake, payload, beta=BETA)
        assert status == 400
        assert answer["error"]["type"] == "invalid_request_error"
        assert answer["error"]["message"] == (
            "messages.3.content.0: `thinking` or `redacted_thinking` blocks in the latest "
            "assistant message cannot be modified. These blocks must remain as they were "
            "in the original response."
        )


@pytest.mark.parametrize("model", BINDING + NOT_BINDING)
async def test_a_tool_appended_unbinds_every_block(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    tools = [*TOOLS, {"name": "write", "input_schema": {"type": "object"}}]
    status, answer = await post(session, fake, body(model, messages, tools=tools))
    if model in BINDING:
        assert (status, answer["error"]["message"]) == (400, bound_message(1, 0))
    else:
        assert status == 200, answer


@pytest.mark.parametrize("model", BINDING)
async def test_signatures_the_fake_did_not_make_are_not_checked(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages = await history(session, fake, model)
    messages[3]["content"][0] = {"type": "thinking", "thinking": "x", "signature": "EqQBCgIYAh"}
    messages[1]["content"][0] = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}
    messages[2] = tool_result("print('bye')")
    assert (await post(session, fake, body(model, messages)))[0] == 200


@pytest.mark.parametrize("model", BINDING)
async def test_a_redacted_block_the_fake_signed_is_bound_too(
    fake: FakeUpstream, session: aiohttp.ClientSession, model: str
) -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    data = sign(body(model, messages), "")
    messages += [
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": data},
                                          {"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "more"},
    ]  # fmt: skip
    assert (await post(session, fake, body(model, messages)))[0] == 200
    messages[0]["content"] = "hi!"
    status, answer = await post(session, fake, body(model, messages))
    assert (status, answer["error"]["message"]) == (400, bound_message(1, 0))
