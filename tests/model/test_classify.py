"""Safety classes by kind and position; session keys from the stable head."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.adapters import get_adapter
from ctxwarden.model import SafetyClass, classify
from ctxwarden.model.session import derive_session_key
from tests.conftest import load_fixture


def _chat(n_tools: int) -> dict[str, object]:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for i in range(n_tools):
        messages.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "same output"})
    return {"model": "gpt-4o", "messages": messages}


def test_all_seven_classes_are_assigned() -> None:
    conv = classify(get_adapter("openai.chat").parse(_chat(3)))
    classes = set()
    for m in conv.messages:
        for p in m.parts:
            classes.add(p.safety)
            classes.update(c.safety for c in getattr(p, "content", ()))
    anth = classify(get_adapter("anthropic.messages").parse(load_fixture("anthropic_full.json")))
    for m in anth.messages:
        for p in m.parts:
            classes.add(p.safety)
            classes.update(c.safety for c in getattr(p, "content", ()))
    assert classes == set(SafetyClass)


def test_positions_are_critical_exact() -> None:
    conv = classify(get_adapter("openai.chat").parse(_chat(3)))
    system, first_user, *_, last_tool = conv.messages
    assert system.parts[0].safety is SafetyClass.CRITICAL_EXACT
    assert first_user.parts[0].safety is SafetyClass.CRITICAL_EXACT
    assert last_tool.parts[0].content[0].safety is SafetyClass.CRITICAL_EXACT  # type: ignore[union-attr]
    middle_tool = conv.messages[3].parts[0]
    assert middle_tool.content[0].safety is SafetyClass.CONDENSABLE  # type: ignore[union-attr]
    assert conv.messages[5].parts[0].content[0].safety is SafetyClass.DROPPABLE_DUPLICATE  # type: ignore[union-attr]


@given(st.integers(1, 12))
def test_session_key_is_stable_across_turns(n: int) -> None:
    parse = get_adapter("openai.chat").parse
    assert derive_session_key(parse(_chat(1))) == derive_session_key(parse(_chat(n)))


def test_session_key_differs_by_task() -> None:
    parse = get_adapter("openai.chat").parse
    other = _chat(1)
    other["messages"][1] = {"role": "user", "content": "another task"}  # type: ignore[index]
    assert derive_session_key(parse(_chat(1))) != derive_session_key(parse(other))


def test_session_key_tells_apart_tasks_behind_a_shared_demonstration() -> None:
    """Agents that send a shared demonstration as the first user message and the task
    second must not share one session's state."""
    parse = get_adapter("openai.chat").parse
    a = _chat(2)
    b = _chat(2)
    demo = {"role": "user", "content": "Here is a demonstration of the interface."}
    a["messages"] = [
        a["messages"][0],
        demo,
        {"role": "user", "content": "task A"},
        *a["messages"][2:],
    ]  # type: ignore[index]
    b["messages"] = [
        b["messages"][0],
        demo,
        {"role": "user", "content": "task B"},
        *b["messages"][2:],
    ]  # type: ignore[index]
    assert derive_session_key(parse(a)) != derive_session_key(parse(b))


_OTHER_CALL = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}


@pytest.mark.parametrize(
    "change",
    [
        {"content": "step 0, another attempt"},
        {"tool_calls": [{**_OTHER_CALL, "function": {"name": "sh", "arguments": "{}"}}]},
        {"tool_calls": [{**_OTHER_CALL, "function": {"name": "bash", "arguments": '{"a":1}'}}]},
    ],
)
def test_session_key_tells_apart_runs_of_the_same_task(change: dict[str, object]) -> None:
    """Two attempts at one task (same prompts) share no state once the agent replied:
    they would undo each other's compaction steps. Before the reply they share the
    prompts' key, when there is nothing to condense."""
    parse = get_adapter("openai.chat").parse
    a, b = _chat(3), _chat(3)
    first_reply = b["messages"][2]  # type: ignore[index]
    b["messages"][2] = {**first_reply, **change}  # type: ignore[index]
    assert derive_session_key(parse(a)) != derive_session_key(parse(b))
    head = {**a, "messages": a["messages"][:2]}  # type: ignore[index]
    other_head = {**b, "messages": b["messages"][:2]}  # type: ignore[index]
    assert derive_session_key(parse(head)) == derive_session_key(parse(other_head))


def test_session_key_reads_past_a_reasoning_item_to_the_first_call() -> None:
    """Responses reasoning models reply with a reasoning item first: the key comes from
    the call after it, so two runs of one task still differ."""
    parse = get_adapter("openai.responses").parse

    def run(call_id: str) -> dict[str, object]:
        return {
            "model": "gpt-5",
            "instructions": "You are a coding agent",
            "input": [
                {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "fix the bug"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
                {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"},
                {"type": "function_call_output", "call_id": call_id, "output": "..."},
            ],
        }  # fmt: skip

    assert derive_session_key(parse(run("call_a"))) != derive_session_key(parse(run("call_b")))
