"""Side-by-side views of one request (original vs condensed) for the worst sessions.

Per session and configuration the runner keeps one *featured* request: the one with
the most integrity violations, then the most lost next-action strings and error
lines, ties going to the later (longer) request. At the end of a session the view is
built only if the session is among the ``limit`` worst so far, ranked by
violations, then next-action support, critical signals and cache-adjusted saving.

A view lists every message item with its text on both sides; texts are cut to
:data:`MAX_CHARS` (unchanged items to :data:`MAX_UNCHANGED_CHARS`) and a changed
item records ``diff = [start, end_original, end_condensed]``: the span that differs
(after the common prefix, before the common suffix) so the report can highlight it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.replay.inputs import ReplayRequest
from ctxwarden.replay.metrics import SessionMetrics
from ctxwarden.replay.wire import item_role, item_texts, items_of

__all__ = ["MAX_CHARS", "MAX_UNCHANGED_CHARS", "Featured", "WorstViews", "build_view"]

MAX_CHARS = 6000
MAX_UNCHANGED_CHARS = 800


@dataclass(frozen=True, slots=True)
class Featured:
    """The request of a session worth showing, with what it lost."""

    turn: int
    request: ReplayRequest
    condensed: dict[str, Any]
    violations: dict[str, int]
    missed: list[str]
    lost: list[str]

    @property
    def rank(self) -> tuple[int, int]:
        return sum(self.violations.values()), len(self.missed) + len(self.lost)

    @classmethod
    def of(
        cls,
        turn: int,
        request: ReplayRequest,
        condensed: dict[str, Any],
        violations: dict[str, int],
        missed: list[str],
        lost: list[str],
    ) -> Featured:
        return cls(turn, request, condensed, violations, missed, lost)


def _badness(m: SessionMetrics) -> tuple[float, ...]:
    support = m.support()
    critical = m.critical()
    saving = m.saving("openai")
    return (
        float(sum(m.violations.values())),
        -(1.0 if support is None else support),
        -(1.0 if critical is None else critical),
        -(0.0 if saving is None else saving),
    )


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… [{len(text) - limit:,} more characters]"


def _text(item: Any) -> str:
    return "\n".join(t for _, t in item_texts(item))


def build_view(featured: Featured) -> dict[str, Any]:
    """The side-by-side data of one featured request (see module docstring)."""
    api = featured.request.api
    before = items_of(featured.request.request, api)
    after = items_of(featured.condensed, api)
    rows = []
    for i in range(max(len(before), len(after))):
        a = before[i] if i < len(before) else None
        b = after[i] if i < len(after) else None
        changed = a is not b and a != b
        ta = _text(a) if a is not None else ""
        tb = _text(b) if b is not None else ""
        limit = MAX_CHARS if changed else MAX_UNCHANGED_CHARS
        row: dict[str, Any] = {
            "index": i,
            "role": item_role(a if a is not None else b),
            "changed": changed,
            "original": _cut(ta, limit),
            "condensed": _cut(tb, limit) if changed else None,
            "original_chars": len(ta),
            "condensed_chars": len(tb),
        }
        if changed:
            start = 0
            limit_common = min(len(ta), len(tb))
            while start < limit_common and ta[start] == tb[start]:
                start += 1
            end = 0
            while end < limit_common - start and ta[-1 - end] == tb[-1 - end]:
                end += 1
            row["diff"] = [start, len(ta) - end, len(tb) - end]
        rows.append(row)
    return {
        "turn": featured.turn,
        "api": api,
        "violations": featured.violations,
        "missed_strings": featured.missed[:50],
        "lost_error_lines": featured.lost[:50],
        "items": rows,
    }


@dataclass(slots=True)
class WorstViews:
    """The ``limit`` worst sessions of one configuration, with their views."""

    limit: int = 8
    _heap: list[tuple[tuple[float, ...], int, str, dict[str, Any]]] = field(default_factory=list)
    _seq: int = 0

    def offer(self, metrics: SessionMetrics, featured: Featured) -> None:
        score = _badness(metrics)
        if self.limit <= 0:
            return
        if len(self._heap) >= self.limit and score <= self._heap[0][0]:
            return
        view = {"session": metrics.session, **build_view(featured)}
        self._seq += 1
        entry = (score, -self._seq, metrics.session, view)
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, entry)
        else:
            heapq.heapreplace(self._heap, entry)

    def worst(self) -> list[dict[str, Any]]:
        """Views, worst session first."""
        return [e[3] for e in sorted(self._heap, key=lambda e: (e[0], e[1]), reverse=True)]
