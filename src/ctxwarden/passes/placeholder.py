"""Placeholder text shared by the lossy passes.

A placeholder says what the output was (tool, command, size, exit status), keeps every
error line verbatim on its own line, a short head and tail, the distinctive strings the
output mentioned, and the reference that recalls the original or any line range::

    [ctxwarden: condensed output of bash `pytest -q` (exit 1, 240 lines, 3,118 tokens).
    Recall: cw:5f3a9c21e0b4 (whole, or lines A-B)]
    <head lines>
    ... (lines 4-237 condensed)
    <error lines>
    <tail lines>
    [mentions: tests/test_io.py, read_config, 1343]
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ctxwarden.passes.base import Segment
from ctxwarden.signals import distinctive_strings, error_lines, exit_status

__all__ = ["Digest", "build_placeholder", "describe", "placeholder_parts"]

_MAX_COMMAND = 120


def describe(segment: Segment) -> str:
    """``bash `cmd``` style label of the action that produced a segment."""
    name = segment.tool_name or "tool"
    command = " ".join(segment.command.split())
    if len(command) > _MAX_COMMAND:
        command = command[: _MAX_COMMAND - 3] + "..."
    return f"{name} `{command}`" if command else name


@dataclass(frozen=True, slots=True)
class Digest:
    """How much of an output a placeholder keeps."""

    head_lines: int = 3
    tail_lines: int = 3
    max_line_chars: int = 240
    max_keywords: int = 120
    keep_errors: bool = True


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def build_placeholder(
    segment: Segment,
    ref: str,
    digest: Digest,
    *,
    verb: str = "condensed output",
    visible: Collection[str] = (),
) -> tuple[str, tuple[str, ...]]:
    """The placeholder text and the error lines it keeps verbatim.

    ``visible`` holds strings the request shows elsewhere (the agent's own messages and
    tool calls); they are not repeated in the mentions list.
    """
    body, errors, keywords = placeholder_parts(segment, ref, digest, verb=verb)
    kept = [w for w in keywords if w not in visible][: digest.max_keywords]
    if kept:
        body = body + "\n[mentions: " + ", ".join(kept) + "]"
    return body, errors


def placeholder_parts(
    segment: Segment, ref: str, digest: Digest, *, verb: str = "condensed output"
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Header and body, kept error lines, and every candidate mention (unfiltered)."""
    text = segment.text
    lines = text.split("\n")
    n = len(lines)
    status = exit_status(text)
    facts = []
    if status is not None:
        facts.append(f"exit {status}")
    elif segment.is_error:
        facts.append("error")
    facts.append(f"{n:,} lines")
    facts.append(f"{segment.tokens:,} tokens")
    header = (
        f"[ctxwarden: {verb} of {describe(segment)} ({', '.join(facts)}). "
        f"Recall: {ref} (whole, or lines A-B)]"
    )
    errors = tuple(error_lines(text)) if digest.keep_errors else ()
    head_n = min(digest.head_lines, n)
    tail_n = min(digest.tail_lines, max(0, n - head_n))
    shown: list[str] = [_clip(line, digest.max_line_chars) for line in lines[:head_n]]
    body = [header, *shown]
    hidden_from, hidden_to = head_n + 1, n - tail_n
    if hidden_to >= hidden_from:
        body.append(f"... (lines {hidden_from}-{hidden_to} condensed)")
    error_set = set(errors)
    body.extend(e for e in errors if e not in lines[:head_n] and e not in lines[n - tail_n :])
    tail = [_clip(line, digest.max_line_chars) for line in lines[n - tail_n :]] if tail_n else []
    body.extend(tail)
    shown_text = "\n".join(body)
    keywords = tuple(
        w for w in distinctive_strings(text) if w not in shown_text and w not in error_set
    )
    return shown_text, errors, keywords
