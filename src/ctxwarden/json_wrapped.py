"""JSON-wrapped tool outputs: the text their strings hold, the exit status their keys state.

An output that is a JSON object or array (older Codex CLI's
``{"output": "...", "metadata": {"exit_code": 1}}``, many MCP tools) holds its text in
string values, every line after a ``\\n`` escape: read as written it is one line, whose
error words are glued to an ``n`` (``nerror[E0308]``). Its *view* is that text decoded,
and the line-based signals (:mod:`ctxwarden.signals`: error lines, lines shown) and
the passes' line counts and kept lines read it instead of the JSON.

The parse is memoized by content, and a cheap shape test comes first, so a plain
output costs two character tests.
"""

from __future__ import annotations

from typing import Any

import orjson

from ctxwarden.memo import text_memo

__all__ = ["json_exit_status", "json_view", "lines_label", "shown_text"]

_EXIT_KEYS = (
    "exit_code",
    "exitCode",
    "exit_status",
    "exitStatus",
    "returncode",
    "return_code",
    "returnCode",
)
_EXIT_DEPTH = 2
"""How deep under the root, through objects only, an exit key is read (the root's,
its ``metadata``'s, a ``result``'s ``metadata``): deeper, or inside an array, it is
one item's status (a CI job of a list), not the output's."""


def _may_be_json(text: str) -> bool:
    """Whether ``text`` could be a JSON object or array (a cheap test before parsing)."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end - start < 2:
        return False
    return (text[start], text[end - 1]) in (("{", "}"), ("[", "]"))


def json_view(text: str) -> str | None:
    """The text a JSON-wrapped output holds, else ``None``.

    An output that is a JSON object or array (outer whitespace ignored) one of whose
    string values spans lines holds its text in those strings. Its view is every
    string value, decoded, in document order, each starting a line (keys and other
    values left out); a view that is such a JSON text again (an MCP result whose text
    is a JSON document) is decoded in turn, so the view of a view is ``None``. A JSON
    text whose strings hold no line break shows its lines as written: ``None``. Error
    lines, line counts, mentions and kept lines of such an output are those of its
    view."""
    if not _may_be_json(text) or "\\n" not in text:
        return None
    return _json_wrapper(text)[0]


def json_exit_status(text: str) -> int | None:
    """The exit status a JSON-wrapped output (one :func:`json_view` reads) states under
    a key, else ``None``: an integer (not a boolean) under ``exit_code``, ``exitCode``,
    ``exit_status``, ``exitStatus``, ``returncode``, ``return_code`` or ``returnCode``
    of an object at most :data:`_EXIT_DEPTH` objects deep (never inside an array), the
    shallowest first; a string value that is a JSON document itself (an MCP result's
    text) is read when the outer one states none. Any other JSON document states none
    (a REST answer's ``status``, a list of jobs each with its own code): a placeholder
    claims no exit status it cannot stand by. :func:`ctxwarden.signals.exit_status`
    reads this first."""
    if not _may_be_json(text) or "\\n" not in text:
        return None
    view, status = _json_wrapper(text)
    return status if view is not None else None


def shown_text(text: str) -> str:
    """The text an output shows: its :func:`json_view` when it is JSON-wrapped, else
    ``text`` itself."""
    view = json_view(text)
    return text if view is None else view


def lines_label(text: str) -> str:
    """How a note counts the lines of an output: ``"1,234 lines"``, or for a
    JSON-wrapped one those of its view, ``"400 lines in JSON"`` (the JSON itself is
    one line)."""
    shown = shown_text(text)
    lines = shown.count("\n") + 1
    return f"{lines:,} lines" if shown is text else f"{lines:,} lines in JSON"


@text_memo()
def _json_wrapper(text: str) -> tuple[str | None, int | None]:
    """:func:`json_view` and :func:`json_exit_status` of a text that may be JSON. A
    string value that is a JSON document itself (an MCP result's text) stands for its
    view and, when the outer document states none, its exit status."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:  # not JSON, or nested past orjson's depth
        return None, None
    if not isinstance(value, dict | list):
        return None, None
    strings: list[str] = []
    status = _walk(value, strings)
    for i, string in enumerate(strings):
        if _may_be_json(string):  # each level doubles the escapes: few levels fit
            inner, inner_status = _json_wrapper(string)
            strings[i] = string if inner is None else inner
            status = inner_status if status is None else status
    if not any("\n" in string for string in strings):
        return None, status
    view = "\n".join(strings)
    inner = json_view(view)  # the strings joined may be JSON again: the view is final
    return view if inner is None else inner, status


def _walk(value: dict[str, Any] | list[Any], strings: list[str]) -> int | None:
    """Appends the string values of ``value`` to ``strings`` in document order and
    returns the exit status its shallowest exit key states (:data:`_EXIT_KEYS`, in an
    object reached from the root through objects only, at most :data:`_EXIT_DEPTH`
    deep), else ``None``."""
    status: tuple[int, int] | None = None  # (depth, status)
    stack: list[tuple[Any, int]] = [(value, 0)]  # depth -1: inside an array
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, list):
            stack.extend((v, -1) for v in reversed(node))
        elif isinstance(node, dict):
            if 0 <= depth <= _EXIT_DEPTH and (status is None or depth < status[0]):
                found = _exit_in(node)
                if found is not None:
                    status = (depth, found)
            below = depth + 1 if depth >= 0 else -1
            stack.extend((v, below) for v in reversed(node.values()))
    return None if status is None else status[1]


def _exit_in(node: dict[str, Any]) -> int | None:
    for key in _EXIT_KEYS:
        value = node.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
