"""Helpers shared by CLI commands: engine and store construction and JSON output."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from ctxwarden.config import StoreConfig, read_toml, validated_config
from ctxwarden.engine import Engine
from ctxwarden.errors import ConfigError, StoreError
from ctxwarden.io import dump_json
from ctxwarden.pipeline.presets import resolve_pipeline
from ctxwarden.store import default_data_dir

__all__ = [
    "DATA_DIR_DEFAULT",
    "DATA_DIR_HELP",
    "SERVE_DATA_DIR_HELP",
    "CliConsole",
    "add_engine_options",
    "check_store_path_conflict",
    "checked_preset",
    "engine_from_args",
    "given_data_dir",
    "non_negative_float",
    "non_negative_int",
    "positive_seconds",
    "print_json",
    "store_errors",
    "write_stdout",
]


DATA_DIR_DEFAULT = (
    "the config's data_dir, else $CTXWARDEN_DATA_DIR, else $XDG_DATA_HOME/ctxwarden, "
    "else ~/.local/share/ctxwarden"
)
"""Where a command that takes ``--data-dir`` keeps its store without the flag (the
order :class:`~ctxwarden.engine.Engine` and :func:`ctxwarden.store.default_data_dir`
apply). ``serve`` differs, as the README says: it reads ``$CTXWARDEN_DATA_DIR`` as its
``--data-dir``, before the config's ``data_dir`` (:data:`SERVE_DATA_DIR_HELP`)."""

DATA_DIR_HELP = (
    f"store directory (default: {DATA_DIR_DEFAULT}; unlike serve, which puts "
    "$CTXWARDEN_DATA_DIR before the config's data_dir)"
)

SERVE_DATA_DIR_HELP = (
    "store and secret directory (default: $CTXWARDEN_DATA_DIR, which serve reads before "
    "the config's data_dir, unlike condense, recall and store; else the config's "
    "data_dir, else $XDG_DATA_HOME/ctxwarden, else ~/.local/share/ctxwarden)"
)
"""``serve``'s ``--data-dir`` help: its variable wins over the config, as every
``serve`` option's does."""


class CliConsole(Console):
    """A rich console whose closed output pipe (``| head``) raises
    :class:`BrokenPipeError`, which :func:`ctxwarden.cli.main` ends with status 141
    (rich itself exits with 1, the status of a failed gate)."""

    def on_broken_pipe(self) -> None:
        if self.quiet:
            return
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative (0 or more)")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a number, 0 or more (infinity included)."""
    value = _number(text, float)
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative (0 or more)")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    value = _number(text, float)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return value


def add_engine_options(
    parser: argparse.ArgumentParser, *, mode: bool = True, data_dir: bool = True
) -> None:
    """``--config`` and ``--preset``; ``--mode`` and ``--data-dir`` for the commands
    they mean something to (``inspect`` and ``demo`` keep nothing: no ``--data-dir``)."""
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--preset", help="conservative | balanced | aggressive")
    if mode:
        parser.add_argument("--mode", choices=("active", "shadow", "exact"))
    if data_dir:
        parser.add_argument("--data-dir", help=DATA_DIR_HELP)


def engine_from_args(
    args: argparse.Namespace, *, open_store: bool = False, **overrides: Any
) -> Engine:
    """The engine the options describe (an invalid config is a
    :class:`~ctxwarden.errors.ConfigError`). ``open_store``: open its store now, so a
    store that cannot be opened is an error of the command (the engine opens it on first
    use, and falls back to the original request when that fails)."""
    update: dict[str, Any] = dict(overrides)
    preset = getattr(args, "preset", None)
    if preset is not None:  # "" too: a flag naming no preset is its own error
        update["preset"] = checked_preset(preset)
    if getattr(args, "mode", None):
        update["mode"] = args.mode
    data_dir = given_data_dir(args)
    if data_dir:
        update["data_dir"] = data_dir
    path = getattr(args, "config", None)
    # the flags override the file's keys
    config = validated_config({**(read_toml(path) if path else {}), **update}, path)
    check_store_path_conflict(data_dir, config.store)
    try:
        engine = Engine(config)
    except ConfigError as exc:  # the store table's contradictions: the file's keys
        if not path or exc.source:
            raise
        raise exc.in_file(path) from exc
    if open_store and config.mode != "exact":  # exact mode never reads or writes it
        with store_errors(config.store, config.data_dir, path):
            _ = engine.store
    return engine


