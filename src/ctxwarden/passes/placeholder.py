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

from dataclasses import dataclass

from ctxwarden.passes.base import Segment
from ctxwarden.signals import distinctive_strings, error_lines, exit_status

__all__ = ["Digest", "build_placeholder", "describe"]

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
    segment: Segment, ref: str, digest: Digest, *, verb: str = "condensed output"
) -> tuple[str, tuple[str, ...]]:
    """The placeholder text and the error lines it keeps verbatim."""
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
    visible = "\n".join(body)
    keywords = [
        w for w in distinctive_strings(text) if w not in visible and w not in error_set
    ][: digest.max_keywords]
    if keywords:
        body.append("[mentions: " + ", ".join(keywords) + "]")
    return "\n".join(body), errors
