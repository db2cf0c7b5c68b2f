"""What ``--help`` says about defaults is what the commands do."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ctxwarden.cli import build_parser
from ctxwarden.cli.serve import settings_from_args


def _help(*names: str) -> str:
    parser = build_parser()
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return " ".join(parser.format_help().split())  # unwrapped


def test_serve_names_the_real_data_dir_default_and_no_none() -> None:
    """serve reads $CTXWARDEN_DATA_DIR as its --data-dir, before the config's data_dir
    (as the README says): its help put the config first and named the variable only in
    brackets, so a user could not tell which wins."""
    text = _help("serve")
    assert "None]" not in text
    assert (
        "--data-dir DATA_DIR store and secret directory (default: $CTXWARDEN_DATA_DIR, "
        "which serve reads before the config's data_dir, unlike condense, recall and "
        "store; else the config's data_dir, else $XDG_DATA_HOME/ctxwarden, else "
        "~/.local/share/ctxwarden) [CTXWARDEN_DATA_DIR]"
    ) in text
    assert "[CTXWARDEN_ADMIN_TOKEN]" in text and "[CTXWARDEN_HOST; 127.0.0.1]" in text


@pytest.mark.parametrize("names", [("inspect",), ("demo",)])
def test_commands_that_keep_nothing_take_no_data_dir(names: tuple[str, ...]) -> None:
    # they run on a memory store: a --data-dir there was accepted and did nothing
    assert "--data-dir" not in _help(*names)


@pytest.mark.parametrize("names", [("condense",), ("recall",), ("store", "stats"), ("store", "gc")])
def test_data_dir_help_names_the_variables_that_move_it(names: tuple[str, ...]) -> None:
    assert (
        "--data-dir DATA_DIR store directory (default: the config's data_dir, else "
        "$CTXWARDEN_DATA_DIR, else $XDG_DATA_HOME/ctxwarden, else ~/.local/share/ctxwarden; "
        "unlike serve, which puts $CTXWARDEN_DATA_DIR before the config's data_dir)"
    ) in _help(*names)


def test_serve_resolves_the_data_dir_as_its_help_says(tmp_path: Path) -> None:
    """The order the help states is the one applied: the variable over the config's
    data_dir, the flag over both."""
    config = tmp_path / "c.toml"
    config.write_text(f'data_dir = "{tmp_path / "from-config"}"\n')
    env = {"CTXWARDEN_DATA_DIR": str(tmp_path / "from-env")}
    args = build_parser().parse_args(["serve", "--config", str(config)])
    assert settings_from_args(args, env)[1].data_dir == str(tmp_path / "from-env")
    assert settings_from_args(args, {})[1].data_dir == str(tmp_path / "from-config")
    flag = build_parser().parse_args(["serve", "--config", str(config), "--data-dir", "F"])
    assert settings_from_args(flag, env)[1].data_dir == "F"
