"""Recall: the original text behind a reference, whole or as a line range."""

from __future__ import annotations

from ctxwarden.errors import RequestError
from ctxwarden.store.base import REF_PATTERN, Store

__all__ = ["MAX_RECALL_LINES", "checked_ref", "parse_line_range", "recall_text"]

MAX_RECALL_LINES = 5000
"""Lines one range gives at most: ``A-B`` past it ends at line ``A + 4999`` (ask again
from there for more)."""


def parse_line_range(spec: str | None) -> tuple[int, int] | None:
    """``"A-B"`` (1-based, inclusive), ``"A"`` or ``None``; raises :class:`RequestError`."""
    if spec is None or not str(spec).strip():
        return None
    text = str(spec).strip()
    try:
        if "-" in text:
            a, b = text.split("-", 1)
            start, end = int(a), int(b)
        else:
            start = end = int(text)
    except ValueError:
        raise RequestError(f"line range {text!r} is not A-B") from None
    if start < 1 or end < start:
        raise RequestError(f"line range {text!r} is empty or starts before line 1")
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


def recall_text(store: Store, ref: str, lines: str | None = None, *, tenant: str) -> str:
    """The text behind ``ref`` (``cw:<12 hex>``), optionally lines ``A-B`` only.

    Raises :class:`RequestError` for what is not a reference (or not a range), and
    :class:`~ctxwarden.errors.ArtifactMissing` for a reference the store lacks."""
    ref = checked_ref(ref)
    window = parse_line_range(lines)  # a bad range is the caller's error, found or not
    text = store.get(tenant, ref)
    if window is None:
        return text
    start, end = window
    numbered = text.split("\n")  # numbered as the placeholders number them
    if start > len(numbered):
        raise RequestError(
            f"line range {_lines_spec(start, end)} is past the end: {ref} has "
            f"{len(numbered)} line{'' if len(numbered) == 1 else 's'}"
        )
    return "\n".join(numbered[start - 1 : end])


def _lines_spec(start: int, end: int) -> str:
    """``"A-B"`` (or ``"A"``) for a range."""
    return str(start) if start == end else f"{start}-{end}"
