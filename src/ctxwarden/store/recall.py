"""Recall: the original text behind a reference, whole or as a line range."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxwarden.errors import RequestError
from ctxwarden.store.base import REF_PATTERN, Store

__all__ = [
    "MAX_RECALL_LINES",
    "Recalled",
    "checked_ref",
    "parse_line_range",
    "recall",
    "recall_text",
]

MAX_RECALL_LINES = 5000
"""Lines one range gives at most: ``A-B`` past it ends at line ``A + 4999`` (ask again
from there for more)."""


_RANGE = re.compile(r"([0-9]+)(?:\s*-\s*([0-9]+))?")
"""``A`` or ``A-B``: ASCII digits only (``int`` would also take ``1_0``, ``+3`` or
other scripts' digits)."""


_HUGE = 10**18
"""A line number of more digits than this reads as this one: past every text's
end (``int`` of thousands of digits is refused, and slow long before)."""


def _line_number(digits: str) -> int:
    significant = digits.lstrip("0")
    return _HUGE if len(significant) > len(str(_HUGE)) else int(significant or "0")


def _asked_range(spec: str | None) -> tuple[int, int] | None:
    """The range as asked, before the line cap; raises :class:`RequestError`."""
    if spec is None or not str(spec).strip():
        return None
    text = str(spec).strip()
    found = _RANGE.fullmatch(text)
    if found is None:
        raise RequestError(f"line range {text!r} is not A-B")
    start = _line_number(found.group(1))
    end = start if found.group(2) is None else _line_number(found.group(2))
    if start < 1 or end < start:
        raise RequestError(f"line range {text!r} is empty or starts before line 1")
    return start, end


def parse_line_range(spec: str | None) -> tuple[int, int] | None:
    """``"A-B"`` (1-based, inclusive), ``"A"`` or ``None``; raises :class:`RequestError`.
    A range past :data:`MAX_RECALL_LINES` lines ends at line ``A + 4999``."""
    asked = _asked_range(spec)
    if asked is None:
        return None
    start, end = asked
    return start, min(end, start + MAX_RECALL_LINES - 1)


def checked_ref(ref: object) -> str:
    """``ref`` without surrounding whitespace; :class:`RequestError` naming it when it
    is no reference (a malformed string, or no string at all)."""
    if not isinstance(ref, str) or not REF_PATTERN.fullmatch(ref.strip()):
        raise RequestError(
            f"{ref!r} is not a ctxwarden reference (cw: and 12 lowercase hex digits, "
            "e.g. cw:5f3a9c21e0b4)"
        )
    return ref.strip()


@dataclass(frozen=True)
class Recalled:
    """What :func:`recall` found: ``text`` (the original, or the lines asked for) and,
    when :data:`MAX_RECALL_LINES` cut the range short of lines the original has,
    ``cut_at`` (the last line given) and ``wanted`` (the last line that was asked for
    and exists)."""

    text: str
    lines: int
    cut_at: int | None = None
    wanted: int | None = None


def recall(store: Store, ref: str, lines: str | None = None, *, tenant: str) -> Recalled:
    """The text behind ``ref`` (``cw:<12 hex>``), optionally lines ``A-B`` only, and
    whether the line cap cut the range (see :class:`Recalled`).

    Raises :class:`RequestError` for what is not a reference (or not a range), and
    :class:`~ctxwarden.errors.ArtifactMissing` for a reference the store lacks."""
    ref = checked_ref(ref)
    asked = _asked_range(lines)  # a bad range is the caller's error, found or not
    window = parse_line_range(lines)
    text = store.get(tenant, ref)
    if asked is None or window is None:
        return Recalled(text, text.count("\n") + 1)
    start, end = window
    numbered = text.split("\n")  # numbered as the placeholders number them
    if start > len(numbered):
        raise RequestError(
            f"line range {_lines_spec(start, end)} is past the end: {ref} has "
            f"{len(numbered)} line{'' if len(numbered) == 1 else 's'}"
        )
    piece = "\n".join(numbered[start - 1 : end])
    wanted = min(asked[1], len(numbered))
    if wanted > end:
        return Recalled(piece, len(numbered), end, wanted)
    return Recalled(piece, len(numbered))


def recall_text(store: Store, ref: str, lines: str | None = None, *, tenant: str) -> str:
    """The text behind ``ref`` (``cw:<12 hex>``), optionally lines ``A-B`` only (at most
    :data:`MAX_RECALL_LINES` of them: see :func:`recall` to learn of a cut).

    Raises :class:`RequestError` for what is not a reference (or not a range), and
    :class:`~ctxwarden.errors.ArtifactMissing` for a reference the store lacks."""
    return recall(store, ref, lines, tenant=tenant).text


def _lines_spec(start: int, end: int) -> str:
    """``"A-B"`` (or ``"A"``) for a range."""
    return str(start) if start == end else f"{start}-{end}"
