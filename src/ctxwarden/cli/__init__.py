"""The ``ctxwarden`` command line. Each command group lives in its own module and
registers its subcommands; errors print one line on stderr and exit non-zero."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from ctxwarden import __version__
from ctxwarden.errors import CtxwardenError

__all__ = ["main"]

_COMMAND_MODULES = (
    "ctxwarden.cli.condense",
    "ctxwarden.cli.store",
    "ctxwarden.cli.replay",
    "ctxwarden.cli.serve",
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
    try:
        return handler(args)
    except CtxwardenError as exc:
        print(f"ctxwarden {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 141
    except OSError as exc:
        print(f"ctxwarden {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
