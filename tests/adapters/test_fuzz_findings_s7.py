"""Findings of the seventh fuzzing session (adversarial, protocol-valid requests).

The adapters and the model held every invariant the fuzzing checked (no exception but
``MalformedRequest``, input never mutated, only text at known paths changed, ids,
pairing and the newest messages exact, the same bytes from two fresh engines, every
reference recalls its original). The guards below pin that for one request holding
every documented item or block kind of each API.

The last tests pin bugs found outside the adapters and the model: normalization that
stripped a coloured or CR-ended error line (rolled back, keeping every other pass off
the segment) and tool arguments nested past what orjson or the stdlib walk (the whole
request fell back on every turn).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson
import pytest

from ctxwarden.store.base import REF_PATTERN
from tests.passes.convo import FORCE, make_engine
from tests.wire_diff import value_at

_FORCED: dict[str, Any] = {**FORCE, "mask": {"min_tokens": 0}, "summarize": {"min_tokens": 0}}


def _lines(tag: str, n: int = 80) -> str:
    return "\n".join(f"{tag} line {i}: value_{tag}_{i} in src/{tag}/mod_{i}.py" for i in range(n))


def _text_edits(before: Any, after: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of the strings that differ; anything else that differs fails the test."""
    assert type(before) is type(after), path
    if isinstance(before, dict):
        assert list(before) == list(after), path
        return [e for k in before for e in _text_edits(before[k], after[k], (*path, k))]
    if isinstance(before, list):
        assert len(before) == len(after), path
        return [e for i, x in enumerate(before) for e in _text_edits(x, after[i], (*path, i))]
    if isinstance(before, str):
        return [path] if before != after else []
    assert before == after, path
    return []


