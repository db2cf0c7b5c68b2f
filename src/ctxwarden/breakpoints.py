"""Anthropic prompt-cache breakpoints that survive ctxwarden's compaction steps.

Anthropic caches a prompt only where the client puts ``cache_control`` breakpoints, and
a later request reads an entry only if its prompt up to that point is unchanged. Agents
put one at the end of each request. A compaction step rewrites what followed the
previous request's newest messages, so the entry at the previous request's end no
longer matches and the whole prompt would be written to the cache again.

For a client that already caches, one breakpoint goes where the previous request of
the session ended (the proxy adds it to its clients' requests; library callers pass
``result.request`` and ``result.report["step_start"]`` to :func:`with_step_breakpoint`):
on the last block of the message before the last assistant message (everything before
it is the previous request). Each request then writes an entry there, and the next one,
whose rewrite starts after it, reads it. At a compaction step one more goes on the last
message the step kept, since Anthropic looks back only about 20 blocks from a
breakpoint for an earlier entry. A breakpoint is added only when the client set at
least one itself (it opted into caching and its prices), when the request has room
(Anthropic takes at most four, counted at any depth: inside tool results, search
results, documents), and on a block that takes one (not thinking blocks, not
string content); it copies the client's own marker, so its TTL fits theirs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_BREAKPOINTS", "with_step_breakpoint"]

MAX_BREAKPOINTS = 4
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})


def _marker(node: Any) -> list[dict[str, Any]]:
    own = node.get("cache_control") if isinstance(node, dict) else None
    return [own] if isinstance(own, dict) else []


_DATA_KEYS = frozenset({"input", "input_schema", "cache_control"})
"""Keys whose values are data, never blocks that carry markers (tool inputs, schemas)."""


def _block_markers(blocks: Any) -> list[dict[str, Any]]:
    """The markers of a content list in prompt order, at any depth (a tool result's,
    search result's, document's or MCP result's inner blocks before its own: Anthropic
    counts every one; tool inputs and schemas are data, never markers). Walked without
    recursion: a deeply nested body costs no stack."""
    found: list[dict[str, Any]] = []
    stack: list[tuple[Any, bool]] = [(blocks, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, list):
            stack.extend((item, False) for item in reversed(node))
        elif isinstance(node, dict):
            if children_done:
                found.extend(_marker(node))
                continue
            stack.append((node, True))
            inner = [
                v for k, v in node.items() if k not in _DATA_KEYS and isinstance(v, list | dict)
            ]
            stack.extend((value, False) for value in reversed(inner))
    return found


def _message_markers(messages: list[Any]) -> list[dict[str, Any]]:
    return [
        m for message in messages if isinstance(message, dict)
        for m in _block_markers(message.get("content"))
    ]  # fmt: skip


def with_step_breakpoint(
    request: dict[str, Any], step_start: int | None = None
) -> dict[str, Any] | None:
    """``request`` with breakpoints where the previous request ended and, after a
    compaction step, before the first message it rewrote; ``None`` when none is added
    (see module docstring). The request itself is not modified.

    ``step_start`` is the engine's ``report["step_start"]``. Anthropic looks for an
    earlier cache entry only about 20 blocks back from a breakpoint, and a step's
    rewrite may start further back than that from the previous request's end; the
    breakpoint before it reads the prefix the step kept. With room for one breakpoint
    only, that one goes first (at a step the previous end's entry cannot be read).

    A ``request`` that is not a dict or a ``step_start`` that is not an int (or
    ``None``) is a :class:`TypeError` naming it."""
    if not isinstance(request, dict):
        raise TypeError(
            f"request must be a dict (an Anthropic Messages body), got {type(request).__name__}"
        )
    if step_start is not None and (not isinstance(step_start, int) or isinstance(step_start, bool)):
        raise TypeError(f"step_start must be an int or None, got {type(step_start).__name__}")
    messages = request.get("messages")
    if not isinstance(messages, list):
        return None
    last_assistant = next(
        (
            i
            for i in range(len(messages) - 1, -1, -1)
            if isinstance(messages[i], dict) and messages[i].get("role") == "assistant"
        ),
        None,
    )
    if not last_assistant:  # none, or the first message: no earlier request to mark
        return None
    wanted = [last_assistant - 1]
    if step_start is not None and 1 <= step_start < last_assistant:
        wanted.insert(0, step_start - 1)
    out: dict[str, Any] | None = None
    for index in wanted:
        marked = _with_marker_on(out or request, index)
        if marked is not None:
            out = marked
    return out


def _with_marker_on(request: dict[str, Any], index: int) -> dict[str, Any] | None:
    """``request`` with a breakpoint on the last block of message ``index``, or
    ``None`` when it takes none there (see module docstring)."""
    messages = request["messages"]
    target = messages[index]
    content = target.get("content") if isinstance(target, dict) else None
    if not isinstance(content, list) or not content:
        return None
    block = content[-1]
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return None  # a malformed block: the upstream judges it
    if block["type"] not in _CACHEABLE:
        return None
    if "cache_control" in block:
        return None  # the client marked it already
    tools = request.get("tools")
    before = [
        *(m for tool in (tools if isinstance(tools, list) else ()) for m in _marker(tool)),
        *_block_markers(request.get("system")),
        *_message_markers(messages[: index + 1]),
    ]
    # a request-level marker (automatic caching) takes a slot and marks the end
    after = [*_message_markers(messages[index + 1 :]), *_marker(request)]
    if not before + after or len(before) + len(after) >= MAX_BREAKPOINTS:
        return None
    # the TTL of the client's next marker (else its previous one): TTLs must not grow
    # along the prompt (a 1-hour entry after a 5-minute one is refused)
    like = after[0] if after else before[-1]
    marked = {**block, "cache_control": dict(like)}
    new_target = {**target, "content": [*content[:-1], marked]}
    return {**request, "messages": [*messages[:index], new_target, *messages[index + 1 :]]}
