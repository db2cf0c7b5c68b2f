"""Malformed requests raise one typed error naming the JSON path."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.errors import ConfigError, MalformedRequest

CASES: list[tuple[str, Any, str]] = [
    ("openai.chat", [], ""),
    ("openai.chat", {"model": "x"}, "/messages"),
    ("openai.chat", {"messages": "hi"}, "/messages"),
    ("openai.chat", {"messages": [1]}, "/messages/0"),
    ("openai.chat", {"messages": [{"content": "x"}]}, "/messages/0/role"),
    (
        "openai.chat",
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "/messages/0/content/0/text",
    ),
    (
        "openai.chat",
        {"messages": [{"role": "tool", "tool_call_id": "a", "content": "x"}]},
        "/messages/0/tool_call_id",
    ),
    (
        "openai.chat",
        {"messages": [{"role": "assistant", "tool_calls": [{"id": 5}]}]},
        "/messages/0/tool_calls/0/id",
    ),
    (  # a function call without its function: blamed where it is, not on its result
        "openai.chat",
        {
            "messages": [
                {"role": "assistant", "tool_calls": [{"id": "a"}]},
                {"role": "tool", "tool_call_id": "a", "content": "x"},
            ]
        },
        "/messages/0/tool_calls/0/function",
    ),
    (
        "openai.chat",
        {"messages": [{"role": "assistant", "tool_calls": [{"id": "a", "type": "function"}]}]},
        "/messages/0/tool_calls/0/function",
    ),
    ("openai.responses", {"input": [{"type": "function_call", "name": "f"}]}, "/input/0/call_id"),
    (
        "openai.responses",
        {"input": [{"type": "function_call_output", "call_id": "z", "output": "x"}]},
        "/input/0/call_id",
    ),
    ("openai.responses", {"input": 7}, "/input"),
    ("anthropic.messages", {"messages": [{"role": "user", "content": 3}]}, "/messages/0/content"),
    ("anthropic.messages", {"system": 1, "messages": []}, "/system"),
    (
        "anthropic.messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
                }
            ]
        },
        "/messages/0/content/0/tool_use_id",
    ),
    (
        "anthropic.messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}],
                }
            ]
        },
        "/messages/0/content/0/is_error",
    ),
]


@pytest.mark.parametrize(("api", "request_body", "pointer"), CASES)
def test_malformed_request_names_the_path(api: str, request_body: Any, pointer: str) -> None:
    with pytest.raises(MalformedRequest) as info:
        get_adapter(api).parse(request_body)
    assert info.value.pointer == pointer
    assert str(info.value).endswith(f"at {pointer or '/'}")


def test_unknown_api_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown api"):
        get_adapter("google.gemini")


def test_previous_response_id_allows_upstream_calls() -> None:
    body = {
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "up", "output": "ok"}],
    }
    conversation = get_adapter("openai.responses").parse(body)
    assert conversation.previous_response_id == "resp_1"


@pytest.mark.parametrize("kind", [{"a": 1}, ["input_text"], 7, None])
def test_a_content_part_of_an_unknown_type_is_opaque_and_renders_back(kind: Any) -> None:
    adapter = get_adapter("openai.responses")
    request = {"model": "m", "input": [{"role": "user", "content": [{"type": kind, "x": 1}]}]}
    conversation = adapter.parse(request)
    assert adapter.render(conversation) == request


@pytest.mark.parametrize(
    ("api", "request_body", "pointer"),
    [
        ("openai.chat", {"messages": [{"role": "user", "content": 5}]}, "/messages/0/content"),
        ("openai.responses", {"input": 7}, "/input"),
        ("openai.responses", {"input": [{"role": "user", "content": 1}]}, "/input/0/content"),
        ("anthropic.messages", {"messages": [{"role": "user", "content": 3}]},
         "/messages/0/content"),
        ("anthropic.messages", {"system": 1, "messages": []}, "/system"),
    ],
)  # fmt: skip
def test_where_a_string_would_do_the_error_says_so(
    api: str, request_body: Any, pointer: str
) -> None:
    with pytest.raises(MalformedRequest) as info:
        get_adapter(api).parse(request_body)
    assert str(info.value).startswith("expected a string or an array, got ")
    assert info.value.pointer == pointer


@pytest.mark.parametrize("flag", [None, False, True])
def test_an_anthropic_tool_result_flag_sent_as_null_is_not_given(flag: Any) -> None:
    """The SDKs may send unset optional fields as ``null``: not malformed (the proxy
    relays malformed requests anyway, but then condenses nothing of them)."""
    use = {"type": "tool_use", "id": "t", "name": "sh", "input": {}}
    block = {"type": "tool_result", "tool_use_id": "t", "content": "out", "is_error": flag}
    body = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": [use]},
                         {"role": "user", "content": [block]}]}  # fmt: skip
    adapter = get_adapter("anthropic.messages")
    conversation = adapter.parse(body)
    (result,) = conversation.messages[2].tool_results
    assert result.is_error is bool(flag)
    assert adapter.render(conversation) == body


@pytest.mark.parametrize(
    ("api", "request_body", "pointer", "message"),
    [
        ("openai.chat", {"model": "x"}, "/messages", "missing (expected an array)"),
        ("openai.chat", {"messages": None}, "/messages", "expected an array, got null"),
        ("openai.chat", {"messages": [{"content": "x"}]}, "/messages/0/role", "missing"),
        ("anthropic.messages", {"messages": [{"role": None}]}, "/messages/0/role", "got null"),
        ("openai.responses", {"input": [{"type": "function_call", "name": "f"}]},
         "/input/0/call_id", "missing (expected a string)"),
    ],
)  # fmt: skip
def test_a_missing_key_is_told_from_a_null_one(
    api: str, request_body: Any, pointer: str, message: str
) -> None:
    with pytest.raises(MalformedRequest) as info:
        get_adapter(api).parse(request_body)
    assert info.value.pointer == pointer and message in str(info.value)
