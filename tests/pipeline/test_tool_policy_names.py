"""Tool policies match tool names exactly (the APIs' names are case-sensitive); the
policies that match no tool of a request can be named, so a typo can be reported."""

from __future__ import annotations

from ctxwarden.pipeline.presets import resolve_pipeline, unmatched_tool_policies
from tests.passes.convo import FORCE, call, lines_of, make_engine, request, result


def _policies() -> dict[str, object]:
    return {"tools": {"read_secret_file": {"exclude": True}, "heartbeat": {"suppress": True}}}


def test_a_policy_that_matches_no_called_tool_is_named() -> None:
    """With `read_secret_file` excluded, a request calling `Read_Secret_File` got its
    outputs masked and nothing said the policy matched nothing."""
    config = resolve_pipeline("balanced", _policies())
    called = ["Read_Secret_File", "heartbeat", "bash"]
    assert unmatched_tool_policies(config, called) == ["read_secret_file"]
    assert unmatched_tool_policies(config, ["read_secret_file", "heartbeat"]) == []
    assert unmatched_tool_policies(resolve_pipeline("balanced", {}), called) == []


def test_the_match_is_exact_as_the_api_names_are() -> None:
    """A policy for `read_secret_file` does not keep `Read_Secret_File`'s output whole
    (another tool to the API); its own name does."""
    text = lines_of("secret", 200)
    for name, whole in [("Read_Secret_File", False), ("read_secret_file", True)]:
        wire = request(call("c1", "cat key.pem", name=name), result("c1", text),
                       call("c2", "ls"), result("c2", "a\nb"))  # fmt: skip
        with make_engine(pipeline={**FORCE, **_policies()}) as engine:
            sent = engine.condense(wire, api="openai.chat", one_shot=True).request
        assert (sent["messages"][3]["content"] == text) is whole


def test_the_report_names_a_policy_no_called_tool_matched() -> None:
    wire = request(call("c1", "cat key.pem", name="Read_Secret_File"), result("c1", "x"))
    with make_engine(pipeline=_policies()) as engine:
        report = engine.condense(wire, api="openai.chat", one_shot=True).report
    assert report["tool_policies_unmatched"] == ["heartbeat", "read_secret_file"]
    with make_engine() as engine:  # no policies: nothing to name
        assert engine.condense(wire, api="openai.chat").report["tool_policies_unmatched"] == []
