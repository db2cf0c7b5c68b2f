"""OpenAI Responses (``POST /v1/responses``).

``input`` is a string or a list of items: messages (with or without ``type``),
``function_call`` / ``custom_tool_call`` and the built-in ``shell_call`` /
``apply_patch_call``, their outputs (``function_call_output``,
``custom_tool_call_output``, ``shell_call_output``, ``apply_patch_call_output``),
``reasoning`` (``encrypted_content`` kept opaque) and anything else as an opaque item.
``instructions`` is system content.
With ``previous_response_id`` a call output may answer a call held upstream.
"""

from __future__ import annotations

from typing import Any

from ctxwarden.adapters.base import (
    Adapter,
    ItemMemo,
    check_pairing,
    expect,
    expect_key,
    expect_object,
    expect_text_or_list,
    item_memo,
    optional_str,
    parse_items,
)
from ctxwarden.adapters.base import (
    json_text as _json,
)
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import (
    ContentPart,
    MediaPart,
    OpaquePart,
    Part,
    Path,
    ReasoningPart,
    SafetyClass,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ctxwarden.model.render import render_conversation

__all__ = ["ADAPTER", "is_model_item", "parse", "render"]

_RESULT = SafetyClass.CONDENSABLE

_TEXT_TYPES = frozenset({"input_text", "output_text", "text", "summary_text"})
_MEDIA_TYPES = {"input_image": "image", "input_file": "file", "input_audio": "audio"}


_MEMO: ItemMemo = item_memo()
"""Items parsed before (see :func:`~ctxwarden.adapters.base.parse_items`)."""


def _content_parts(
    content: Any, path: Path, text_safety: SafetyClass = SafetyClass.LOSSLESS_TRANSFORMABLE
) -> tuple[ContentPart, ...]:
    if content is None:
        return ()
    if isinstance(content, str):
        return (TextPart(text=content, path=path, safety=text_safety),)
    parts: list[ContentPart] = []
    for j, item in enumerate(expect_text_or_list(content, path)):
        item_path = (*path, j)
        block = expect_object(item, item_path)
        kind = block.get("type")
        # annotations and logprobs describe the text they came with: such a text stays
        if (
            isinstance(kind, str)
            and kind in _TEXT_TYPES
            and not block.get("annotations")
            and not block.get("logprobs")
        ):
            text = expect_key(block, "text", str, item_path)
            parts.append(TextPart(text=text, path=(*item_path, "text"), safety=text_safety))
        elif isinstance(kind, str) and kind in _MEDIA_TYPES:
            parts.append(MediaPart(media_type=_MEDIA_TYPES[kind], path=item_path))
        else:
            parts.append(OpaquePart(wire_type=str(kind), path=item_path, raw_json=_json(block)))
    return tuple(parts)


_MODEL_ITEMS = frozenset(
    {
        "computer_call",
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "tool_search_call",
        "program",
        "compaction",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
    }
)
"""Role-less input items the model produced (the assistant's turn)."""


_BUILTIN_CALLS = ("shell_call", "apply_patch_call")
"""Calls of built-in tools that pair with their outputs (:func:`_builtin_call`)."""
_OUTPUTS = (
    "function_call_output",
    "custom_tool_call_output",
    "shell_call_output",
    "apply_patch_call_output",
)
"""Outputs that pair with their call by ``call_id`` (:func:`_output`)."""


def is_model_item(value: Any) -> bool:
    """Whether an input item parses to an assistant message (what :func:`_item` gives
    ``role="assistant"``), without parsing or validating it: an item of an assistant
    type with bad fields still answers ``True`` (its parse refuses it); a value that is
    not an object answers ``False``."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if kind is None or kind == "message":
        return value.get("role") == "assistant"
    if kind in ("function_call", "custom_tool_call", "reasoning", *_BUILTIN_CALLS):
        return True
    if not isinstance(kind, str):
        return False
    if kind in _OUTPUTS and value.get("call_id") is not None:
        return False  # a paired output; one without a call id is read as an opaque item
    role = value.get("role")
    return role == "assistant" if isinstance(role, str) else kind in _MODEL_ITEMS


def _item(value: Any, path: Path) -> Message:
    item = expect_object(value, path)
    kind = item.get("type")
    if kind is None and "role" not in item and isinstance(item.get("id"), str):
        kind = "item_reference"  # the reference's type may be left out
    elif kind is None or kind == "message":
        role = expect_key(item, "role", str, path)
        parts = _content_parts(item.get("content"), (*path, "content"))
        return Message(role=role, parts=parts, path=path, item_type="message")
    kind = expect(kind, str, (*path, "type"))
    if kind in ("function_call", "custom_tool_call"):
        args_key = "arguments" if kind == "function_call" else "input"
        raw_args = item.get(args_key, "")
        call = ToolCallPart(
            call_id=expect_key(item, "call_id", str, path),
            name=expect_key(item, "name", str, path),
            arguments=str(raw_args),
            path=path,
            arguments_path=(*path, args_key) if isinstance(raw_args, str) else None,
        )
        return Message(role="assistant", parts=(call,), path=path, item_type=kind)
    if kind in _OUTPUTS and item.get("call_id") is not None:
        return _output(item, kind, path)  # one without (optional) is kept as sent, unpaired
    if kind in _BUILTIN_CALLS:
        return _builtin_call(item, kind, path)
    if kind == "reasoning":
        summary = item.get("summary")
        texts: list[str] = []
        if isinstance(summary, list):
            texts = [s["text"] for s in summary if isinstance(s, dict) and "text" in s]
        reasoning = ReasoningPart(
            text="\n".join(t for t in texts if isinstance(t, str)),
            path=path,
            signed=item.get("encrypted_content") is not None,
        )
        return Message(role="assistant", parts=(reasoning,), path=path, item_type=kind)
    item_role = item.get("role")
    if not isinstance(item_role, str):
        # what the model produced is the assistant's; anything else (a client's
        # ``*_output``, an approval, an item reference, a type unknown here) is not, so
        # it never hides the newest output from the protected tail
        item_role = "assistant" if kind in _MODEL_ITEMS else "tool"
    return Message(
        role=item_role,
        parts=(OpaquePart(wire_type=kind, path=path, raw_json=_json(item)),),
        path=path,
        item_type=kind,
    )


def _builtin_call(item: dict[str, Any], kind: str, path: Path) -> Message:
    """A call of the built-in ``shell`` or ``apply_patch`` tool: paired with its output
    by ``call_id`` like a function call. A patch's ``operation.diff`` is its argument
    text (condensable in old calls, as a custom tool's input) and its command the
    operation and file (so only a later patch of the same file supersedes its output);
    a shell call's action is kept as it is."""
    action_key = "action" if kind == "shell_call" else "operation"
    action = item.get(action_key)
    command = None
    diff = None
    if kind == "apply_patch_call":
        operation = action if isinstance(action, dict) else {}
        diff = operation.get("diff")
        words = [operation.get("type"), operation.get("path")]
        command = " ".join(w for w in words if isinstance(w, str)) or _json(action)
    call = ToolCallPart(
        call_id=expect_key(item, "call_id", str, path),
        name="shell" if kind == "shell_call" else "apply_patch",
        arguments=diff if isinstance(diff, str) else _json(action),
        path=path,
        arguments_path=(*path, action_key, "diff") if isinstance(diff, str) else None,
        command=command,
    )
    return Message(role="assistant", parts=(call,), path=path, item_type=kind)


def _output(item: dict[str, Any], kind: str, path: Path) -> Message:
    """A call's output, paired with it by ``call_id``. Its texts are tool output: a
    function or custom tool's ``output`` (a string or content parts), each chunk's
    ``stdout`` and ``stderr`` of a built-in shell call, a patch's ``output`` string;
    everything else (outcomes, status) stays as sent."""
    call_id = expect_key(item, "call_id", str, path)
    output = item.get("output")
    content: tuple[ContentPart, ...] = ()
    if kind == "shell_call_output":
        content = tuple(
            TextPart(text=chunk[stream], path=(*path, "output", j, stream), safety=_RESULT)
            for j, chunk in enumerate(output if isinstance(output, list) else ())
            for stream in (("stdout", "stderr") if isinstance(chunk, dict) else ())
            if isinstance(chunk.get(stream), str)
        )
    elif kind == "apply_patch_call_output":
        if isinstance(output, str):
            content = (TextPart(text=output, path=(*path, "output"), safety=_RESULT),)
    else:
        content = _content_parts(output, (*path, "output"), _RESULT)
    result = ToolResultPart(call_id=call_id, content=content, path=path, is_error=_failed(item))
    return Message(role="tool", parts=(result,), path=path, item_type=kind)


def _failed(item: dict[str, Any]) -> bool:
    """Whether a call's output says it failed: a shell chunk's exit outcome with a
    non-zero code, or a patch output's ``failed`` status."""
    if item.get("status") == "failed":
        return True
    output = item.get("output")
    for chunk in output if isinstance(output, list) else ():
        outcome = chunk.get("outcome") if isinstance(chunk, dict) else None
        if isinstance(outcome, dict) and outcome.get("type") == "exit":
            code = outcome.get("exit_code")
            if isinstance(code, int) and code != 0:
                return True
    return False


def _tool_names(tools: Any) -> tuple[str, ...]:
    if not isinstance(tools, list):
        return ()
    return tuple(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))


def parse(wire: Any) -> Conversation:
    """Parse a Responses request body (see :mod:`ctxwarden.adapters.base`)."""
    body = expect_object(wire, ())
    raw_input = body.get("input")
    hashes: tuple[str, ...] = ()
    sizes: tuple[int, ...] = ()
    if raw_input is None:
        messages: tuple[Message, ...] = ()
    elif isinstance(raw_input, str):
        text = TextPart(text=raw_input, path=("input",))
        messages = (Message(role="user", parts=(text,), path=("input",)),)
    else:
        items = expect_text_or_list(raw_input, ("input",))
        parsed = parse_items(items, "input", _item, _MEMO)
        messages, hashes, sizes = parsed.messages, parsed.hashes, parsed.sizes
    system: tuple[Part, ...] = ()
    instructions = optional_str(body, "instructions", ())
    if instructions is not None:
        system = (TextPart(text=instructions, path=("instructions",)),)
    previous = optional_str(body, "previous_response_id", ())
    conversation = Conversation(
        api="openai.responses",
        wire=body,
        messages=messages,
        system=system,
        model=optional_str(body, "model", ()),
        tool_names=_tool_names(body.get("tools")),
        previous_response_id=previous,
        messages_key="input",
        item_hashes=hashes,
        item_sizes=sizes,
    )
    # outputs may answer calls held upstream: a previous response, a stored conversation,
    # or items sent by reference
    upstream = (
        previous is not None
        or body.get("conversation") is not None
        or any(m.item_type == "item_reference" for m in messages)
    )
    check_pairing(conversation, allow_unknown_results=upstream)
    return conversation


def render(conversation: Conversation) -> dict[str, Any]:
    """Render a Responses request (edited texts written back, rest exact)."""
    return render_conversation(conversation)


ADAPTER = Adapter(api="openai.responses", parse=parse, render=render)
