"""The replay benchmark: measure configurations on recorded agent sessions.

::

    from ctxwarden.replay import run_replay, print_table
    result = run_replay(["../shared/corpus/sessions"], ["default"])
    print_table(result)

Modules: :mod:`inputs` (sessions, request logs), :mod:`subjects` (engine configs and
the ``exact`` / ``mask:N`` baselines), :mod:`view` (incremental per-message views),
:mod:`signals` (distinctive strings, error lines), :mod:`cache` (prompt-cache
simulation), :mod:`integrity`, :mod:`metrics`, :mod:`runner`, the reports
(:mod:`report_table`, :mod:`report_json`, :mod:`report_html`), :mod:`gates` and the
hand-written scenario corpus (:mod:`scenario`, ``scenarios/``).
"""

from ctxwarden.replay.gates import Gates, check_gates, load_gates
from ctxwarden.replay.report_html import render_html, write_html
from ctxwarden.replay.report_json import result_to_dict, write_json
from ctxwarden.replay.report_table import print_table, replay_table
from ctxwarden.replay.runner import (
    DEFAULT_BASELINES,
    ReplayOptions,
    ReplayResult,
    SubjectResult,
    run_replay,
)
from ctxwarden.replay.subjects import Subject, make_subject

__all__ = [
    "DEFAULT_BASELINES",
    "Gates",
    "ReplayOptions",
    "ReplayResult",
    "Subject",
    "SubjectResult",
    "check_gates",
    "load_gates",
    "make_subject",
    "print_table",
    "render_html",
    "replay_table",
    "result_to_dict",
    "run_replay",
    "write_html",
    "write_json",
]
