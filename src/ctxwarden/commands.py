"""What a tool call ran, read from its arguments: for labels, relevance and supersession.

:func:`command_of` is the call as an agent would name it (its command, or the file or
URL it targets, then its other arguments): placeholders label an output with it and
relevance reads the paths in it. :func:`action_of` is the same without the arguments
that only annotate the call (:data:`ANNOTATIONS`): two runs of one command that differ
in those did the same thing, which is what supersession asks.
"""

from __future__ import annotations

import shlex
from typing import Any

import orjson

from ctxwarden.memo import text_memo
from ctxwarden.signals import is_path

__all__ = ["ANNOTATIONS", "action_of", "command_of"]

_COMMAND_KEYS = ("command", "cmd", "commands", "path", "file_path", "query")

ANNOTATIONS: dict[str, str] = {
    # prose for the user or the approver
    "description": "text",  # Claude Code Bash ("Run the unit tests")
    "explanation": "text",  # Cursor ("Reading the module to find the bug")
    "justification": "text",  # Codex, with an escalation request
    # approval and permission flags (Cline's XML protocol sends "true" / "false")
    "requires_approval": "flag",  # Cline
    "require_user_approval": "flag",  # Cursor
    "with_escalated_permissions": "flag",  # Codex
}
"""Arguments that annotate a call without changing what it reads or runs, by name and
the kind of value they hold: :func:`action_of` leaves one out only when its value is of
that kind (a ``requires_approval`` holding a sentence is kept), and only from the
arguments that follow a command or target (a tool whose arguments name none, an issue tracker's
``{"title", "description"}``, keeps them all: there the description is the content).
Deliberately a small named set: a rule by shape (every prose value) would also drop a
``content``, a ``prompt`` or a search ``pattern``, which change what a call does;
flags that do (``run_in_background``, ``is_background``), output limits
(``max_output_tokens``) and timeouts stay too: a run stopped sooner shows less (a
re-run killed by a shorter timeout is not the complete run it would stand for)."""


@text_memo()
def command_of(arguments: str) -> str:
    """The command a tool call ran: the ``command`` / ``cmd`` / ``commands`` / ``path``
    / ``file_path`` / ``query`` argument (an argv list written as a shell would read it,
    :func:`shlex.join`), else the first argument, by key, that names a file or a URL
    (Cursor's ``target_file``, a fetch tool's ``url``; an annotation never does),
    followed by the other arguments as JSON (by key, prose last: a label cut short
    keeps what identifies the call); else all arguments as JSON, by key; not JSON, the
    arguments text itself. Only the leading and trailing whitespace of the command is
    stripped (two commands that differ inside, in a heredoc's indentation or a quoted
    pattern's spacing, are different commands)."""
    return _read(arguments, annotations=True)


@text_memo()
def action_of(arguments: str) -> str:
    """:func:`command_of` without the annotations (:data:`ANNOTATIONS`) among the
    arguments that follow the command or target: what the call does. Two calls have
    the same action exactly when their command and their other arguments, annotations
    aside, are the same."""
    return _read(arguments, annotations=False)


def _read(arguments: str, *, annotations: bool) -> str:
    try:
        args = orjson.loads(arguments) if arguments else {}
        return _command_in(args, annotations)
    except (orjson.JSONDecodeError, TypeError, RecursionError):  # not JSON, or too deep
        return arguments.strip()


def _command_in(args: Any, annotations: bool) -> str:
    """The command of parsed arguments, with or without their ``annotations`` (raises
    ``TypeError`` for values nested past what orjson writes)."""
    if not isinstance(args, dict):
        return str(args).strip()
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            # argv form (Codex): quoted as a shell reads it, so that ["rg", "def parse"]
            # and ["rg", "def", "parse"] stay apart; the other arguments still count
            value = shlex.join(value)
        if isinstance(value, str):
            return _with_rest(value, args, key, annotations)
    for key in sorted(args):
        value = args[key]
        if isinstance(value, str) and not _annotates(key, value) and _names_target(value):
            return _with_rest(value, args, key, annotations)
    return _as_json(args) if args else "{}"


def _with_rest(value: str, args: dict[str, Any], key: str, annotations: bool) -> str:
    rest = {k: v for k, v in args.items() if k != key and (annotations or not _annotates(k, v))}
    return value.strip() + (" " + _as_json(rest) if rest else "")


def _annotates(key: str, value: Any) -> bool:
    """Whether argument ``key`` holding ``value`` is an annotation (:data:`ANNOTATIONS`)."""
    kind = ANNOTATIONS.get(key)
    if kind == "text":
        return isinstance(value, str)
    if kind == "flag":
        return isinstance(value, bool) or value in ("true", "false")
    if kind == "number":
        if isinstance(value, str):
            return value.isascii() and value.isdigit()
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _as_json(args: dict[str, Any]) -> str:
    """``args`` as a JSON object, keys sorted at every level, except that the values
    holding whitespace (prose: an ``explanation``, a ``prompt``, a file's content) come
    after the others."""
    order = sorted(args, key=lambda k: (_is_prose(args[k]), k))
    items = (
        orjson.dumps(k).decode() + ":" + orjson.dumps(args[k], option=orjson.OPT_SORT_KEYS).decode()
        for k in order
    )
    return "{" + ",".join(items) + "}"


def _is_prose(value: Any) -> bool:
    return isinstance(value, str) and any(c.isspace() for c in value)


def _names_target(value: str) -> bool:
    """Whether ``value`` is a file path or a URL alone (one word)."""
    if not value or len(value) > 2_000 or any(c.isspace() for c in value):
        return False
    return "://" in value or is_path(value.lstrip("/~"))
