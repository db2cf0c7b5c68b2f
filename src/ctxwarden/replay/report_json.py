"""The ``--json`` output: every per-session and aggregate figure, no message contents.

Shape (``version`` 1)::

    {"version": 1, "files": N, "duration_s": ..., "peak_rss_bytes": ...,
     "options": {...}, "skipped": [{"file", "session", "error"}],
     "subjects": [{"name", "kind", "peak_condense_bytes", "aggregate": {...},
                   "worst_sessions": [ids], "sessions": [per-session summary]}]}

The aggregate is :func:`ctxwarden.replay.metrics.aggregate`; a session summary is
:meth:`ctxwarden.replay.metrics.SessionMetrics.summary` (with per-turn arrays).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.io import write_atomically
from ctxwarden.replay.runner import ReplayResult

__all__ = ["result_to_dict", "write_json"]


def result_to_dict(result: ReplayResult, *, turns: bool = True) -> dict[str, Any]:
    """The JSON document of a replay (see module docstring)."""
    subjects = []
    for s in result.subjects:
        sessions = []
        for m in s.sessions:
            summary = m.summary()
            if not turns:
                summary.pop("turns")
            sessions.append(summary)
        subjects.append(
            {
                "name": s.name,
                "kind": s.kind,
                "peak_condense_bytes": s.peak_condense_bytes,
                "aggregate": s.aggregate(),
                "worst_sessions": [v["session"] for v in s.views.worst()],
                "sessions": sessions,
            }
        )
    return {
        "version": 1,
        "files": len(result.files),
        "duration_s": round(result.duration_s, 3),
        "peak_rss_bytes": result.peak_rss_bytes,
        "options": dataclasses.asdict(result.options),
        "skipped": [dataclasses.asdict(skip) for skip in result.skipped],
        "subjects": subjects,
    }


def write_json(result: ReplayResult, path: str | Path) -> None:
    """Write :func:`result_to_dict` to ``path`` (whole or not at all)."""
    write_atomically(path, orjson.dumps(result_to_dict(result), option=orjson.OPT_INDENT_2))
