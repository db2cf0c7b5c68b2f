"""An output its tool flags as failed (Anthropic ``is_error``, a Responses shell exit
code or a failed patch, an ``exit N`` line) keeps its head and tail when condensed, even
when no line of it has a known error form: the header alone hid what went wrong."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.adapters import get_adapter
from tests.passes.convo import make_engine

_USAGE = "\n".join(
    ["grep: invalid option -- 'z'", "Usage: grep [OPTION]... PATTERNS [FILE]..."]
    + [
        f"  -{c}, --long-{c}   option {c} does something useful"
        for c in "abcdefghijklmnopqrstuvwxy"
    ]
)


def _filler(k: int) -> str:
    return "\n".join(f"src/file{j}.py: line {j} matched pat{k}" for j in range(80))


def _anthropic(failed: bool) -> dict[str, Any]:
    messages: list[Any] = [{"role": "user", "content": "Find the bug."}]
    for k in range(6):
        use = {"type": "tool_use", "id": f"t{k}", "name": "bash", "input": {"command": f"grep {k}"}}
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"t{k}",
                                  "content": _USAGE if k == 1 else _filler(k)}  # fmt: skip
        if k == 1 and failed:
            result["is_error"] = True
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}


def _responses(exit_code: int) -> dict[str, Any]:
    items: list[Any] = [{"role": "user", "content": "Find the bug."}]
    for k in range(6):
        items.append({"type": "shell_call", "call_id": f"c{k}", "action": {"commands": [f"g {k}"]}})
        chunk = {"stdout": "" if k == 1 else _filler(k), "stderr": _USAGE if k == 1 else "",
                 "outcome": {"type": "exit", "exit_code": exit_code if k == 1 else 0}}  # fmt: skip
        items.append({"type": "shell_call_output", "call_id": f"c{k}", "output": [chunk]})
    return {"model": "gpt-5", "input": items}


@pytest.mark.parametrize("failed", [True, False])
def test_a_failed_anthropic_result_shows_its_first_and_last_lines(failed: bool) -> None:
    request = _anthropic(failed)
    sent = make_engine("balanced").condense(request, api="anthropic.messages").request
    text = sent["messages"][4]["content"][0]["content"]
    assert text.startswith("[ctxwarden: condensed output")
    shown = "grep: invalid option -- 'z'" in text.split("\n")
    assert shown is failed  # a result not flagged failed stays a bare header (small)


@pytest.mark.parametrize("exit_code", [2, 0])
def test_a_shell_output_with_a_nonzero_exit_is_a_failure(exit_code: int) -> None:
    request = _responses(exit_code)
    conversation = get_adapter("openai.responses").parse(request)
    (result,) = conversation.messages[4].tool_results
    assert result.is_error is bool(exit_code)
    sent = make_engine("balanced").condense(request, api="openai.responses").request
    stderr = sent["input"][4]["output"][0]["stderr"]
    assert stderr.startswith("[ctxwarden: condensed output")
    assert ("grep: invalid option -- 'z'" in stderr.split("\n")) is bool(exit_code)


def test_a_failed_patch_output_is_a_failure() -> None:
    call = {"type": "apply_patch_call", "call_id": "p", "operation": {"type": "update_file",
            "path": "a.py", "diff": "@@\n-x\n+y"}}  # fmt: skip
    output = {"type": "apply_patch_call_output", "call_id": "p", "status": "failed",
              "output": "context not found"}  # fmt: skip
    conversation = get_adapter("openai.responses").parse({"input": [call, output]})
    (result,) = conversation.messages[1].tool_results
    assert result.is_error
