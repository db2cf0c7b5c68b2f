"""The public surface of ctxwarden.replay is exactly the intended names."""

from __future__ import annotations

import ctxwarden.replay as replay


def test_exported_names() -> None:
    assert sorted(replay.__all__) == sorted(
        [
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
    )
    for name in replay.__all__:
        assert getattr(replay, name) is not None
