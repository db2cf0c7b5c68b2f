"""``ctxwarden condense``, ``inspect`` and ``demo``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.table import Table

from ctxwarden.cli.common import CliConsole, add_engine_options, engine_from_args, print_json
from ctxwarden.errors import ConfigError
from ctxwarden.io import bundled_sessions, check_api, dump_json, guess_api, load_request
from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.parts import ToolResultPart
from ctxwarden.replay import DEFAULT_BASELINES, print_table, run_replay
from ctxwarden.replay.subjects import EngineSubject
from ctxwarden.store.sqlite import SqliteStore

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("condense", help="print the condensed request for FILE (or - for stdin)")
    p.add_argument("file")
    p.add_argument("--api", choices=("openai.chat", "openai.responses", "anthropic.messages"))
    p.add_argument(
        "--model",
        help="condense as a request for this model (its window and prices; the printed "
        "request names it)",
    )
    p.add_argument("--report", action="store_true", help="print the report to stderr")
    p.add_argument(
        "--session",
        metavar="KEY",
        help="continue session KEY kept in the data directory, as a proxy would (successive "
        "snapshots of one conversation keep their earlier decisions, so the cached prefix "
        "holds); without it each run condenses the file on its own and keeps no session "
        "state: the same file gives the same output every run",
    )
    add_engine_options(p)
    p.set_defaults(handler=_condense)

    p = sub.add_parser("inspect", help="show messages, parts, safety classes and tokens")
    p.add_argument("file")
    p.add_argument("--api", choices=("openai.chat", "openai.responses", "anthropic.messages"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_engine_options(p, mode=False, data_dir=False)
    p.set_defaults(handler=_inspect)

    p = sub.add_parser(
        "demo", help="replay the bundled real sessions: exact, mask:10 and the default config"
    )
    add_engine_options(p, data_dir=False)
    p.set_defaults(handler=_demo)


def _request(args: argparse.Namespace, *, exact: bool = False) -> tuple[dict[str, Any], str]:
    request = load_request(args.file, exact=exact)
    if args.api:
        check_api(request, args.api)
    api = args.api or guess_api(request)
    if getattr(args, "model", None) and isinstance(request, dict):
        request = {**request, "model": args.model}
    return request, api


def _condense(args: argparse.Namespace) -> int:
    if args.session is not None and not args.session.strip():  # would key no session
        raise ConfigError("an empty session key (give a KEY, or leave --session out)", "--session")
    if args.model is not None and not args.model.strip():  # was taken as no flag
        raise ConfigError("an empty model name (give a MODEL, or leave --model out)", "--model")
    request, api = _request(args, exact=True)  # printed back: every value as sent
    # the store is opened before condensing: one that cannot be opened (or an invalid
    # [store] table) is an error here, where the engine would fall back silently (exact
    # mode opens none: it sends the request as it is)
    engine = engine_from_args(args, open_store=True)
    try:
        if engine.config.store.backend == "memory" and engine.config.mode == "active":
            raise ConfigError(
                "the memory store keeps the originals only while this process runs: the "
                "printed references could never be recalled (use sqlite, the default, or "
                "a server backend)",
                "store.backend",
                args.config or "",
            )
        store = engine.store if engine.config.mode == "active" else None  # exact: none
        if isinstance(store, SqliteStore) and store.read_only:
            raise ConfigError(
                f"the store {store.path} can only be read here: the originals of what is "
                "condensed could not be kept, and nothing would be (use a writable "
                "--data-dir, or --mode exact)",
                "store.path",
                args.config or "",
            )
        result = engine.condense(
            request, api=api, session=args.session, one_shot=args.session is None
        )
    finally:
        engine.close()
    print_json(result.request)
    if args.report:
        sys.stderr.write(dump_json(result.report).decode() + "\n")
    return 0


def inspect_rows(engine: Any, request: Any, api: str) -> dict[str, Any]:
    """The inspect view of one request as plain data (also the ``--json`` output)."""
    conversation = engine.parse(request, api)
    info = engine.registry.lookup(conversation.model)
    counter = engine.counter_for(info)
    budget = engine.budget_for(conversation.model)
    total = counter.count_conversation(conversation)
    protected = protected_message_indexes(conversation)
    last = conversation.newest_start - 1
    rows = []
    for i, message in enumerate(conversation.messages):
        for part in message.parts:
            inner = part.content if isinstance(part, ToolResultPart) else ()
            classes = sorted({str(p.safety) for p in inner}) if inner else [str(part.safety)]
            rows.append(
                {
                    "message": i,
                    "role": message.role,
                    "kind": part.kind,
                    "safety": ",".join(classes),
                    "tokens": counter.count_part(part),
                    "protected": i in protected,
                    "cache_stable": i <= last,
                }
            )
    return {
        "api": api,
        "model": conversation.model,
        "messages": len(conversation.messages),
        "tokens": total,
        "context_window": budget.context_window,
        "window_source": budget.window_source,
        "pressure": round(budget.pressure(total), 4),
        "band": budget.band(total),
        "estimator_confidence": counter.confidence,
        "parts": rows,
    }


def _inspect(args: argparse.Namespace) -> int:
    request, api = _request(args)
    engine = engine_from_args(args, store={"backend": "memory"})
    view = inspect_rows(engine, request, api)
    if args.json:
        print_json(view)
        return 0
    table = Table(title=f"{api} · model {view['model']} · {view['messages']} messages")
    for column in ("#", "role", "kind", "safety", "tokens", "cache-stable"):
        table.add_column(column, justify="right" if column in ("#", "tokens") else "left")
    for row in view["parts"]:
        table.add_row(
            str(row["message"]),
            row["role"],
            row["kind"],
            row["safety"],
            str(row["tokens"]),
            "yes" if row["cache_stable"] else "no (newest)",
        )
    console = CliConsole()
    console.print(table)
    console.print(
        f"tokens {view['tokens']:,} of a {view['context_window']:,} window "
        f"({view['window_source']}); pressure {view['pressure']:.1%} band {view['band']}; "
        f"estimator confidence {view['estimator_confidence']}"
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    """Replay the bundled sessions through exact, ``mask:10`` and the configured engine.

    The engine side is the default (balanced) configuration unless ``--config``,
    ``--preset`` or ``--mode`` say otherwise; its store is always in memory, so the demo
    leaves nothing behind.
    """
    engine = engine_from_args(args, store={"backend": "memory"})
    config = engine.config
    engine.close()
    name = Path(args.config).stem if args.config else (args.preset or "default")
    sessions = bundled_sessions()
    console = CliConsole(width=None if sys.stdout.isatty() else 160)
    console.print(
        f"ctxwarden demo: {len(sessions)} bundled real sessions (mini-swe-agent, MIT), "
        f"replayed request by request through {', '.join(DEFAULT_BASELINES)} and {name} "
        f"(preset {config.preset}, mode {config.mode})"
    )
    result = run_replay(
        [str(p) for p in sessions], [EngineSubject(name, config)], baselines=DEFAULT_BASELINES
    )
    print_table(result, console)
    console.print(
        "cost saving is cache-adjusted against exact (negative: dearer than sending the "
        "requests unchanged); full corpus: ctxwarden replay DIR --html report.html"
    )
    return 0
