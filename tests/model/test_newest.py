"""The newest messages, which stay exact: after the last assistant message, or, when a
request ends with an assistant prefill, from the assistant message before it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.adapters import get_adapter
from ctxwarden.model.conversation import newest_start
from tests.passes.convo import FORCE, call, make_engine, result

_roles = st.lists(st.sampled_from(["system", "user", "assistant", "tool"]), max_size=12)


@given(roles=_roles)
def test_newest_messages_hold_the_whole_last_turn(roles: list[str]) -> None:
    start = newest_start(roles)
    tail = roles[start:]
    # the client's turn, then at most a prefill: no assistant message before a non-one
    first_prefill = next((i for i, r in enumerate(tail) if r == "assistant"), len(tail))
    assert "assistant" not in tail[:first_prefill]
    assert set(tail[first_prefill:]) <= {"assistant"}
    # ... and it starts right after an assistant message (or at the start)
    assert start == 0 or roles[start - 1] == "assistant"
    # a prefill is wholly in it, with the client's turn it continues
    body = list(roles)
    while body and body[-1] == "assistant":
        body.pop()
    assert start <= len(body)
    if body:
        assert first_prefill > 0
    if roles and roles[-1] != "assistant":  # no prefill: everything after the last one
        assert "assistant" not in tail and (start == 0 or "assistant" not in roles[start:])


_HUGE = "\n".join(f"line {i}: value_{i} computed in module_{i % 7}.py" for i in range(3000))
_PREFILL = " ".join(f"Step {i} of my analysis covers part_{i} of the report." for i in range(40))


def _prefilled(api: str) -> dict[str, Any]:
    if api == "anthropic.messages":
        return {
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 100,
            "system": "sys",
            "messages": [
                {"role": "user", "content": "Fix the build"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "x"}}
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t1", "content": _HUGE}],
                },
                {"role": "assistant", "content": _PREFILL},
            ],
        }
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "Fix the build"},
            call("t1", "x"),
            result("t1", _HUGE),
            {"role": "assistant", "content": _PREFILL},
        ],
    }


@pytest.mark.parametrize("api", ["anthropic.messages", "openai.chat"])
@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
def test_a_prefill_and_the_turn_it_continues_stay_exact(api: str, preset: str) -> None:
    wire = _prefilled(api)
    res = make_engine(preset, FORCE).condense(wire, api=api, session="s")
    assert res.request["messages"][-2:] == wire["messages"][-2:]


@pytest.mark.parametrize(
    ("kind", "role"),
    [
        ("computer_call_output", "tool"),
        ("local_shell_call_output", "tool"),
        ("mcp_approval_response", "tool"),
        ("item_reference", "tool"),
        ("some_future_item", "tool"),
        ("computer_call", "assistant"),
        ("web_search_call", "assistant"),
    ],
)
def test_role_less_responses_items_are_the_assistants_only_when_the_model_made_them(
    kind: str, role: str
) -> None:
    """A client's item after the newest function output must not count as the
    assistant's turn: that would take the output out of the protected newest messages."""
    wire = {"model": "gpt-5", "input": [{"role": "user", "content": "go"}, {"type": kind}]}
    conversation = get_adapter("openai.responses").parse(wire)
    assert conversation.messages[-1].role == role


def test_a_client_item_after_the_newest_output_keeps_it_exact() -> None:
    wire = {
        "model": "gpt-5",
        "instructions": "be good",
        "input": [
            {"role": "user", "content": "Fix the build"},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": _HUGE},
            {"type": "computer_call_output", "call_id": "c3", "output": {"type": "x"}},
        ],
    }
    res = make_engine("aggressive", FORCE).condense(wire, api="openai.responses", session="s")
    assert res.request["input"] == wire["input"]
