"""Strict gates: thresholds a replay must meet, read from a ``[gates]`` TOML table.

::

    [gates]
    min_reduction = 0.20             # total input-token reduction vs exact
    min_support = 0.95               # total next-action support
    min_critical = 1.0               # total critical-signal share
    max_p95_ms = 50                  # p95 condense time
    max_integrity_violations = 0     # all categories together
    min_cost_saving = 0.0            # cache-adjusted saving, the worse of both styles
    min_median_reduction = 0.40      # the median session's reduction
    min_worst_session_saving = -0.02 # no session dearer than this (worse of both styles)

Gates judge every engine configuration of the run (baselines are references, not
candidates); a run without engine configurations judges every non-``exact``
subject. Unset gates are not checked, except ``max_integrity_violations``, which is
0 unless set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, ValidationError

from ctxwarden.config import EngineConfig, config_error, read_toml
from ctxwarden.errors import ConfigError
from ctxwarden.replay.runner import ReplayResult

__all__ = ["Gates", "check_gates", "gates_checked", "load_gates"]


class Gates(BaseModel):
    """The thresholds (see module docstring); unknown keys are rejected, and so is a
    value that is not a finite number (``nan`` was "less than or equal to 1")."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    min_reduction: StrictFloat | None = Field(None, ge=-10, le=1, description="Total reduction.")
    min_support: StrictFloat | None = Field(None, ge=0, le=1, description="Total support.")
    min_critical: StrictFloat | None = Field(None, ge=0, le=1, description="Total critical share.")
    max_p95_ms: float | None = Field(None, gt=0, description="p95 condense milliseconds.")
    max_integrity_violations: StrictInt = Field(0, ge=0, description="Violations, all categories.")
    min_cost_saving: StrictFloat | None = Field(
        None, ge=-10, le=1, description="Cache-adjusted saving (worse of both styles)."
    )
    min_median_reduction: StrictFloat | None = Field(
        None, ge=-10, le=1, description="The median session's reduction."
    )
    min_worst_session_saving: StrictFloat | None = Field(
        None, ge=-10, le=1, description="The worst session's saving (worse of both styles)."
    )


def load_gates(path: str | Path | None) -> Gates:
    """The ``[gates]`` table of a TOML file: a file holding only that table, or an
    engine config with one. A top-level key that is neither ``gates`` nor an engine
    config key is a :class:`ConfigError` naming it (a gate written above the table
    would otherwise check nothing)."""
    if path is None:
        return Gates()
    data = read_toml(path)
    for key in data:
        if key == "gates" or key in EngineConfig.model_fields:
            continue
        hint = (
            "gates go under [gates]"
            if key in Gates.model_fields
            else "a gates file holds a [gates] table, beside engine config keys"
        )
        raise ConfigError(f"unknown key ({hint})", key, str(path))
    table: Any = data.get("gates", {})
    if not isinstance(table, dict):
        raise ConfigError("must be a table", "gates", str(path))
    try:
        return Gates.model_validate(table)
    except ValidationError as exc:
        raise config_error(exc, "gates").in_file(path) from exc


_ORDER = (
    ("min_reduction", ">="),
    ("min_support", ">="),
    ("min_critical", ">="),
    ("max_p95_ms", "<="),
    ("max_integrity_violations", "<="),
    ("min_cost_saving", ">="),
    ("min_median_reduction", ">="),
    ("min_worst_session_saving", ">="),
)


def gates_checked(result: ReplayResult, gates: Gates) -> str:
    """One line naming the gates :func:`check_gates` checks and the configurations it
    judges (``min_reduction >= 0.2, max_integrity_violations <= 0 on balanced``)."""
    values = gates.model_dump()
    checked = ", ".join(
        f"{name} {sign} {values[name]:g}" for name, sign in _ORDER if values[name] is not None
    )
    judged = ", ".join(s.name for s in _judged(result)) or "no configuration"
    return f"{checked} on {judged}"


def _judged(result: ReplayResult) -> list[Any]:
    engines = [s for s in result.subjects if s.kind == "engine"]
    return engines or [s for s in result.subjects if s.name != "exact"]


def check_gates(result: ReplayResult, gates: Gates) -> list[str]:
    """One message per failed gate and configuration (empty: every gate passed)."""
    failures: list[str] = []
    for subject in _judged(result):
        a = subject.aggregate()
        saving = [a["cost"][s]["total"] for s in ("openai", "anthropic")]
        worst_saving = None if None in saving else min(saving)
        per_session = [a["cost"][s]["worst"] for s in ("openai", "anthropic")]
        worst_session = None if None in per_session else min(per_session)
        checks: list[tuple[str, float | None, float | None, bool]] = [
            ("min_reduction", gates.min_reduction, a["reduction"]["total"], True),
            ("min_support", gates.min_support, a["support"]["total"], True),
            ("min_critical", gates.min_critical, a["critical"]["total"], True),
            ("max_p95_ms", gates.max_p95_ms, a["overhead"]["p95_ms"], False),
            (
                "max_integrity_violations",
                gates.max_integrity_violations,
                a["violations"]["total"],
                False,
            ),
            ("min_cost_saving", gates.min_cost_saving, worst_saving, True),
            ("min_median_reduction", gates.min_median_reduction, a["reduction"]["median"], True),
            ("min_worst_session_saving", gates.min_worst_session_saving, worst_session, True),
        ]
        if not a.get("requests"):
            if any(limit is not None for _, limit, _, _ in checks):
                failures.append(f"{subject.name}: gates set but nothing was replayed")
            continue
        for name, limit, value, is_min in checks:
            if limit is None:
                continue
            if value is None:
                failures.append(f"{subject.name}: gate {name} failed: not measured")
                continue
            if (value < limit) if is_min else (value > limit):
                sign = ">=" if is_min else "<="
                failures.append(
                    f"{subject.name}: gate {name} failed: {value:.4g} (needs {sign} {limit:g})"
                )
    return failures
