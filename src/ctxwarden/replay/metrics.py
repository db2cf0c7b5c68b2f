"""Per-session figures and their aggregation (median, total, worst).

Every share is ``visible / total`` over counted items; a session with nothing to
count (no next-action strings, no error lines, nothing condensed) has ``None`` and is
left out of medians and worsts rather than counted as perfect. *Total* figures are
ratios of sums over all requests of all sessions (not a mean of session ratios);
*worst* names the session with the lowest share (highest for costs and violations).

Cost is in units of one uncached input token. ``saving`` is ``1 - cost / exact cost``
for the same sessions under the same cache simulation, so a configuration that breaks
the cached prefix can have a negative saving despite sending fewer tokens.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SessionMetrics", "aggregate", "percentile", "ratio"]


def ratio(num: float, den: float) -> float | None:
    """``num / den``, or ``None`` when there is nothing to divide."""
    return num / den if den else None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


@dataclass(slots=True)
class SessionMetrics:
    """Everything measured for one session through one subject."""

    session: str
    model: str | None
    tokens: list[int] = field(default_factory=list)
    exact_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    cost_openai: list[float] = field(default_factory=list)
    cost_anthropic: list[float] = field(default_factory=list)
    exact_cost_openai: float = 0.0
    exact_cost_anthropic: float = 0.0
    ms: list[float] = field(default_factory=list)
    support_visible: int = 0
    support_total: int = 0
    critical_visible: int = 0
    critical_total: int = 0
    recoverable_tokens: int = 0
    condensed_tokens: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    rewrites: int = 0
    compaction_steps: int = 0
    prefix_breaks: int = 0
    rollbacks: int = 0
    fallbacks: int = 0
    segment_failures: int = 0
    transforms: dict[str, dict[str, int]] = field(default_factory=dict)
    bands: Counter[str] = field(default_factory=Counter)
    fallback_reasons: Counter[str] = field(default_factory=Counter)
    file: str = ""
    """The input file the session came from (ids may repeat across files)."""
    source: str = ""
    """Where the session was recorded, as its file says (an agent, a benchmark)."""

    @property
    def requests(self) -> int:
        return len(self.tokens)

    def reduction(self) -> float | None:
        r = ratio(sum(self.tokens), sum(self.exact_tokens))
        return None if r is None else 1 - r

    def saving(self, style: str) -> float | None:
        cost = sum(self.cost_openai if style == "openai" else self.cost_anthropic)
        exact = self.exact_cost_openai if style == "openai" else self.exact_cost_anthropic
        r = ratio(cost, exact)
        return None if r is None else 1 - r

    def support(self) -> float | None:
        return ratio(self.support_visible, self.support_total)

    def critical(self) -> float | None:
        return ratio(self.critical_visible, self.critical_total)

    def recoverable(self) -> float | None:
        return ratio(self.recoverable_tokens, self.condensed_tokens)

    def add_report(self, report: dict[str, Any]) -> None:
        """Fold an engine report's decisions into the session."""
        self.rewrites += int(bool(report.get("rewritten")))
        self.compaction_steps += int(bool(report.get("compaction_step")))
        self.rollbacks += int(report.get("rollbacks") or 0)
        self.fallbacks += int(report.get("fallbacks") or 0)
        self.segment_failures += int(report.get("segment_failures") or 0)
        if report.get("band"):
            self.bands[str(report["band"])] += 1
        if report.get("fallback_reason"):
            self.fallback_reasons[str(report["fallback_reason"]).split(":")[0]] += 1
        for name, t in (report.get("transforms") or {}).items():
            slot = self.transforms.setdefault(str(name), {"count": 0, "tokens_saved": 0})
            slot["count"] += int(t.get("count") or 0)
            slot["tokens_saved"] += int(t.get("tokens_saved") or 0)

    def summary(self) -> dict[str, Any]:
        """The session's figures as plain data (the ``--json`` per-session record)."""
        return {
            "session": self.session,
            "file": self.file,
            "source": self.source,
            "model": self.model,
            "requests": self.requests,
            "tokens": sum(self.tokens),
            "exact_tokens": sum(self.exact_tokens),
            "reduction": self.reduction(),
            "cost_openai": round(sum(self.cost_openai), 1),
            "cost_anthropic": round(sum(self.cost_anthropic), 1),
            "saving_openai": self.saving("openai"),
            "saving_anthropic": self.saving("anthropic"),
            "support": self.support(),
            "support_counted": self.support_total,
            "critical": self.critical(),
            "critical_counted": self.critical_total,
            "recoverable": self.recoverable(),
            "violations": dict(self.violations),
            "violation_total": sum(self.violations.values()),
            "p95_ms": round(percentile(self.ms, 0.95), 3),
            "rewrites": self.rewrites,
            "compaction_steps": self.compaction_steps,
            "prefix_breaks": self.prefix_breaks,
            "rollbacks": self.rollbacks,
            "fallbacks": self.fallbacks,
            "segment_failures": self.segment_failures,
            "transforms": self.transforms,
            "bands": dict(self.bands),
            "turns": {
                "tokens": self.tokens,
                "exact_tokens": self.exact_tokens,
                "cached_tokens": self.cached_tokens,
                "cost_openai": [round(c, 1) for c in self.cost_openai],
                "cost_anthropic": [round(c, 1) for c in self.cost_anthropic],
                "ms": [round(m, 2) for m in self.ms],
            },
        }


