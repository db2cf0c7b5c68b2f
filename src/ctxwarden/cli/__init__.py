"""The ``ctxwarden`` command line. Each command group lives in its own module and
registers its subcommands; errors print one line on stderr and exit non-zero.

The line names the command as typed (``ctxwarden store gc: error: ...``; a group keeps
its subcommand as ``<group>_command``), and a
request error of a command that reads a request file (``condense``, ``inspect``) names
that file first (``ctxwarden condense: error: req.json: ... at /messages/3``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from ctxwarden import __version__
from ctxwarden.errors import CtxwardenError, RequestError

__all__ = ["main"]

_COMMAND_MODULES = (
    "ctxwarden.cli.condense",
    "ctxwarden.cli.store",
    "ctxwarden.cli.replay",
    "ctxwarden.cli.serve",
    "ctxwarden.cli.config_show",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxwarden", description="Condense LLM agent requests, keeping the protocol exact."
    )
    parser.add_argument("--version", action="version", version=f"ctxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        register: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None] = (
            import_module(name).register
        )
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 gate failed, 2 error, 141 the
    output pipe was closed, as a shell reports a process ended by SIGPIPE)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    # a command group's subcommand is kept as <group>_command (store gc, config show)
    group_command = getattr(args, f"{args.command}_command", None)
    command = " ".join(filter(None, (args.command, group_command)))
    try:
        return handler(args)
    except CtxwardenError as exc:
        print(f"ctxwarden {command}: error: {_naming_the_file(exc, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
    except OSError as exc:
        print(f"ctxwarden {command}: error: {exc}", file=sys.stderr)
        return 2


def _naming_the_file(exc: CtxwardenError, args: argparse.Namespace) -> str:
    """The message of ``exc``; a request error of a command that read a request from
    ``args.file`` starts with that file (``<stdin>`` for ``-``), once."""
    message = str(exc)
    source = getattr(args, "file", None)
    if not isinstance(exc, RequestError) or not isinstance(source, str):
        return message
    name = "<stdin>" if source == "-" else source
    return message if message.startswith(f"{name}: ") else f"{name}: {message}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
