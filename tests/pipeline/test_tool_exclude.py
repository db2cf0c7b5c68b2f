"""An excluded tool is never condensed: neither its outputs nor its calls' arguments."""

from __future__ import annotations

from typing import Any

from tests.passes.convo import FORCE, MODEL, call_with, make_engine, result


def _write(call_id: str, name: str, i: int) -> dict[str, Any]:
    content = "\n".join(f"line {j}: secret_value_{i}_{j} = compute({j})" for j in range(60))
    return call_with(call_id, name, {"path": f"s{i}.py", "content": content})


def test_an_excluded_tools_call_arguments_stay_exact() -> None:
    turns: list[dict[str, Any]] = []
    for i, name in enumerate(["write_secret", "write_file", "write_secret", "write_file"]):
        turns += [_write(f"c{i}", name, i), result(f"c{i}", "ok")]
    wire = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing build."},
            *turns,
            {"role": "assistant", "content": "Looking at the results."},
            {"role": "user", "content": "please continue"},
        ],
    }
    pipeline = {**FORCE, "keep_newest_calls": 0, "tools": {"write_secret": {"exclude": True}}}
    out = make_engine("balanced", pipeline).condense(wire, session="s").request["messages"]
    for before, after in zip(wire["messages"], out, strict=True):
        calls = before.get("tool_calls") or []
        if calls and calls[0]["function"]["name"] == "write_secret":
            assert after == before
        elif calls:  # the other tool's old calls are trimmed: the policy is per tool
            assert (
                after["tool_calls"][0]["function"]["arguments"] != calls[0]["function"]["arguments"]
            )
