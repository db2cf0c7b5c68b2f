"""Helpers shared by CLI commands: engine construction and JSON output."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from ctxwarden.config import EngineConfig, load_config
from ctxwarden.engine import Engine

__all__ = ["add_engine_options", "engine_from_args", "print_json"]


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