def _condense_checked(
    wire: dict[str, Any], api: str, allowed: set[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Condense ``wire`` forced; only texts whose index-free path is ``allowed`` change,
    each names a reference that recalls its original, and a fresh engine agrees."""
    before = copy.deepcopy(wire)
    engine = make_engine("aggressive", _FORCED)
    result = engine.condense(wire, api=api, session="s7")
    assert wire == before
    assert result.report["fallback_reason"] is None
    again = make_engine("aggressive", _FORCED).condense(wire, api=api, session="s7")
    assert orjson.dumps(again.request) == orjson.dumps(result.request)
    edits = _text_edits(wire, result.request)
    for path in edits:
        assert tuple(k if isinstance(k, str) else "#" for k in path) in allowed, path
        original, text = value_at(wire, path), value_at(result.request, path)
        assert original in [engine.recall(ref) for ref in REF_PATTERN.findall(text)], path
    return edits


def test_responses_every_item_kind_keeps_everything_but_output_text() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA" + "Z" * 60}
    reasoning["summary"] = [{"type": "summary_text", "text": "look at the tests"}]
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "fix"}]},
        reasoning,
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "sh", "arguments": "{"},
        {"type": "function_call_output", "call_id": "c1", "output": _lines("a")},
        {"type": "custom_tool_call", "call_id": "c2", "name": "patch", "input": "*** Begin"},
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [
                {"type": "input_text", "text": _lines("b")},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                {"type": "input_file", "file_id": "file-1"},
            ],
        },
        {"type": "local_shell_call", "id": "ls_1", "call_id": "c3", "action": {"type": "exec"}},
        {"type": "local_shell_call_output", "id": "ls_1", "output": _lines("c")},
        {"type": "computer_call", "id": "cc_1", "call_id": "c4", "action": {"type": "click"}},
        {"type": "computer_call_output", "call_id": "c4", "output": {"type": "screenshot"}},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed"},
        {"type": "mcp_list_tools", "id": "ml_1", "server_label": "s", "tools": []},
        {"type": "mcp_approval_request", "id": "ma_1", "server_label": "s", "name": "t"},
        {"type": "mcp_approval_response", "approval_request_id": "ma_1", "approve": True},
        {"type": "mcp_call", "id": "mc_1", "server_label": "s", "name": "t", "output": _lines("d")},
        {"type": "image_generation_call", "id": "ig_1", "result": "AAAA", "status": "completed"},
        {"type": "code_interpreter_call", "id": "ci_1", "code": "print(1)", "outputs": []},
        {"type": "item_reference", "id": "msg_0"},
        {"type": "function_call", "call_id": "c5", "name": "sh", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c5", "output": _lines("e")},
    ]
    wire = {"model": "gpt-5", "instructions": "be careful", "input": items, "store": False}
    allowed = {
        ("input", "#", "output"),
        ("input", "#", "output", "#", "text"),
        ("input", "#", "arguments"),
        ("input", "#", "input"),
    }
    edits = _condense_checked(wire, "openai.responses", allowed)
    assert ("input", 4, "output") in edits and ("input", 6, "output", 0, "text") in edits
    assert all(path[1] < len(items) - 1 for path in edits)  # the newest output stays


def test_anthropic_every_block_kind_keeps_everything_but_tool_result_text() -> None:
    cc = {"type": "ephemeral"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A"}}
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain"}}
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "EqQB" + "s" * 40}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "fix", "cache_control": cc}]},
        {
            "role": "assistant",
            "content": [
                thinking,
                {"type": "redacted_thinking", "data": "Emw" + "r" * 40},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "e", "server_name": "s"},
                {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": []},
                {"type": "tool_use", "id": "t1", "name": "sh", "input": {}, "cache_control": cc},
                {"type": "tool_use", "id": "t2", "name": "sh", "input": {"n": 2**60}},
                {"type": "tool_use", "id": "t3", "name": "sh", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": _lines("a")},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "is_error": True,
                    "cache_control": cc,
                    "content": [
                        {"type": "text", "text": _lines("b"), "cache_control": cc},
                        image,
                        document,
                    ],
                },
                {"type": "tool_result", "tool_use_id": "t3", "content": []},
                {"type": "container_upload", "file_id": "file_1"},
            ],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t4", "name": "sh"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t4", "content": "x"}]},
    ]
    system = [{"type": "text", "text": "sys", "cache_control": cc}]
    wire = {"model": "claude-sonnet-4-5", "max_tokens": 9, "system": system, "messages": messages}
    allowed = {
        ("messages", "#", "content", "#", "content"),
        ("messages", "#", "content", "#", "content", "#", "text"),
    }
    edits = _condense_checked(wire, "anthropic.messages", allowed)
    assert ("messages", 2, "content", 1, "content", 0, "text") in edits


def test_chat_every_message_shape_keeps_everything_but_tool_and_prose_text() -> None:
    custom = {"id": "c2", "type": "custom", "custom": {"name": "patch", "input": "p" * 300}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
        {"role": "user", "name": "ann", "content": "fix"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{x"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": _lines("a")}]},
        {"role": "assistant", "content": None, "tool_calls": [custom]},
        {"role": "tool", "tool_call_id": "c2", "content": _lines("b")},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
        {"role": "function", "name": "f", "content": _lines("c")},
        {"role": "assistant", "content": None, "refusal": "no", "audio": {"id": "audio_1"}},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-1"}},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go on"},
    ]
    allowed = {
        ("messages", "#", "content"),
        ("messages", "#", "content", "#", "text"),
        ("messages", "#", "tool_calls", "#", "function", "arguments"),
        ("messages", "#", "tool_calls", "#", "custom", "input"),  # a custom call's text
        ("messages", "#", "function_call", "arguments"),  # a legacy call's
    }
    edits = _condense_checked({"model": "gpt-4o", "messages": messages}, "openai.chat", allowed)
    assert ("messages", 4, "content", 0, "text") in edits


# -- bugs outside the adapters and the model -----------------------------------------


def _chat(outputs: list[str], arguments: list[str] | None = None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix"},
    ]
    for k, output in enumerate(outputs):
        args = arguments[k] if arguments else json.dumps({"command": f"pytest -k t{k}"})
        fn = {"name": "bash", "arguments": args}
        messages.append(
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}", "function": fn}]}
        )
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": output})
    return {"model": "gpt-4o", "messages": [*messages, {"role": "user", "content": "go"}]}


def test_colored_test_output_with_a_failure_is_condensed() -> None:
    def colored(k: int) -> str:
        passed = [f"\x1b[32mtests/test_m{k}.py::test_{i} PASSED\x1b[0m" for i in range(150)]
        return "\n".join([*passed, "\x1b[31mFAILED tests/x.py::t - AssertionError\x1b[0m"])

    result = make_engine("balanced").condense(_chat([colored(k) for k in range(4)]), session="s")
    assert result.report["rollbacks"] == 0
    assert result.request["messages"][3]["content"].startswith("[ctxwarden:")


def test_repeated_crlf_output_with_an_error_line_is_condensed() -> None:
    output = "ok line\r\n" * 300 + "Error: x\r\n"
    result = make_engine("aggressive", FORCE).condense(_chat([output] * 4), session="s")
    assert result.report["rollbacks"] == 0
    assert result.request["messages"][5]["content"].startswith("[ctxwarden: identical")


@pytest.mark.parametrize(
    "arguments",
    ['{"x": ' + "[" * 300 + "]" * 300 + "}", "[" * 900 + "]" * 900],
    ids=["object-300", "array-900"],
)
def test_deeply_nested_call_arguments_do_not_disable_condensing(arguments: str) -> None:
    wire = _chat([_lines("a"), _lines("b")], [arguments, "{}"])
    result = make_engine("balanced").condense(wire, session="s")
    assert result.report["fallback_reason"] is None
