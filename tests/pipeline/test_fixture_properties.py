"""Anthropic Messages and OpenAI Responses: condensation never touches thinking blocks,
signatures, encrypted reasoning, continuation ids or cache_control."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.signals import error_lines
from tests.conftest import load_fixture
from tests.passes.convo import FORCE, dumps, make_engine, refs_in
from tests.passes.strategies import fresh_session

ENGINE = make_engine("aggressive", FORCE)
PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_EXACT_BLOCKS = {
    "thinking",
    "redacted_thinking",
    "tool_use",
    "server_tool_use",
    "image",
    "document",
}


@st.composite
def _big_text(draw: st.DrawFn) -> str:
    n = draw(st.integers(40, 120))
    tag = draw(st.sampled_from(["alpha", "beta", "gamma"]))
    rows = [f"{tag} row {i}: compiled unit_{tag}_{i}.o without warnings" for i in range(n)]
    if draw(st.booleans()):
        rows.insert(n // 2, f"src/{tag}.c:{n}:3: error: expected ';' before 'return'")
    return "\n".join(rows)


@st.composite
def anthropic_requests(draw: st.DrawFn) -> dict[str, Any]:
    wire = copy.deepcopy(load_fixture("anthropic_full.json"))
    messages = wire["messages"]
    messages[2]["content"][0]["content"][0]["text"] = draw(_big_text())
    for k in range(draw(st.integers(1, 4))):
        uid = f"toolu_x{k}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"plan {k}", "signature": f"sig-{k}-EqQBCkYI"},
                    {
                        "type": "tool_use",
                        "id": uid,
                        "name": "bash",
                        "input": {"command": f"make t{k}"},
                    },
                ],
            }
        )
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": uid}
        block["content"] = draw(_big_text())
        if draw(st.booleans()):
            block["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user", "content": [block]})
    messages.append(
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy-final"},
                {"type": "text", "text": "Next step."},
            ],
        }
    )
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}},
            ],
        }
    )
    return wire


def _strings(value: Any) -> list[str]:
    """Every string inside a JSON value (what the model sees, roughly)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def _check_anthropic(wire: dict[str, Any], out: dict[str, Any]) -> int:
    assert list(out) == list(wire)
    visible = "\n".join(_strings(out["messages"]))
    for key in wire:
        if key != "messages":
            assert dumps(out[key]) == dumps(wire[key]), key
    rewritten = 0
    assert len(out["messages"]) == len(wire["messages"])
    for old, new in zip(wire["messages"], out["messages"], strict=True):
        assert old["role"] == new["role"]
        if isinstance(old["content"], str):
            continue
        assert len(new["content"]) == len(old["content"])
        for a, b in zip(old["content"], new["content"], strict=True):
            if a["type"] in _EXACT_BLOCKS:
                assert dumps(a) == dumps(b)
            assert dumps(a.get("cache_control")) == dumps(b.get("cache_control"))
            assert {k: v for k, v in a.items() if k not in ("content", "text")} == {
                k: v for k, v in b.items() if k not in ("content", "text")
            }
            if a["type"] == "tool_result" and a.get("content") != b.get("content"):
                rewritten += 1
                for line in error_lines("\n".join(_strings(a["content"]))):
                    assert line in visible
                assert refs_in("\n".join(_strings(b["content"])))
    return rewritten


@PROPERTY
@given(wire=anthropic_requests())
def test_anthropic_thinking_signatures_and_cache_control_survive(wire: dict[str, Any]) -> None:
    res = ENGINE.condense(wire, api="anthropic.messages", session=fresh_session())
    assert res.report["fallback_reason"] is None
    _check_anthropic(wire, res.request)


def test_anthropic_extension_is_actually_condensed() -> None:
    base = copy.deepcopy(load_fixture("anthropic_full.json"))
    big = "\n".join(f"row {i}: compiled unit_{i}.o fine" for i in range(120))
    base["messages"][2]["content"][0]["content"][0]["text"] = big + "\nsrc/a.c:3: error: boom"
    base["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {"role": "user", "content": "continue"},
    ]
    res = ENGINE.condense(base, api="anthropic.messages", session=fresh_session())
    assert res.report["rewritten"]
    assert _check_anthropic(base, res.request) == 1
    text = res.request["messages"][2]["content"][0]["content"][0]["text"]
    (ref,) = set(refs_in(text))
    assert ENGINE.recall(ref) == base["messages"][2]["content"][0]["content"][0]["text"]
    assert "src/a.c:3: error: boom" in text


@st.composite
def responses_requests(draw: st.DrawFn) -> dict[str, Any]:
    wire = copy.deepcopy(load_fixture("responses_full.json"))
    if draw(st.booleans()):
        wire["previous_response_id"] = "resp_prev_42"
    items = wire["input"]
    items[4]["output"] = draw(_big_text())
    for k in range(draw(st.integers(1, 4))):
        cid = f"call_x{k}"
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_x{k}",
                "summary": [],
                "encrypted_content": f"gAAAAB-enc-{k}==",
            }
        )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_x{k}",
                "call_id": cid,
                "name": "shell",
                "arguments": json.dumps({"cmd": f"make t{k}"}),
            }
        )
        items.append({"type": "function_call_output", "call_id": cid, "output": draw(_big_text())})
    items.append(
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_last",
            "content": [{"type": "output_text", "text": "Next.", "annotations": []}],
        }
    )
    items.append({"role": "user", "content": "continue"})
    return wire


def _check_responses(wire: dict[str, Any], out: dict[str, Any]) -> int:
    assert list(out) == list(wire)
    visible = "\n".join(_strings(out["input"]))
    for key in wire:
        if key != "input":
            assert dumps(out[key]) == dumps(wire[key]), key
    rewritten = 0
    assert len(out["input"]) == len(wire["input"])
    for old, new in zip(wire["input"], out["input"], strict=True):
        if old.get("type") == "function_call_output" and isinstance(old["output"], str):
            assert {k: v for k, v in old.items() if k != "output"} == {
                k: v for k, v in new.items() if k != "output"
            }
            if old["output"] != new["output"]:
                rewritten += 1
                assert refs_in(new["output"])
                for line in error_lines(old["output"]):
                    assert line in visible
            continue
        if old.get("type") in (
            "reasoning",
            "function_call",
            "custom_tool_call",
            "item_reference",
            "web_search_call",
        ):
            assert dumps(old) == dumps(new)
    return rewritten


@PROPERTY
@given(wire=responses_requests())
def test_responses_reasoning_and_continuation_survive(wire: dict[str, Any]) -> None:
    res = ENGINE.condense(wire, api="openai.responses", session=fresh_session())
    assert res.report["fallback_reason"] is None
    _check_responses(wire, res.request)


def test_responses_extension_is_actually_condensed() -> None:
    wire = copy.deepcopy(load_fixture("responses_full.json"))
    wire["input"][4]["output"] = "\n".join(f"row {i}: test_{i} passed" for i in range(150))
    wire["input"].append(
        {
            "type": "message",
            "role": "assistant",
            "id": "m9",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        }
    )
    wire["input"].append({"role": "user", "content": "continue"})
    res = ENGINE.condense(wire, api="openai.responses", session=fresh_session())
    assert res.report["rewritten"]
    assert _check_responses(wire, res.request) == 1


def test_responses_continuation_fixture_is_untouched() -> None:
    wire = load_fixture("responses_continuation.json")
    res = ENGINE.condense(wire, api="openai.responses", session=fresh_session())
    assert dumps(res.request) == dumps(wire)
