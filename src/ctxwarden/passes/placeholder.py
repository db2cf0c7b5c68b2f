"""Placeholder text shared by the lossy passes.

A placeholder says what the output was (size, exit status and, where the call that
produced it is not right before it, the tool and command), keeps every error line
verbatim on its own line (one over :data:`~ctxwarden.signals.MAX_ERROR_LINE` characters cut),
a short head and tail, the distinctive strings the output mentioned that the agent is
most likely to need, and the reference that recalls the original or any line range
(the proxy's recall tool says how, so the placeholder does not repeat it)::

    [ctxwarden: condensed output; original cw:5f3a9c21e0b4 (exit 1, 240 lines, 3,118 tokens)]
    <head line>
    ... (lines 2-239)
    <error lines>
    <tail line>
    [mentions: tests/test_io.py read_config parse_header]

An output its tool flags as failed (``is_error``, a non-zero exit) whose lines match no
error form shows its head and tail however small it is: the header alone would hide
what went wrong. Mentions are separated by a space alone (they never hold one): a comma would cost a
token each, a fifth of the list.

What is shown is what the output holds, in order. The head runs from the output's first
informative line through its ``head_lines``-th (looking at most four lines further in),
every line between included; the tail likewise back from the last. Lines that say
nothing (markup such as ``<output>``, a bare exit code, a shell prompt, a blank line:
the header already carries the exit status) are skipped only at the outer ends. Every
line not shown lies in exactly one ``... (lines A-B)`` range, numbered as recall numbers
lines, and error lines hidden in a range are listed right after its marker; a hidden
stretch no longer than its marker (a blank line and ``OK`` after the tail) is shown
instead. When neither head nor tail is kept, no elision line is written: the header's
line count already says that every line is hidden. An output in colour
is described without its colour codes (its lines and mentions as a terminal shows
them; the header counts the original's tokens). A JSON-wrapped output (older Codex
CLI's ``{"output": "...", "metadata": {"exit_code": 101}}``) is described by the text
its strings hold (:func:`~ctxwarden.json_wrapped.json_view`): its lines, error lines,
mentions and the exit status it states under a key; the header says ``lines in JSON``
and a hidden range is ``... (N lines)``, unnumbered, since recall numbers the lines of
the original, which the JSON writes as one.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace

from ctxwarden.json_wrapped import json_view
from ctxwarden.passes.base import Segment
from ctxwarden.signals import (
    ANSI_RE,
    error_lines,
    exit_status,
    mention_scores,
    shown_error_line,
)
from ctxwarden.tokens.counter import TokenCounter

__all__ = ["Digest", "build_placeholder", "describe", "mentions_line", "placeholder_parts"]

_MAX_COMMAND = 120


def mentions_line(words: Collection[str]) -> str:
    """The placeholder's last line listing ``words`` (distinctive strings, no spaces)."""
    return "[mentions: " + " ".join(words) + "]"


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
    head_tail_min_tokens: int = 0
    """Outputs of fewer tokens show no head or tail line."""
    max_keywords: int = 120
    keep_errors: bool = True
    min_mention_score: float = 0.0
    """Mentions scoring lower (see :func:`ctxwarden.signals.mention_scores`) are left out."""
    name_action: bool = True
    """Say which tool and command produced the output (needless next to its call)."""


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


_MARKUP = re.compile(r"</?[A-Za-z][\w-]*>")
_PROMPT = re.compile(r"^\S{0,40}[$#>%]$")


def informative(line: str) -> bool:
    """False for lines that carry nothing once the header is read: blank lines, bare
    markup (``<output>``), a lone number (an exit code) or a shell prompt."""
    rest = _MARKUP.sub("", line).strip()
    if not rest or _PROMPT.match(rest):
        return False
    return _has_alnum(rest, 3) and not rest.lstrip("-").isdigit()


def _has_alnum(text: str, count: int) -> bool:
    """Whether ``text`` holds at least ``count`` alphanumeric characters (stops at the
    ``count``-th: a line can be a megabyte of minified code)."""
    for c in text:
        if c.isalnum():
            count -= 1
            if count <= 0:
                return True
    return count <= 0


