"""The fake upstream refuses, as providers do, shapes every provider refuses; it never
fails on them (the proxy relays malformed requests to it)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.proxy.fake_checks import shape_error


@pytest.mark.parametrize(
    ("api", "payload", "param"),
    [
        ("chat", [1], ""),
        ("chat", {"model": "m"}, "messages"),
        ("chat", {"messages": [{"role": 7}]}, "messages.[0]"),
        ("chat", {"messages": [{"role": "assistant", "tool_calls": 5}]}, "messages.[0].tool_calls"),
        ("chat", {"messages": [{"role": "tool", "tool_call_id": "x"}]},
         "messages.[0].tool_call_id"),
        ("messages", {"messages": "hi"}, "messages"),
        ("messages", {"messages": [{"role": "assistant", "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "t", "name": "w", "input": '{"a": 1}'}]}]},
         "messages.[0].content.[1].tool_use.input"),
        ("responses", {"input": 5}, "input"),
    ],
)  # fmt: skip
def test_a_shape_every_provider_refuses_is_refused(api: str, payload: Any, param: str) -> None:
    refused = shape_error(api, payload)
    assert refused is not None and refused[1] == param


@pytest.mark.parametrize(
    ("api", "payload"),
    [
        ("chat", {"messages": [{"role": "assistant", "tool_calls": [{"id": "a"}]},
                               {"role": "tool", "tool_call_id": "a", "content": "x"}]}),
        ("chat", {"messages": [{"role": "user", "content": 5}]}),  # the adapters refuse it
        ("messages", {"messages": [{"role": "user", "content": "hi"}]}),
        ("messages", {"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "w", "input": {"a": 1}}]}]}),
        ("responses", {"input": "hi"}),
        ("responses", {"previous_response_id": "r"}),
    ],
)  # fmt: skip
def test_a_request_a_provider_accepts_is_accepted(api: str, payload: Any) -> None:
    assert shape_error(api, payload) is None
