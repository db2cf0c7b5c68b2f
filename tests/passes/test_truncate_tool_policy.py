"""The truncation guardrail and per-tool policies: ``exclude = true`` keeps a tool's
outputs whole, however large; a tool's ``min_tokens`` keeps outputs smaller than it
whole from every pass, the guardrail included (documented on ``ToolPolicy``)."""

from __future__ import annotations

from typing import Any

from tests.passes.convo import FORCE, call, lines_of, make_engine, request, result

_BIG = "\n".join(f"{i:06d} " + "x" * 10 for i in range(2500))  # over max_lines (2,000)


def _condensed(tools: dict[str, Any], output: str) -> str:
    """The old ``make`` output as sent, the lossy mask pass off (only the guardrail
    may cut it), under ``tools``."""
    wire = request(
        call("c1", "make -j8"), result("c1", output), call("c2", "ls"), result("c2", "a")
    )
    engine = make_engine("balanced", {**FORCE, "mask": {"enabled": False}, "tools": tools})
    content: str = engine.condense(wire, session="s").request["messages"][3]["content"]
    return content


def test_the_guardrail_cuts_an_oversized_output_of_a_tool_without_policy() -> None:
    assert "truncated output" in _condensed({}, _BIG)


def test_an_excluded_tools_oversized_output_stays_whole() -> None:
    assert _condensed({"bash": {"exclude": True}}, _BIG) == _BIG


def test_a_tools_min_tokens_holds_for_the_guardrail_as_documented() -> None:
    """Smaller than the tool's ``min_tokens``: whole, even over the guardrail's limits;
    at least that large: cut by the guardrail."""
    assert _condensed({"bash": {"min_tokens": 10**9}}, _BIG) == _BIG
    assert "truncated output" in _condensed({"bash": {"min_tokens": 2_000}}, _BIG)


def test_a_tools_min_tokens_keeps_an_output_under_the_limits_whole() -> None:
    small = lines_of("m", 300)  # masked without the policy, under the guardrail's limits
    wire = request(call("c1", "make"), result("c1", small), call("c2", "ls"), result("c2", "a"))
    policy = {**FORCE, "tools": {"bash": {"min_tokens": 10**9}}}
    masked = make_engine("balanced", FORCE).condense(wire, session="s").request["messages"][3]
    kept = make_engine("balanced", policy).condense(wire, session="s").request["messages"][3]
    assert masked["content"] != small
    assert kept["content"] == small