def _pick(lines: list[str], want: int, *, reverse: bool, scan: int = 4) -> list[int]:
    """Indexes of up to ``want`` informative lines from one end (looking at most
    ``want + scan`` lines in)."""
    order = range(len(lines) - 1, -1, -1) if reverse else range(len(lines))
    picked: list[int] = []
    for looked, i in enumerate(order):
        if len(picked) >= want or looked >= want + scan:
            break
        if informative(lines[i]):
            picked.append(i)
    return sorted(picked)


def _span(picked: list[int]) -> tuple[int, int] | None:
    """The lines ``[start, end)`` from the first to the last of ``picked``, every
    line between them included (a run shown must be consecutive lines)."""
    return (picked[0], picked[-1] + 1) if picked else None


def build_placeholder(
    segment: Segment,
    ref: str,
    digest: Digest,
    *,
    verb: str = "condensed output",
    visible: Collection[str] = (),
    counter: TokenCounter | None = None,
) -> tuple[str, tuple[str, ...]] | None:
    """The placeholder text and the error lines it keeps verbatim.

    ``visible`` holds strings the request shows elsewhere (the agent's own messages and
    tool calls); they are not repeated in the mentions list. With a ``counter``,
    ``None`` when the placeholder could save nothing: its text without mentions (which
    only add) is already as long in tokens as the segment (an output of thousands of
    error lines, all kept). Then the mentions, the costly part, are not looked for.
    """
    segment, wrapper = _viewed(segment)
    body, errors, error_set = _body(segment, ref, digest, verb, wrapper=wrapper)
    if counter is not None and counter.count_text(body) >= segment.tokens:
        return None
    keywords = _mentions(segment, body, error_set, digest)
    kept = [w for w in keywords if w not in visible][: digest.max_keywords]
    if kept:
        body = body + "\n" + mentions_line(kept)
    return body, errors


def placeholder_parts(
    segment: Segment, ref: str, digest: Digest, *, verb: str = "condensed output"
) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """Header and body, kept error lines, and the candidate mentions, best first
    (those below ``digest.min_mention_score`` left out; the caller caps the count)."""
    segment, wrapper = _viewed(segment)
    body, errors, error_set = _body(segment, ref, digest, verb, wrapper=wrapper)
    return body, errors, tuple(_mentions(segment, body, error_set, digest))


def _viewed(segment: Segment) -> tuple[Segment, str | None]:
    """``segment`` as its placeholder describes it, and the JSON it was read from: a
    JSON-wrapped output's text is read as its view (:func:`~ctxwarden.json_wrapped.json_view`),
    either way without colour codes (:func:`_uncoloured`)."""
    view = json_view(segment.text)
    if view is None:
        return _uncoloured(segment), None
    return _uncoloured(replace(segment, text=view)), segment.text


def _uncoloured(segment: Segment) -> Segment:
    """``segment`` with its text read without colour codes (``32mcheck_handler`` is no
    name; a head line full of codes is noise), its token count the original's; the
    same lines (:data:`~ctxwarden.signals.ANSI_RE` never crosses a line break)."""
    if "\x1b" not in segment.text:
        return segment
    return replace(segment, text=ANSI_RE.sub("", segment.text))


def _mentions(segment: Segment, body: str, error_set: set[str], digest: Digest) -> list[str]:
    """The candidate mentions of ``segment``'s placeholder whose text is ``body``."""
    return _not_shown(mention_scores(segment.text), body, error_set, digest)