def _stat(
    sessions: Sequence[SessionMetrics],
    get: Callable[[SessionMetrics], float | None],
    total: float | None,
    worst_is_max: bool = False,
) -> dict[str, Any]:
    pairs = [(v, s.session) for s in sessions if (v := get(s)) is not None]
    if not pairs:
        return {"total": total, "median": None, "worst": None, "worst_session": None}
    worst = max(pairs) if worst_is_max else min(pairs)
    return {
        "total": total,
        "median": statistics.median(v for v, _ in pairs),
        "worst": worst[0],
        "worst_session": worst[1],
    }


def aggregate(sessions: Sequence[SessionMetrics]) -> dict[str, Any]:
    """Aggregate figures of one subject over all its sessions (see module docstring)."""
    tokens = sum(sum(s.tokens) for s in sessions)
    exact = sum(sum(s.exact_tokens) for s in sessions)
    ms = [m for s in sessions for m in s.ms]
    costs: dict[str, dict[str, Any]] = {}

    def saving_of(style: str) -> Callable[[SessionMetrics], float | None]:
        return lambda s: s.saving(style)

    for style in ("openai", "anthropic"):
        cost = sum(sum(s.cost_openai if style == "openai" else s.cost_anthropic) for s in sessions)
        ex = sum(
            s.exact_cost_openai if style == "openai" else s.exact_cost_anthropic for s in sessions
        )
        saving = ratio(cost, ex)
        costs[style] = {
            "cost": round(cost, 1),
            "exact_cost": round(ex, 1),
            **_stat(sessions, saving_of(style), None if saving is None else 1 - saving),
        }
    red = ratio(tokens, exact)
    violations: Counter[str] = Counter()
    transforms: dict[str, dict[str, int]] = {}
    bands: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for s in sessions:
        violations.update(s.violations)
        bands.update(s.bands)
        reasons.update(s.fallback_reasons)
        for name, t in s.transforms.items():
            slot = transforms.setdefault(name, {"count": 0, "tokens_saved": 0})
            slot["count"] += t["count"]
            slot["tokens_saved"] += t["tokens_saved"]
    return {
        "sessions": len(sessions),
        "requests": sum(s.requests for s in sessions),
        "tokens": tokens,
        "exact_tokens": exact,
        "reduction": _stat(sessions, SessionMetrics.reduction, None if red is None else 1 - red),
        "cost_nocache": tokens,
        "cost": costs,
        "support": _stat(
            sessions,
            SessionMetrics.support,
            ratio(sum(s.support_visible for s in sessions), sum(s.support_total for s in sessions)),
        ),
        "critical": _stat(
            sessions,
            SessionMetrics.critical,
            ratio(
                sum(s.critical_visible for s in sessions), sum(s.critical_total for s in sessions)
            ),
        ),
        "recoverable": _stat(
            sessions,
            SessionMetrics.recoverable,
            ratio(
                sum(s.recoverable_tokens for s in sessions),
                sum(s.condensed_tokens for s in sessions),
            ),
        ),
        "violations": {
            "total": sum(violations.values()),
            "by_category": dict(violations),
            "sessions_affected": sum(1 for s in sessions if s.violations),
        },
        "overhead": {
            "p50_ms": round(percentile(ms, 0.5), 3),
            "p95_ms": round(percentile(ms, 0.95), 3),
            "max_ms": round(max(ms, default=0.0), 3),
        },
        "decisions": {
            "rewrites": sum(s.rewrites for s in sessions),
            "compaction_steps": sum(s.compaction_steps for s in sessions),
            "prefix_breaks": sum(s.prefix_breaks for s in sessions),
            "rollbacks": sum(s.rollbacks for s in sessions),
            "fallbacks": sum(s.fallbacks for s in sessions),
            "segment_failures": sum(s.segment_failures for s in sessions),
            "fallback_reasons": dict(reasons),
            "transforms": transforms,
            "bands": dict(bands),
        },
    }