def checked_preset(name: str) -> str:
    """``name`` as given to ``--preset``; one that names no preset is a
    :class:`ConfigError` naming the flag."""
    try:
        resolve_pipeline(name, {})
    except ConfigError as exc:
        raise ConfigError(exc.reason, "--preset") from None
    return name


def given_data_dir(args: argparse.Namespace) -> str | None:
    """``--data-dir`` as given (``None`` without the flag); an empty one is a
    :class:`ConfigError` naming the flag (it was taken as no flag: the default store)."""
    data_dir: str | None = getattr(args, "data_dir", None)
    if data_dir is not None and not data_dir.strip():
        raise ConfigError("empty (give a directory, or leave --data-dir out)", "--data-dir")
    return data_dir


def check_store_path_conflict(data_dir: str | None, store: StoreConfig) -> None:
    """Refuse ``--data-dir`` beside a config whose ``[store] path`` names the SQLite
    file: the file would win silently, and which store the user meant is unknown (gc or
    a session on the wrong one). A :class:`ConfigError` at ``store.path``."""
    if data_dir and store.backend == "sqlite" and store.path:
        raise ConfigError(
            f"--data-dir {data_dir} conflicts with the config's store file "
            f"{store.path}; give one of them",
            "store.path",
        )


@contextmanager
def store_errors(
    config: StoreConfig, data_dir: str | None, source: str | Path | None = None
) -> Iterator[None]:
    """Around opening the store of ``config`` (read from the file ``source``, when from
    one) in ``data_dir``: a SQLite store whose folder or file cannot be made or opened
    is a :class:`StoreError` naming that folder or file (``cannot create the store
    file X`` when it is not there, ``cannot open the store file X`` when it is or when
    its folder cannot be entered to tell); a server store that cannot be
    opened is one naming ``store.url`` (and ``source``), and a :class:`ConfigError`
    names ``source`` too."""
    try:
        yield
    except ConfigError as exc:  # a server store's url or client library: the file's keys
        if not source or exc.source:
            raise
        raise exc.in_file(source) from exc
    except (OSError, StoreError) as exc:
        if config.backend != "sqlite":
            if not isinstance(exc, StoreError):
                raise
            where = ": ".join(str(w) for w in (source, "store.url") if w)
            raise StoreError(f"{where}: {exc}") from exc
        folder = Path(data_dir) if data_dir else default_data_dir()
        path = Path(config.path) if config.path else folder / "store.sqlite3"
        where = "store folder" if config.path else "data dir"
        name = getattr(exc, "filename", None) or path.parent
        if isinstance(exc, FileExistsError):  # made over a file
            message = f"{where} {name}: not a directory"
        elif isinstance(exc, OSError) and os.path.abspath(name) == os.path.abspath(path):
            verb = "create" if _missing(path) else "open"
            message = f"cannot {verb} the store file {name}: {exc.strerror or exc}"
        elif isinstance(exc, OSError):
            message = f"cannot create the {where} {name}: {exc.strerror or exc}"
        elif os.path.abspath(path) in str(exc):  # it names the file already
            message = str(exc)
        else:
            message = f"{path}: {exc}"
        raise StoreError(message) from exc


def _missing(path: Path) -> bool:
    """True only when ``path`` is known not to exist: a folder that cannot be entered
    hides whether it does (the file may be there, so it could not be opened)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON on stdout, every value as it was read (see
    :func:`ctxwarden.io.dump_json`)."""
    write_stdout(dump_json(obj, indent=True) + b"\n")


def write_stdout(data: bytes) -> None:
    """Write all of ``data`` to stdout. A pipe whose reader has gone (``| head``) may
    take part of one large write and report it as done: the rest is written again, so
    the closed pipe raises :class:`BrokenPipeError` (status 141) instead of the output
    ending short with status 0; stdout then points at ``/dev/null``, so the bytes still
    buffered do not fail again at exit (status 120)."""
    out = sys.stdout.buffer
    view = memoryview(data)
    try:
        while view:
            view = view[out.write(view) :]
        out.flush()
    except BrokenPipeError:  # what is still buffered must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise
