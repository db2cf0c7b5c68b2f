"""``ctxwarden replay``: measure configurations on recorded sessions, or run the scenarios.

Exit status: 0 when everything ran (and, with ``--strict``, every gate and scenario
passed; without it, gates given are still checked and each failure is a warning on
stderr), 1 when a gate or scenario failed under ``--strict`` (each one named on
stderr), 2 on errors,
and 2 when inputs were skipped (a file that is not a session or request log or holds no
request, a session with a request the engine refuses): each is named on stderr and left
out of every figure, after the table and reports of the rest are written. 141 when the
table's output pipe was closed (``| head``) and nothing else went wrong.

Order of output: the ``--json`` / ``--html`` reports are written first (their paths are
checked before the replay starts), then the table on stdout, then the skipped inputs
and failed gates on stderr. A closed stdout cuts the table only: the reports, the
stderr lines and the exit status for skips and gates are those of a full run.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ctxwarden.cli.common import CliConsole, checked_preset, non_negative_float, non_negative_int
from ctxwarden.config import config_error, read_toml
from ctxwarden.errors import ReplayError
from ctxwarden.io import bundled_sessions, output_plan
from ctxwarden.replay.gates import Gates, check_gates, gates_checked, load_gates
from ctxwarden.replay.inputs import expand_paths
from ctxwarden.replay.report_html import write_html
from ctxwarden.replay.report_json import write_json
from ctxwarden.replay.report_table import print_table
from ctxwarden.replay.runner import ReplayOptions, ReplayResult, run_replay
from ctxwarden.replay.scenario import bundled_scenarios_dir, run_scenarios
from ctxwarden.replay.subjects import EngineSubject, load_engine_config

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "replay",
        help="replay sessions / request logs and compare configurations with baselines",
        description="Replay recorded sessions (*.json[.gz]) or request logs (*.jsonl[.gz])\n"
        "through each configuration and the baselines exact and mask:N.\n"
        "Without PATHS, the real sessions bundled with ctxwarden are replayed.",
        epilog=_COLUMNS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths",
        nargs="*",
        help="session / log files or directories (default: the bundled sessions)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        help="TOML config (repeatable); its [store] table is not used: the replay keeps "
        "originals in a memory store (see --config-store)",
    )
    p.add_argument(
        "--config-store",
        action="store_true",
        help="use each --config's [store] table (the replay's originals are written there)",
    )
    p.add_argument("--preset", action="append", default=[], help="preset name (repeatable)")
    p.add_argument(
        "--mask",
        action="append",
        type=non_negative_int,
        metavar="N",
        help="mask:N baseline (repeatable; default 10)",
    )
    p.add_argument(
        "--no-baselines", action="store_true", help="skip exact and mask:N (not with --mask)"
    )
    p.add_argument("--json", metavar="OUT", help="write every figure as JSON")
    p.add_argument("--html", metavar="OUT", help="write a self-contained HTML report")
    p.add_argument("--strict", action="store_true", help="exit 1 when a gate fails")
    p.add_argument("--gates", metavar="FILE", help="TOML with a [gates] table")
    p.add_argument(
        "--idle-gap",
        type=non_negative_float,
        metavar="S",
        help="cache expires after S seconds between turns (needs --turn-seconds, or "
        "timestamps (ts) in request logs)",
    )
    p.add_argument(
        "--turn-seconds", type=non_negative_float, metavar="S", help="assumed gap between turns"
    )
    p.add_argument(
        "--max-sessions", type=_at_least_one, metavar="N", help="replay the first N only"
    )
    p.add_argument(
        "--worst", type=non_negative_int, default=8, metavar="N", help="worst sessions shown"
    )
    p.add_argument("--trace-memory", action="store_true", help="tracemalloc peak per condense")
    p.add_argument(
        "--no-mention-credit",
        action="store_true",
        help="support counts no string that a placeholder only lists in its [mentions: ...]",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--scenarios",
        nargs="?",
        const="",
        metavar="DIR",
        help="run the scenario corpus (bundled, or DIR) instead of sessions (no PATHS)",
    )
    p.set_defaults(handler=_replay)


_COLUMNS = """\
table columns (totals over all requests; in parentheses the median or worst session):
  reduction         input tokens saved against exact
  cost saving       cache-adjusted saving against exact, OpenAI / Anthropic cache prices
                    (negative: dearer than sending the requests unchanged)
  support           share of the strings the agent's real next action took from earlier
                    tool outputs that are still visible
  critical          error lines kept: share of the tool outputs' error lines still visible
  recoverable       share of condensed content whose original recalls from the store
  violations        broken pairing, changed ids, names or order, invalid JSON, ...
  rewrites / fallbacks / prefix breaks
                    requests rewritten, sent as the original, and breaking the cached prefix
"""


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} replays nothing (1 or more)")
    return value


def _configs(args: argparse.Namespace) -> tuple[list[Any], Gates | None]:
    configs: list[Any] = []
    gates: Gates | None = None
    for path in args.config:
        config, table = load_engine_config(path, keep_store=args.config_store)
        if not args.config_store and "store" in read_toml(path):
            _note(f"{path}: [store] not used, the replay keeps originals in memory "
                  "(--config-store uses it)")  # fmt: skip
        configs.append(EngineSubject(Path(path).stem, config))
        if table and gates is None:
            try:
                gates = Gates.model_validate(table)
            except ValidationError as exc:
                raise config_error(exc, "gates").in_file(path) from exc
    configs.extend(f"preset:{checked_preset(name)}" for name in args.preset)
    return configs or ["default"], gates


def _note(text: str, kind: str = "note") -> None:
    print(f"ctxwarden replay: {kind}: {text}", file=sys.stderr)


def _scenarios(args: argparse.Namespace, console: CliConsole) -> int:
    if args.paths:  # the scenarios replace the sessions: PATHS would be ignored
        raise ReplayError(
            f"{args.paths[0]}: --scenarios runs the scenario corpus, not sessions (give "
            "--scenarios DIR, or PATHS without --scenarios)"
        )
    results = run_scenarios(args.scenarios or bundled_scenarios_dir())
    table = Table(title="ctxwarden replay --scenarios")
    for column in ("scenario", "requests", "result"):
        table.add_column(column)
    for r in results:
        table.add_row(r.name, str(r.requests), "ok" if r.passed else f"FAILED ({len(r.failures)})")
    console.print(table)
    failed = [f"{r.name}: {f}" for r in results for f in r.failures]
    for line in failed:
        print(f"ctxwarden replay: scenario {line}", file=sys.stderr)
    return 1 if failed and args.strict else 0


def _all_fell_back(name: str, kind: str, aggregate: dict[str, Any]) -> None:
    """Warn when every request of the engine configuration ``name`` fell back to the
    original (a store it cannot reach): its 0% is no measure of the configuration."""
    requests = aggregate["requests"]
    reasons = aggregate["decisions"]["fallback_reasons"]  # one per request fallen back
    if kind != "engine" or not requests or sum(reasons.values()) < requests:
        return
    _note(
        f"{name}: every request ({requests:,}) fell back to the original "
        f"({', '.join(sorted(reasons))}): "
        "its figures measure nothing",
        "warning",
    )


def _report_unenforced(result: ReplayResult, gates: Gates) -> None:
    """Gates given (``--gates``, a ``--config``'s ``[gates]`` table) without
    ``--strict``: checked and reported on stderr, each failure a warning, but the exit
    status is not theirs (only ``--strict`` makes a failure exit 1)."""
    failures = check_gates(result, gates)
    for line in failures:
        _note(f"{line}; not enforced: without --strict the exit status ignores gates", "warning")
    if not failures:
        checked = gates_checked(result, gates)
        _note(f"gates passed: {checked} (without --strict a failure is only a warning)")


def _check_writable(option: str, out: str) -> None:
    """Fail before a long replay, not after it, when ``out`` cannot be written the way
    the report will be (:func:`ctxwarden.io.output_plan`, the rule
    :func:`~ctxwarden.io.write_atomically` follows): a regular or new file needs a
    folder that exists and takes a new file, or else (an existing file) to open for
    writing itself; a device or FIFO (``/dev/null``, ``/dev/stdout``, ``>(jq .)``)
    must be writable; a folder, or a path ending with ``/``, is refused. The
    :class:`ReplayError` names ``option`` and ``out``."""
    where = f"{option} {out}"
    try:
        output_plan(out)
    except IsADirectoryError:
        if out.endswith(("/", os.sep)) and not os.path.isdir(out):
            raise ReplayError(
                f"{where}: names a directory (it ends with /), not a file to write; "
                "give a file name"
            ) from None
        raise ReplayError(f"{where}: is a directory, not a file to write") from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and exc.strerror == "no such directory":
            raise ReplayError(f"{where}: no such directory {str(exc.filename)!r}") from None
        what = "this file" if os.path.lexists(out) else f"a file in {str(Path(out).parent)!r}"
        raise ReplayError(f"{where}: cannot write {what} ({exc.strerror or exc})") from None


def _read_files(args: argparse.Namespace, paths: list[str]) -> list[tuple[str, Path]]:
    """The files a replay reads, each with what names it: the sessions and logs
    (``PATHS``), ``--config`` and ``--gates``."""
    named = [("PATHS", path) for path in expand_paths(paths)]
    named += [("--config", Path(c)) for c in args.config or []]
    if args.gates:
        named.append(("--gates", Path(args.gates)))
    return named


def _check_distinct(outputs: list[tuple[str, str]], inputs: list[tuple[str, Path]]) -> None:
    """A :class:`ReplayError` when a report would overwrite a file the replay reads, or
    the other report: each file is written once, and inputs never."""
    seen: dict[Path, str] = {path.resolve(): what for what, path in inputs}
    for option, out in outputs:
        real = Path(out).resolve()
        what = seen.get(real)
        if what in ("--json", "--html"):
            raise ReplayError(f"{option} {out}: {what} writes this file already")
        if what is not None:
            raise ReplayError(
                f"{option} {out}: is a file the replay reads ({what}); write the report elsewhere"
            )
        seen[real] = option


def _replay(args: argparse.Namespace) -> int:
    console = CliConsole(width=None if sys.stdout.isatty() else 160)
    if args.scenarios is not None:
        return _scenarios(args, console)
    configs, gates = _configs(args)
    if args.gates:
        gates = load_gates(args.gates)
    if args.config_store and not args.config:
        raise ReplayError("--config-store: no --config whose [store] table to use")
    if args.no_baselines and args.mask:
        raise ReplayError(
            f"--mask {args.mask[0]}: --no-baselines drops every mask:N baseline (give one of them)"
        )
    paths = args.paths or [str(p) for p in bundled_sessions()]
    outputs = [(option, out) for option, out in (("--json", args.json), ("--html", args.html))
               if out]  # fmt: skip
    for option, out in outputs:
        _check_writable(option, out)
    _check_distinct(outputs, _read_files(args, paths))
    baselines = [] if args.no_baselines else ["exact", *(f"mask:{n}" for n in args.mask or [10])]
    options = ReplayOptions(
        idle_gap=args.idle_gap,
        turn_seconds=args.turn_seconds,
        worst_views=args.worst,
        trace_memory=args.trace_memory,
        max_sessions=args.max_sessions,
        mention_credit=not args.no_mention_credit,
    )
    show = not args.quiet and sys.stderr.isatty()
    with Progress(
        TextColumn("replay"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=CliConsole(stderr=True),
        disable=not show,
        transient=True,
    ) as bar:
        task = bar.add_task("", total=None)

        def progress(done: int, total: int, session: str) -> None:
            bar.update(task, completed=done, total=total, description=session[-40:])

        result = run_replay(paths, configs, baselines=baselines, options=options, progress=progress)
    for option, out in outputs:
        try:
            (write_json if option == "--json" else write_html)(result, out)
        except OSError as exc:  # a regular file as it was is left (written whole or not at all)
            raise ReplayError(f"{option} {out}: cannot write it ({exc.strerror or exc})") from None
    try:
        print_table(result, console)
        cut = False
    except BrokenPipeError:  # stdout now points at /dev/null; stderr still goes out
        cut = True
    for path in result.duplicates:
        _note(f"{path}: named more than once, replayed once")
    if args.idle_gap is not None and args.turn_seconds is None and not result.timestamped:
        _note(
            f"--idle-gap {args.idle_gap:g} expired nothing: no request has a timestamp "
            "(ts); give --turn-seconds S to assume S seconds between turns",
            "warning",
        )
    for subject in result.subjects:
        _all_fell_back(subject.name, subject.kind, subject.aggregate())
    for skip in result.skipped:
        print(f"ctxwarden replay: error: {skip.error} (skipped)", file=sys.stderr)
    failures = check_gates(result, gates or Gates()) if args.strict else []
    for line in failures:
        print(f"ctxwarden replay: {line}", file=sys.stderr)
    if args.strict and not failures:
        _note(f"gates passed: {gates_checked(result, gates or Gates())}", "strict")
    if not args.strict and gates is not None:
        _report_unenforced(result, gates)
    if result.skipped:
        return 2
    if failures:
        return 1
    return 141 if cut else 0