def _body(
    segment: Segment, ref: str, digest: Digest, verb: str, *, wrapper: str | None = None
) -> tuple[str, tuple[str, ...], set[str]]:
    """A placeholder's text before its mentions, the error lines it keeps, and those
    as a set. ``wrapper``: the JSON output whose view ``segment``'s text is (its exit
    status may be under a key of the JSON)."""
    text = segment.text
    lines = text.split("\n")
    n = len(lines)
    status = exit_status(text if wrapper is None else wrapper)
    facts = []
    if status is not None:
        facts.append(f"exit {status}")
    elif segment.is_error:
        facts.append("error")
    facts.append(f"{n:,} lines" if wrapper is None else f"{n:,} lines in JSON")
    facts.append(f"{segment.tokens:,} tokens")
    what = f"{verb} of {describe(segment)}" if digest.name_action else verb
    header = f"[ctxwarden: {what}; original {ref} ({', '.join(facts)})]"
    errors = tuple(error_lines(text)) if digest.keep_errors else ()
    # a failure that names itself in no line of a known error form (a usage message on
    # stderr) still shows its head and tail, however small: the header alone would hide
    # what went wrong
    failed = segment.is_error or bool(status)
    small = segment.tokens < digest.head_tail_min_tokens and not (failed and not errors)
    error_set = set(errors)
    if small:
        head = tail = None
    else:
        head = _span(_pick(lines, min(digest.head_lines, n), reverse=False))
        start = head[1] if head else 0
        picked = _pick(lines, min(digest.tail_lines, n), reverse=True)
        tail = _span([i for i in picked if i >= start])
    runs = [run for run in (head, tail) if run is not None]
    numbered = wrapper is None  # recall numbers the original's lines: the JSON has one
    if not runs:  # the header's count says that every line is hidden
        return "\n".join([header, *map(shown_error_line, errors)]), errors, error_set

    def shown(i: int) -> str:  # error lines as shown_error_line shows them; others clipped
        if lines[i] in error_set:
            return shown_error_line(lines[i])
        return _clip(lines[i], digest.max_line_chars)

    # the output as shown runs and hidden gaps, in order; a gap that takes no more
    # characters than its marker would (see _short) is shown in full instead
    run_lines = {lines[i] for begin, end in runs for i in range(begin, end)}
    parts: list[tuple[int, int, bool]] = []
    at = 0
    for begin, end in [*runs, (n, n)]:
        if begin > at:
            parts.append((at, begin, _short(lines, at, begin, error_set, run_lines, numbered)))
        if end > begin:
            parts.append((begin, end, True))
        at = end
    shown_lines = run_lines.union(*(lines[begin:end] for begin, end, full in parts if full))
    pending = {e for e in errors if e not in shown_lines}  # listed under their marker
    body = [header]
    for begin, end, full in parts:
        if full:
            body.extend(shown(i) for i in range(begin, end))
            continue
        body.append(_marker(begin, end, numbered))
        for i in range(begin, end) if pending else ():  # each once, where first hidden
            if lines[i] in pending:
                pending.discard(lines[i])
                body.append(shown_error_line(lines[i]))
    return "\n".join(body), errors, error_set


def _marker(begin: int, end: int, numbered: bool = True) -> str:
    """The elision line of the hidden lines ``[begin, end)`` (numbered from 1, as
    recall numbers them; else their count alone)."""
    if not numbered:
        return f"... ({end - begin:,} lines)"
    return f"... (lines {begin + 1}-{end})"


def _short(
    lines: list[str],
    begin: int,
    end: int,
    error_set: Collection[str],
    run_lines: Collection[str],
    numbered: bool = True,
) -> bool:
    """Whether the lines ``[begin, end)`` take no more characters than the marker that
    would hide them, not counting the error lines the marker would list anyway (the
    first of each one that no run shows)."""
    room = len(_marker(begin, end, numbered)) + 1
    free: set[str] = set()
    for i in range(begin, end):
        line = lines[i]
        if line in error_set and line not in run_lines and line not in free:
            free.add(line)
            continue
        room -= len(line) + 1
        if room < 0:
            return False
    return True


_TOKENS = (re.compile(r"\S+"), re.compile(r"[\w./-]+"), re.compile(r"\w+"))


def _tokens(text: str) -> set[str]:
    return {t for pattern in _TOKENS for t in pattern.findall(text)}


def _not_shown(
    scored: Collection[tuple[str, float]], shown_text: str, error_set: set[str], digest: Digest
) -> list[str]:
    """The mentions scoring enough that ``shown_text`` does not show, in order. A
    mention is shown only as a whole token of it: ``10`` inside ``710 tokens`` or
    ``parse`` inside ``parse_header`` is not the string the agent would look for (and
    a set lookup per mention is linear, where a substring search per mention took
    seconds on a placeholder with thousands of error lines)."""
    shown = _tokens(shown_text)
    return [
        w
        for w, score in scored
        if score >= digest.min_mention_score and w not in error_set and w not in shown
    ]
