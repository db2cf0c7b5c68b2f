"""Tool results must answer a call; what counts as one, and when calls live upstream."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.errors import MalformedRequest
from tests.passes.convo import FORCE, call, lines_of, make_engine, result


def _custom_call_chat() -> dict[str, Any]:
    custom = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": "x"}}
    return {
        "model": "gpt-5",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": None, "tool_calls": [custom]},
            result("call_1", lines_of("patched", 80)),
            call("call_2", "ls"),
            result("call_2", "a.py"),
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ],
    }


def test_a_custom_tool_call_is_a_call_its_result_answers() -> None:
    conversation = get_adapter("openai.chat").parse(_custom_call_chat())
    (call,) = conversation.messages[2].tool_calls
    where = ("messages", 2, "tool_calls", 0, "custom", "input")  # its text, as in Responses
    assert (call.call_id, call.name, call.arguments_path) == ("call_1", "apply_patch", where)


def test_a_small_custom_tool_call_is_sent_exactly_while_its_output_is_condensed() -> None:
    wire = _custom_call_chat()
    res = make_engine("aggressive", FORCE).condense(wire, session="s")
    assert res.report["fallback_reason"] is None
    assert res.request["messages"][2] == wire["messages"][2]
    assert res.request["messages"][3] != wire["messages"][3]


_OUTPUT = {"type": "function_call_output", "call_id": "c9", "output": "ok"}


@pytest.mark.parametrize(
    "extra",
    [
        {"previous_response_id": "resp_1"},
        {"conversation": "conv_1"},
        {"input": [{"type": "item_reference", "id": "fc_1"}, _OUTPUT]},
    ],
    ids=["previous_response_id", "conversation", "item_reference"],
)
def test_responses_outputs_may_answer_calls_held_upstream(extra: dict[str, Any]) -> None:
    wire = {"model": "gpt-5", "input": [_OUTPUT], **extra}
    conversation = get_adapter("openai.responses").parse(wire)
    assert conversation.messages[-1].tool_results[0].call_id == "c9"


def test_responses_output_without_any_call_is_still_malformed() -> None:
    with pytest.raises(MalformedRequest) as info:
        get_adapter("openai.responses").parse({"model": "gpt-5", "input": [_OUTPUT]})
    assert info.value.pointer == "/input/0/call_id"
