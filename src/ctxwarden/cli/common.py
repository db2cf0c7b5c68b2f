"""Helpers shared by CLI commands: engine construction and JSON output."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson
from rich.console import Console

from ctxwarden.config import EngineConfig, load_config
from ctxwarden.engine import Engine

__all__ = ["CliConsole", "add_engine_options", "engine_from_args", "print_json"]


class CliConsole(Console):
    """A rich console whose closed output pipe (``| head``) raises
    :class:`BrokenPipeError`, which :func:`ctxwarden.cli.main` ends with status 141
    (rich itself exits with 1, the status of a failed gate)."""

    def on_broken_pipe(self) -> None:
        if self.quiet:
            return
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--preset", help="conservative | balanced | aggressive")
    parser.add_argument("--mode", choices=("active", "shadow", "exact"))
    parser.add_argument("--data-dir", help="store directory (default ~/.local/share/ctxwarden)")


def engine_from_args(args: argparse.Namespace, **overrides: Any) -> Engine:
    config = load_config(args.config) if getattr(args, "config", None) else EngineConfig()
    update: dict[str, Any] = dict(overrides)
    if getattr(args, "preset", None):
        update["preset"] = args.preset
    if getattr(args, "mode", None):
        update["mode"] = args.mode
    if getattr(args, "data_dir", None):
        update["data_dir"] = args.data_dir
    if update:
        config = EngineConfig.model_validate({**config.model_dump(), **update})
    return Engine(config)


def print_json(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()
