"""What ``--help`` says about defaults is what the commands do."""

from __future__ import annotations

import argparse

import pytest

from ctxwarden.cli import build_parser


def _help(*names: str) -> str:
    parser = build_parser()
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return " ".join(parser.format_help().split())  # unwrapped


def test_serve_names_the_real_data_dir_default_and_no_none() -> None:
    text = _help("serve")
    assert "None]" not in text
    assert (
        "--data-dir DATA_DIR store and secret directory (default: the config's data_dir, "
        "else $XDG_DATA_HOME/ctxwarden, else ~/.local/share/ctxwarden) [CTXWARDEN_DATA_DIR]"
    ) in text
    assert "[CTXWARDEN_ADMIN_TOKEN]" in text and "[CTXWARDEN_HOST; 127.0.0.1]" in text


@pytest.mark.parametrize(
    "names", [("condense",), ("inspect",), ("recall",), ("store", "stats"), ("store", "gc")]
)
def test_data_dir_help_names_the_variables_that_move_it(names: tuple[str, ...]) -> None:
    assert (
        "--data-dir DATA_DIR store directory (default: the config's data_dir, else "
        "$CTXWARDEN_DATA_DIR, else $XDG_DATA_HOME/ctxwarden, else ~/.local/share/ctxwarden)"
    ) in _help(*names)
