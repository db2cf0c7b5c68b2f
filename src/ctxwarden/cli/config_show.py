"""``ctxwarden config show``: the pipeline that runs, as TOML.

The preset (``--preset``, else the file's ``preset``, else balanced) with the file's
``[pipeline]`` table merged over it, resolved and checked as ``condense`` and
``serve`` do. Every key is printed, each pass's table whole, so the output used as a
config file is the same pipeline over any preset; a setting that is unset (``None``,
which TOML cannot write) is left out, as no preset sets one. The other tables
(``[budget]``, ``[store]``) are not shown.
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from ctxwarden.cli.common import add_engine_options, checked_preset, write_stdout
from ctxwarden.config import read_toml, validated_config
from ctxwarden.pipeline.presets import PipelineConfig, resolve_pipeline

__all__ = ["pipeline_toml", "register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="show the configuration that runs")
    commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    p = commands.add_parser(
        "show",
        help="print the effective pipeline (preset and [pipeline] table merged) as TOML",
        description="Print the pipeline the engine runs with: the preset with the config "
        "file's [pipeline] table merged over it, every key given (a config file that "
        "gives the same pipeline over any preset).",
    )
    add_engine_options(p, mode=False, data_dir=False)
    p.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    update: dict[str, Any] = {}
    if args.preset is not None:  # "" too: a flag naming no preset is its own error
        update["preset"] = checked_preset(args.preset)
    path = args.config
    # the flag overrides the file's preset, as for condense (engine_from_args)
    config = validated_config({**(read_toml(path) if path else {}), **update}, path)
    pipeline = resolve_pipeline(config.preset, config.pipeline)
    origin = f"[pipeline] of {path} over " if path else ""
    header = f"# the pipeline ctxwarden runs: {origin}the {config.preset} preset\n"
    write_stdout((header + pipeline_toml(pipeline, config.preset)).encode())
    return 0


def pipeline_toml(pipeline: PipelineConfig, preset: str) -> str:
    """``pipeline`` as a config file naming ``preset``: ``read_toml`` and
    :func:`~ctxwarden.pipeline.presets.resolve_pipeline` of it give ``pipeline`` back
    (every key written; ``None`` left out)."""
    lines = [f"preset = {_string(preset)}", "", "[pipeline]"]
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in pipeline.model_dump().items():
        if key == "tools":
            tables += [(f"tools.{_key(name)}", policy) for name, policy in value.items()]
        elif isinstance(value, dict):
            tables.append((key, value))
        elif value is not None:
            lines.append(f"{key} = {_value(value)}")
    for name, table in tables:
        lines += ["", f"[pipeline.{name}]"]
        lines += [f"{key} = {_value(v)}" for key, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # the models refuse them: never here
            raise ValueError(f"{value!r} has no place in a config")
        return repr(value)  # shortest exact form; TOML reads 1e-05 and 24.0 alike
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
            "\r": "\\r"}  # fmt: skip


def _key(name: str) -> str:
    """A table name as a TOML key: bare when it can be, else quoted (a tool's name may
    hold dots, spaces or quotes)."""
    return name if _BARE_KEY.fullmatch(name) else _string(name)


def _string(text: str) -> str:
    """A TOML basic string: backslash, quote and control characters escaped."""
    out = []
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'
