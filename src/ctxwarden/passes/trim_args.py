"""Trim old tool-call arguments: long string values keep their head and tail lines.

Agents write whole files and patches into tool-call arguments; once the call is old
its effect is visible in later outputs. Each string value longer than
``max_value_chars`` keeps ``head_lines`` and ``tail_lines`` and every error line (a
script that prints ``Error: ...``) around a note with the reference to the exact
original arguments. A trim that would take out fewer than ``min_saved_chars``
characters (:class:`~ctxwarden.passes.config.TrimArgsConfig`, 128 by default: about
32 tokens, where the note naming the reference costs a dozen) is not made: a value
just over ``max_value_chars`` (a one-line command, a path, a test id) is what
identifies the call, and a one-line command cut at 40 characters saved one token.
The result stays valid JSON (non-JSON arguments are trimmed as one string), and every
value it keeps is kept exactly: arguments the fast parser cannot read exactly (an
integer beyond 64 bits, ``1e400``) are left whole. That every error line survives is
checked where every replacement is, when the condenser commits it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from ctxwarden.memo import MISSING, TEXT_MEMO_BYTES, TEXT_MEMO_LIMIT, BoundedMemo, footprint
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, ref_for
from ctxwarden.passes.config import TrimArgsConfig
from ctxwarden.signals import is_error_line, shown_error_line

__all__ = ["TrimArgsPass", "trim_value"]


def _worth(value: str, trimmed: str, config: TrimArgsConfig) -> bool:
    """Whether ``trimmed`` saves enough over ``value`` to stand for it."""
    return len(value) - len(trimmed) >= config.min_saved_chars


def trim_value(value: str, ref: str, config: TrimArgsConfig) -> str:
    """``value`` with its middle lines replaced by a note naming ``ref``; every line
    kept (head, tail, error lines) as :func:`~ctxwarden.signals.shown_error_line` shows
    it: one over :data:`~ctxwarden.signals.MAX_ERROR_LINE` characters is cut (a
    minified bundle written through a call is one such line)."""
    lines = value.split("\n")
    head, tail = config.head_lines, config.tail_lines
    if len(lines) <= head + tail + 1:
        if is_error_line(value):
            shown = "\n".join(map(shown_error_line, lines))
            return value if shown == value else f"{shown}\n[ctxwarden: whole text in {ref}]"
        cut = config.max_value_chars // 2
        return f"{value[:cut]}...[ctxwarden: {len(value) - cut:,} more chars in {ref}]"
    middle = lines[head : len(lines) - tail]
    errors = [line for line in middle if is_error_line(line)]
    hidden = len(middle) - len(errors)
    note = f"...[ctxwarden: {hidden:,} more lines in {ref}]"
    kept = [*lines[:head], note, *errors, *(lines[len(lines) - tail :] if tail else [])]
    return "\n".join(map(shown_error_line, kept))


def _exact(arguments: str) -> Any:
    """``arguments`` read by the standard library, which keeps every number exactly
    (``None`` when it is not JSON)."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        return None


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (``2**64 == 2.0**64`` is true in
    Python, but the float would be written back as ``1.8446744073709552e+19``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or a != a  # NaN is itself here


def _trim(node: Any, ref: str, config: TrimArgsConfig) -> tuple[Any, bool]:
    if isinstance(node, str):
        if len(node) > config.max_value_chars:
            trimmed = trim_value(node, ref, config)  # an error line is left as it is
            if _worth(node, trimmed, config):
                return trimmed, True
        return node, False
    if isinstance(node, dict):
        changed = False
        out: dict[str, Any] = {}
        for key, value in node.items():
            out[key], hit = _trim(value, ref, config)
            changed |= hit
        return out, changed
    if isinstance(node, list):
        items = [_trim(v, ref, config) for v in node]
        return [v for v, _ in items], any(hit for _, hit in items)
    return node, False


class TrimArgsPass:
    """Condenses long string values of old tool-call arguments (lossy, recallable)."""

    name = "trim_args"

    def __init__(self, config: TrimArgsConfig) -> None:
        self.config = config
        self._memo: BoundedMemo[str, str | None] = BoundedMemo(TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES)

    def _trimmed(self, arguments: str) -> str | None:
        found: str | None = self._memo.get(arguments, MISSING)  # None is a memoized answer
        if found is not MISSING:
            return found
        result: str | None = None
        ref = ref_for(arguments)
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            parsed = None
            if len(arguments) > self.config.max_value_chars and _exact(arguments) is None:
                trimmed_text = trim_value(arguments, ref, self.config)
                result = trimmed_text if _worth(arguments, trimmed_text, self.config) else None
        try:
            if parsed is not None and not _same(_exact(arguments), parsed):
                parsed = None  # read inexactly (a huge integer became a float): left whole
            if parsed is not None:
                trimmed, changed = _trim(parsed, ref, self.config)
                if changed:
                    result = orjson.dumps(trimmed).decode()
        except (RecursionError, TypeError):  # nested past what can be walked or written
            result = None
        return self._memo.put(arguments, result, footprint(arguments) + footprint(result))

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        for segment in ctx.open_segments(decided, kind="tool_args"):
            if segment.tokens < self.config.min_tokens or segment.path in ctx.recent:
                continue
            trimmed = self._trimmed(segment.text)
            if trimmed is None:
                continue
            out[segment.path] = Replacement(
                trimmed, self.name, originals=((ref_for(segment.text), segment.text),)
            )
        return out
