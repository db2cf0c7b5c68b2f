"""Thinking blocks left out of a request (``ctxwarden.pipeline.thinking``) and the
session state that keeps them out (``SessionState.dropped_thinking``)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.errors import ValidationFailed
from ctxwarden.pipeline.state import SessionState
from ctxwarden.pipeline.thinking import (
    block_key,
    drop_thinking,
    droppable_from,
    opens_user_turn,
    thinking_keys,
)


def _thought(k: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"t{k}", "signature": f"s{k}"}


def _request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-fable-5-1", "max_tokens": 8, "messages": list(messages)}


def _parse(request: dict[str, Any]) -> Any:
    return get_adapter("anthropic.messages").parse(request)


USER = {"role": "user", "content": "go"}
CALL = {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}


def test_the_blocks_named_are_left_out_of_a_copy() -> None:
    request = _request(
        USER,
        {"role": "assistant", "content": [_thought(0), CALL]},
        RESULT,
        {"role": "assistant", "content": [_thought(1), {"type": "redacted_thinking", "data": "d"},
                                          {"type": "text", "text": "ok"}]},
        {"role": "user", "content": "next"},
    )  # fmt: skip
    before = copy.deepcopy(request)
    keys = set(thinking_keys(request, "messages", 2))
    assert len(keys) == 2 and block_key(_thought(0)) not in keys
    out, dropped = drop_thinking(request, keys)
    assert len(dropped) == 2 and request == before  # the input is not changed
    assert out["messages"][:3] == request["messages"][:3]  # the others: as they were
    assert out["messages"][3]["content"] == [{"type": "text", "text": "ok"}]
    assert out["messages"][1] is request["messages"][1]  # shared where untouched
    assert drop_thinking(request, {"unknown"}) == (request, [])  # nothing to leave out


def test_a_drop_that_would_empty_a_message_is_refused() -> None:
    request = _request(USER, {"role": "assistant", "content": [_thought(0)]}, USER)
    with pytest.raises(ValidationFailed, match="empty"):
        drop_thinking(request, {block_key(_thought(0)) or ""})


def test_keys_are_made_of_signatures_and_redacted_data_only() -> None:
    assert block_key(_thought(0)) != block_key(_thought(1))
    assert block_key({"type": "redacted_thinking", "data": "d"}) is not None
    assert block_key({"type": "thinking", "thinking": "x"}) is None  # unsigned
    assert block_key({"type": "text", "text": "s0"}) is None


def test_thinking_may_be_left_out_only_after_a_message_of_thinking_alone() -> None:
    plain = _request(USER, {"role": "assistant", "content": [_thought(0), CALL]}, RESULT, USER)
    assert droppable_from(_parse(plain)) == 0
    alone = _request(
        USER, {"role": "assistant", "content": [_thought(0)]}, USER,
        {"role": "assistant", "content": [_thought(1), CALL]}, RESULT,
    )  # fmt: skip
    assert droppable_from(_parse(alone)) == 2


@pytest.mark.parametrize(
    ("last", "opens"),
    [(USER, True), ({"role": "user", "content": [{"type": "text", "text": "hi"}]}, True),
     (RESULT, False), ("result_then_text", False)],
)  # fmt: skip
def test_a_user_turn_opens_with_a_user_message_without_tool_results(last: Any, opens: bool) -> None:
    messages = [USER, {"role": "assistant", "content": [_thought(0), CALL]}, RESULT]
    if last == "result_then_text":  # still the tool call's turn: the API joins the two
        messages.append(USER)
    elif last is not RESULT:
        messages += [{"role": "assistant", "content": [{"type": "text", "text": "done"}]}, last]
    assert opens_user_turn(_parse(_request(*messages))) is opens


def test_the_state_keeps_its_drops_and_refuses_damaged_ones() -> None:
    state = SessionState(dropped_thinking=["abc", "def"])
    assert SessionState.decode(state.encode()).dropped_thinking == ["abc", "def"]
    assert b"dropped_thinking" not in SessionState().encode()  # absent when none
    for bad in ([1], "abc", {"a": 1}):
        data = orjson.loads(state.encode())
        data["dropped_thinking"] = bad
        assert SessionState.decode(orjson.dumps(data)) == SessionState()  # a fresh state
