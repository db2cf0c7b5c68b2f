"""Normalization: noise removed, meaning kept, the exact original one reference away.

ANSI escape sequences, carriage-return progress bars (only the final state of a line
is kept), runs of identical lines (collapsed with a count), trailing whitespace and
pretty-printed JSON (minified: the whitespace between tokens goes, every value stays as
written). Applied only when it saves ``min_saving_tokens``.

The note after the text names the changes an agent copying it verbatim into an edit
must know of (``[ctxwarden: normalized (JSON minified); exact original: cw:...]``):
JSON minified, trailing whitespace removed, repeated lines folded. Colour codes and
progress bars gone are not named: no edit copies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ctxwarden.memo import MISSING, TEXT_MEMO_BYTES, TEXT_MEMO_LIMIT, BoundedMemo, footprint
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, ref_for
from ctxwarden.passes.config import NormalizeConfig
from ctxwarden.signals import ANSI_RE, LinesShown, error_lines

__all__ = ["NormalizePass", "minified_json", "normalize_text", "normalized_with_changes"]


def _collapse_progress(line: str) -> str:
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p]
    return parts[-1] if parts else ""


MINIFY_MAX = 1_000_000
"""Longer JSON is not minified (a second per 10 MB); the truncation guardrail takes it."""

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[^" \t\n\r]+|[ \t\n\r]+', re.DOTALL)


def minified_json(text: str) -> str:
    """Valid JSON ``text`` without the whitespace between its tokens. Only whitespace
    goes: numbers, escapes and duplicate keys stay as written (a parse and re-dump
    would turn ``1.10`` into ``1.1``, ``1e400`` into ``Infinity``, keep one of two
    equal keys)."""
    return "".join(t for t in _JSON_TOKENS.findall(text) if t[0] not in " \t\n\r")


MINIFIED = "JSON minified"
TRAILING = "trailing whitespace removed"
FOLDED = "repeated lines folded"


def normalize_text(text: str, repeat_run: int = 4, minify_json: bool = True) -> str:
    """The normalized form of ``text`` (see module doc); idempotent."""
    return normalized_with_changes(text, repeat_run, minify_json)[0]


def normalized_with_changes(
    text: str, repeat_run: int = 4, minify_json: bool = True
) -> tuple[str, tuple[str, ...]]:
    """:func:`normalize_text` and the changes it made that its note names
    (:data:`MINIFIED`, :data:`TRAILING`, :data:`FOLDED`, in that order)."""
    stripped = text.strip()
    if minify_json and stripped[:1] in "{[" and "\n" in stripped and len(stripped) <= MINIFY_MAX:
        try:
            json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            minified = minified_json(stripped)
            return minified, ((MINIFIED,) if minified != text else ())
    text = ANSI_RE.sub("", text)
    raw = text.split("\n")
    lines = [_collapse_progress(line).rstrip() for line in raw]
    changes: list[str] = []
    if any(line[-1:].isspace() for line in raw):  # such a line always loses its end
        changes.append(TRAILING)
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i
        while j + 1 < len(lines) and lines[j + 1] == lines[i]:
            j += 1
        run = j - i + 1
        if run >= repeat_run and lines[i]:
            out.append(lines[i])
            out.append(f"[ctxwarden: previous line repeated {run - 1} more times]")
            if FOLDED not in changes:
                changes.append(FOLDED)
        else:
            out.extend(lines[i : j + 1])
        i = j + 1
    return "\n".join(out), tuple(changes)


def _keeps_error_lines(text: str, normalized: str) -> bool:
    """Whether ``normalized`` still shows every error line of ``text`` as the
    condenser's check reads them (:class:`~ctxwarden.signals.LinesShown`: without colour
    codes or trailing spaces, so a coloured error line stays shown once its codes are
    stripped). A CR-ended progress line reduced to its last state would not: the
    rewrite would be rolled back, so it is not proposed."""
    shown = LinesShown(normalized)
    return all(shown.shows(line) for line in error_lines(text))


class NormalizePass:
    """Rewrites noisy outputs to their normalized form plus a reference to the exact text."""

    name = "normalize"

    def __init__(self, config: NormalizeConfig) -> None:
        self.config = config
        self._memo: BoundedMemo[str, tuple[str, str] | None] = BoundedMemo(
            TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES
        )

    def _normalized(self, text: str) -> tuple[str, str] | None:
        """The normalized text and its note's label (``normalized (JSON minified)``),
        or ``None`` when normalization changes nothing or would hide an error line."""
        found: tuple[str, str] | None = self._memo.get(text, MISSING)  # None: memoized
        if found is not MISSING:
            return found
        normalized, changes = normalized_with_changes(
            text, self.config.repeat_run, self.config.minify_json
        )
        result: tuple[str, str] | None = None
        if normalized != text and _keeps_error_lines(text, normalized):
            label = f"normalized ({', '.join(changes)})" if changes else "normalized"
            result = (normalized, label)
        return self._memo.put(text, result, footprint(text) + footprint(result))

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        for segment in ctx.open_segments(decided):
            if segment.tokens < self.config.min_tokens:
                continue
            found = self._normalized(segment.text)
            if found is None:
                continue
            normalized, label = found
            ref = ref_for(segment.text)
            text = f"{normalized}\n[ctxwarden: {label}; exact original: {ref}]"
            saved = segment.tokens - ctx.counter.count_text(text)
            if saved < self.config.min_saving_tokens:
                continue
            out[segment.path] = Replacement(
                text, self.name, originals=((ref, segment.text),), lossless=True
            )
        return out
