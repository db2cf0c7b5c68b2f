"""The signal modules' public surfaces are exactly the intended names: the JSON view
and the command reading live in modules of their own, and ``ctxwarden.signals`` does
not re-export them."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "ctxwarden.signals": {
        "MAX_ERROR_LINE",
        "SEARCH_BUDGET",
        "LinesShown",
        "TextSearch",
        "argument_error_lines",
        "closing_lines",
        "distinctive_set",
        "distinctive_strings",
        "error_lines",
        "exit_status",
        "is_error_line",
        "is_path",
        "mention_scores",
        "paths_in",
        "plain_line",
        "shown_error_line",
    },
    "ctxwarden.json_wrapped": {"json_exit_status", "json_view", "lines_label", "shown_text"},
    "ctxwarden.commands": {"ANNOTATIONS", "action_of", "command_of"},
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_signals_keeps_no_moved_name() -> None:
    import ctxwarden.signals as signals

    for name in ("command_of", "json_view", "json_exit_status"):
        assert name not in signals.__all__
    assert not hasattr(signals, "command_of")  # callers import it from ctxwarden.commands
