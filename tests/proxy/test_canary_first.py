"""A request outside the canary is relayed before its condense, with or without a
session header: its side is told off the engine thread (a Responses continuation by
the key remembered, in memory, for the response it continues), so it never waits for
that thread. The engine thread is held on a gate here, so the orderings are
deterministic: every answer below arrives while the gate is still closed.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import Engine, EngineConfig
from ctxwarden.adapters.openai_responses import is_model_item
from ctxwarden.errors import MalformedRequest
from ctxwarden.proxy import KillSwitch, Reply, ToolCall
from ctxwarden.proxy.rollout import canary_head, canary_key, decide, head_canary_key
from tests.proxy.conftest import ProxyFactory
from tests.proxy.gate import Gate, entered
from tests.proxy.test_shadow_background import _post

_ENGINE = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
_TOOLS = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]


def _out(request: dict[str, Any], api: str) -> bool:
    """Whether ``request`` falls outside a 50% canary, bucketed by its own text."""
    key = canary_key(_ENGINE.parse(request, api))
    return decide(kill_switch=KillSwitch(), header=None, server_mode="active",
                  canary_percent=50, session=key).mode == "shadow"  # fmt: skip


_GIVEN: list[Any] = [{"type": "function_call_output", "call_id": "call_read_1", "output": "ok"}]


def _chat_turn_outside() -> dict[str, Any]:
    """A first Chat turn outside a 50% canary."""
    for i in range(1000):
        messages = [{"role": "system", "content": f"agent {i}"},
                    {"role": "user", "content": "fix a.py"}]  # fmt: skip
        request = {"model": "gpt-4o", "messages": messages}
        if _out(request, "openai.chat"):
            return request
    raise AssertionError("no such request")


def _responses_turns() -> tuple[dict[str, Any], dict[str, Any]]:
    """A first Responses turn outside a 50% canary, and its continuation (to be given
    the first answer's id), which bucketed by its own text alone would be inside."""
    for i in range(1000):
        first = {"model": "gpt-4o", "instructions": f"agent {i}", "input": "fix a.py",
                 "tools": _TOOLS}  # fmt: skip
        later = {**first, "input": _GIVEN, "previous_response_id": "unknown"}
        if _out(first, "openai.responses") and not _out(later, "openai.responses"):
            return first, later
    raise AssertionError("no such instructions")


async def test_an_unnamed_chat_session_outside_the_canary_is_relayed_first(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    request = _chat_turn_outside()
    async with make_proxy(canary_percent=50) as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        status, _ = await _post(proxy, orjson.dumps(request))
        assert status == 200
        assert proxy.fake.received[-1].body == orjson.dumps(request)
        await entered(gate)
        assert proxy.recorder.events == []  # its condense still held: the answer came first
        gate.open()
        await proxy.state.drain()
        (event,) = proxy.recorder.events
    assert (event["mode"], event["rollout_reason"]) == ("shadow", "canary_out")
    assert event["tokens_before"] > 0


async def test_a_responses_continuation_outside_the_canary_keeps_its_side_at_once(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    first, later = _responses_turns()
    path = "/v1/responses"
    async with make_proxy(canary_percent=50) as proxy:
        gate = Gate(proxy, monkeypatch)
        opened.append(gate)
        proxy.fake.script(
            Reply(text="", tool_calls=[ToolCall("read", {"path": "a.py"}, "call_read_1")]),
            Reply(text="done"),
        )
        status, answer = await _post(proxy, orjson.dumps(first), path)
        assert status == 200
        await entered(gate)  # the engine thread is held: the key's store write waits too
        later["previous_response_id"] = orjson.loads(answer)["id"]
        # bucketed by its own text, the continuation would be inside, condensed first
        status, _ = await _post(proxy, orjson.dumps(later), path)
        assert status == 200
        assert proxy.recorder.events == []  # both condenses still held: neither waited
        gate.open()
        await proxy.state.drain()
        reasons = [e["rollout_reason"] for e in proxy.recorder.events]
    assert reasons == ["canary_out", "canary_out"]


@pytest.mark.parametrize("api", ["openai.chat", "anthropic.messages", "openai.responses"])
def test_the_head_of_a_history_gives_the_key_of_the_whole(api: str) -> None:
    if api == "openai.responses":
        items: list[Any] = [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": "fix a.py"},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
            {"role": "user", "content": "and b.py"},
        ]
        request: dict[str, Any] = {"model": "m", "instructions": "agent", "input": items}
        cut = 3
    else:
        first = "assistant"
        items = [
            {"role": "user", "content": "fix a.py"},
            {"role": "user", "content": "quickly"},
            {"role": first, "content": "ok"},
            {"role": "user", "content": "and b.py"},
        ]
        request = {"model": "m", "messages": items, "max_tokens": 10}
        if api == "openai.chat":
            items.insert(0, {"role": "system", "content": "agent"})
        else:
            request["system"] = "agent"
        cut = 4 if api == "openai.chat" else 3
    head = canary_head(request, api)
    key = "input" if api == "openai.responses" else "messages"
    assert len(head[key]) == cut and head[key] == request[key][:cut]
    assert canary_key(_ENGINE.parse(head, api)) == canary_key(_ENGINE.parse(request, api))
    # a later user message does not change the key (it is past the first reply)
    longer = {**request, key: [*request[key], {"role": "user", "content": "more"}]}
    assert canary_key(_ENGINE.parse(canary_head(longer, api), api)) == canary_key(
        _ENGINE.parse(request, api)
    )


_KINDS = st.sampled_from([None, "message", "function_call", "custom_tool_call", "reasoning",
                          "function_call_output", "custom_tool_call_output", "computer_call",
                          "web_search_call", "item_reference", "mcp_approval_response",
                          "shell_call", "shell_call_output", "apply_patch_call",
                          "apply_patch_call_output", "program", "compaction",
                          "something_new"])  # fmt: skip
_ROLES = st.sampled_from([None, "user", "assistant", "system", "developer", 3])


@given(kind=_KINDS, role=_ROLES, call_id=st.sampled_from(["c1", None]))
def test_is_model_item_agrees_with_the_parse(kind: str | None, role: Any, call_id: Any) -> None:
    item: dict[str, Any] = {"content": "x", "call_id": call_id, "name": "read", "arguments": "{}",
                            "output": "y", "input": "z", "summary": [], "id": "i1"}  # fmt: skip
    if kind is not None:
        item["type"] = kind
    if role is not None:
        item["role"] = role
    try:
        conversation = _ENGINE.parse({"model": "m", "input": [item]}, "openai.responses")
    except MalformedRequest:
        return  # the whole request is refused: the head's cut does not matter
    assert is_model_item(item) is (conversation.messages[0].role == "assistant")


async def test_a_responses_request_the_engine_reads_is_relayed_under_any_canary(
    make_proxy: ProxyFactory,
) -> None:
    # an item_reference lifts the pairing check of the whole list; the head alone, cut
    # before it, would be refused: the key then comes from the whole
    request = {"model": "gpt-4o", "input": [
        {"role": "user", "content": "go on"},
        {"type": "function_call_output", "call_id": "call_up", "output": "ok"},
        {"role": "assistant", "content": "noted"},
        {"type": "item_reference", "id": "msg_123"},
        {"role": "user", "content": "next"},
    ]}  # fmt: skip
    for percent in (100, 50, 0):
        async with make_proxy(canary_percent=percent) as proxy:
            status, body = await _post(proxy, orjson.dumps(request), "/v1/responses")
            await proxy.state.drain()
        assert status == 200, (percent, body[:200])


_TEXTS = st.sampled_from(["a", "b", "fix", ""])
_ROLES_ANY = st.sampled_from(["user", "assistant", "system", "developer", "tool", "function", 3])
_IDS = st.sampled_from(["c1", "c2"])


def _chat_items() -> st.SearchStrategy[Any]:
    part = st.fixed_dictionaries({"type": st.just("text"), "text": _TEXTS})
    content = st.one_of(_TEXTS, st.none(), st.lists(part, max_size=2))
    function = st.just({"name": "f", "arguments": "{}"})
    call = st.fixed_dictionaries({"id": _IDS, "type": st.just("function"), "function": function})
    calls = st.lists(call, min_size=1, max_size=2)
    return st.one_of(
        st.fixed_dictionaries({"role": _ROLES_ANY, "content": content}),
        st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": _IDS, "content": _TEXTS}),
        st.fixed_dictionaries(
            {"role": st.just("assistant"), "content": st.none(), "tool_calls": calls}
        ),
    )


def _anthropic_items() -> st.SearchStrategy[Any]:
    text = st.fixed_dictionaries({"type": st.just("text"), "text": _TEXTS})
    use = st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": _IDS, "name": st.just("f"), "input": st.just({})}
    )
    result = st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": _IDS, "content": _TEXTS}
    )
    blocks = st.lists(st.one_of(text, use, result), max_size=3)
    return st.fixed_dictionaries({"role": _ROLES_ANY, "content": st.one_of(_TEXTS, blocks)})


def _responses_items() -> st.SearchStrategy[Any]:
    def build(kind: Any, role: Any, call_id: str, text: str) -> dict[str, Any]:
        item: dict[str, Any] = {"content": text, "call_id": call_id, "name": "f", "id": "i1",
                                "arguments": "{}", "output": text, "summary": []}  # fmt: skip
        if kind is not None:
            item["type"] = kind
        if role is not None:
            item["role"] = role
        return item

    return st.builds(build, _KINDS, _ROLES, _IDS, _TEXTS)


def _requests(api: str) -> st.SearchStrategy[dict[str, Any]]:
    if api == "openai.chat":
        chat = st.lists(_chat_items(), max_size=7)
        return st.builds(lambda m: {"model": "m", "messages": m}, chat)
    if api == "anthropic.messages":
        anthropic = st.lists(_anthropic_items(), max_size=7)
        return st.builds(lambda m, s: {"model": "m", "messages": m, "system": s}, anthropic, _TEXTS)
    items = st.one_of(st.lists(_responses_items(), max_size=7), _TEXTS)
    return st.builds(lambda i, s: {"model": "m", "input": i, "instructions": s}, items, _TEXTS)


@pytest.mark.parametrize("api", ["openai.chat", "anthropic.messages", "openai.responses"])
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_key_from_the_head_is_the_key_of_the_whole(api: str, data: st.DataObject) -> None:
    request = data.draw(_requests(api))
    try:
        whole = canary_key(_ENGINE.parse(request, api))
    except MalformedRequest:
        return  # refused whole: the proxy answers 400 or relays it, whatever its key
    assert head_canary_key(_ENGINE.parse, request, api) == whole


@pytest.mark.parametrize(
    "body",
    [b'{"model":"gpt-4o","messages":[{"role":"tool","content":"x"}]}', b"not json", b"[1, 2]"],
)
@pytest.mark.parametrize("percent", [0, 0.0])
async def test_a_zero_canary_relays_a_request_whose_key_cannot_be_read(
    make_proxy: ProxyFactory, percent: float, body: bytes
) -> None:
    # no session is inside a 0% canary, so a request whose head the engine cannot read
    # (or that is no JSON object at all) is outside too: relayed as sent for the
    # upstream to judge, not refused with 400
    async with make_proxy(canary_percent=percent) as proxy:
        status, _answer = await _post(proxy, body)
        await proxy.state.drain()
        assert proxy.fake.received and proxy.fake.received[-1].body == body
        (event,) = proxy.recorder.events
    assert status == 400  # the upstream's refusal, relayed
    assert (event["mode"], event["rollout_reason"]) == ("shadow", "canary_out")


async def test_a_partial_canary_relays_a_request_the_engine_cannot_read(
    make_proxy: ProxyFactory,
) -> None:
    """Inside or outside the canary, a request the adapters find malformed goes to the
    upstream as sent (it judges it: an API accepts more than the adapters read)."""
    body = b'{"model":"gpt-4o","messages":[{"role":"tool","content":"x"}]}'
    async with make_proxy(canary_percent=50) as proxy:
        status, answer = await _post(proxy, body)
        assert proxy.fake.received and proxy.fake.received[-1].body == body
    assert status == 400 and "tool call" in str(answer)


def _conversation_turns() -> tuple[str, list[dict[str, Any]]]:
    """A conversation id inside a 50% canary and two of its turns whose own inputs,
    bucketed by their text, would fall on different sides."""
    from ctxwarden.proxy.rollout import conversation_canary_key

    turns: list[dict[str, Any]] = []
    for i in range(1000):
        request = {"model": "gpt-4o", "input": f"step {i}", "conversation": "conv_x"}
        if not turns or _out(request, "openai.responses") != _out(turns[0], "openai.responses"):
            turns.append(request)
        if len(turns) == 2:
            break
    for j in range(1000):
        conversation = f"conv_{j}"
        key = conversation_canary_key({"conversation": {"id": conversation}}, "openai.responses")
        assert key is not None
        inside = decide(kill_switch=KillSwitch(), header=None, server_mode="active",
                        canary_percent=50, session=key).mode == "active"  # fmt: skip
        if inside:
            return conversation, turns
    raise AssertionError("no such conversation")


@pytest.mark.parametrize("as_object", [False, True])
async def test_every_turn_of_a_stored_conversation_stays_on_its_side(
    make_proxy: ProxyFactory, as_object: bool
) -> None:
    conversation, turns = _conversation_turns()
    named: Any = {"id": conversation} if as_object else conversation
    async with make_proxy(canary_percent=50) as proxy:
        for turn in turns:
            body = orjson.dumps({**turn, "conversation": named})
            status, _answer = await _post(proxy, body, "/v1/responses")
            assert status == 200
        await proxy.state.drain()
        sides = [(e["mode"], e["rollout_reason"]) for e in proxy.recorder.events]
    assert sides == [("active", "canary_in")] * 2


@pytest.mark.parametrize("whole_limit", [0, 8 * 1024 * 1024])
async def test_a_responses_answer_streamed_through_keeps_its_canary_key(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, whole_limit: int
) -> None:
    # a JSON answer over the whole-read limit streams to the client unparsed: its id,
    # the first key, is still found, so its continuation keeps the session's side
    import ctxwarden.proxy.relay as relay

    monkeypatch.setattr(relay, "WHOLE_JSON_BYTES", whole_limit)
    first, _later = _responses_turns()
    async with make_proxy(canary_percent=50) as proxy:
        status, answer = await _post(proxy, orjson.dumps(first), "/v1/responses")
        await proxy.state.drain()
        remembered = {rid: key for (_tenant, rid), key in proxy.state.canary_keys.items()}
    assert status == 200
    response_id = orjson.loads(answer)["id"]
    assert remembered == {response_id: canary_key(_ENGINE.parse(first, "openai.responses"))}


@pytest.mark.parametrize(
    ("head", "found"),
    [
        (b'{"id":"resp_1","object":"response"}', "resp_1"),
        (b' \n{\n  "id" : "resp_2",', "resp_2"),
        (b'{"object":"response","id":"resp_3"}', None),  # not the first key
        (b'{"id":"resp_\\u0034"}', None),  # an escape: left to a real parse
        (b'{"id":"resp_4', None),  # not ended yet
    ],
)
def test_the_leading_id_is_read_only_from_the_first_key(head: bytes, found: str | None) -> None:
    from ctxwarden.proxy.relay import _leading_id

    rest, got = _leading_id(head)
    assert got == found
    assert (rest is None) == (found is not None)
