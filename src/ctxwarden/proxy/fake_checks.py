"""The request-shape checks the fake upstream answers ``400`` for, as the providers do.

Only what every provider certainly refuses: a body that is no JSON object, a message
list that is missing or not a list of objects with a string ``role``, a Chat ``tool``
message that answers no earlier call, a Responses ``input`` that is neither text nor a
list, a Messages ``tool_use`` block whose ``input`` is no object. The proxy relays
requests its adapters find malformed for the upstream to judge, so the fake judges
them like one (the providers accept more than the adapters read).
"""

from __future__ import annotations

from typing import Any

__all__ = ["shape_error"]


def shape_error(api: str, payload: Any) -> tuple[str, str] | None:
    """``(message, param)`` of the refusal a provider answers ``payload`` with on
    ``api`` (``chat``, ``responses`` or ``messages``); ``None`` when it is accepted."""
    if not isinstance(payload, dict):
        return "the request body must be a JSON object", ""
    if api == "responses":
        given = payload.get("input")
        if given is not None and not isinstance(given, str | list):
            return "input must be a string or an array", "input"
        return None
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return "messages: a required array is missing", "messages"
    calls: set[Any] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{i}] must be an object with a string role", f"messages.[{i}]"
        if api == "messages":
            refused = _tool_use_input_error(message.get("content"), i)
            if refused is not None:
                return refused
            continue
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            return f"messages[{i}].tool_calls must be an array", f"messages.[{i}].tool_calls"
        for call in tool_calls or ():
            if isinstance(call, dict):
                calls.add(call.get("id"))
        if message["role"] == "tool" and message.get("tool_call_id") not in calls:
            return (
                f"messages[{i}]: a tool message must answer a preceding tool call",
                f"messages.[{i}].tool_call_id",
            )
    return None


def _tool_use_input_error(content: Any, i: int) -> tuple[str, str] | None:
    """The refusal of a Messages message whose ``tool_use`` block's ``input`` is no
    object (Anthropic: "Input should be a valid dictionary")."""
    if not isinstance(content, list):
        return None
    for j, block in enumerate(content):
        if (
            isinstance(block, dict)
            and block.get("type") == "tool_use"
            and not isinstance(block.get("input"), dict)
        ):
            where = f"messages.[{i}].content.[{j}].tool_use.input"
            return f"{where}: Input should be a valid dictionary", where
    return None
