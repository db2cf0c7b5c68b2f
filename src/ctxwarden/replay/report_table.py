"""The terminal table: one row per configuration, baselines first.

Figures are totals over all requests; in parentheses the median or worst session.
The saving column is cache-adjusted against ``exact`` (negative: the configuration
costs more than sending everything unchanged, e.g. because it breaks the cached
prefix every turn).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from ctxwarden.replay.runner import ReplayResult

__all__ = ["fmt_share", "print_table", "replay_table"]


def fmt_share(value: float | None, signed: bool = False) -> str:
    """A share as a percentage; ``-`` when there was nothing to measure."""
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _row(name: str, a: dict[str, Any]) -> list[str]:
    v = a["violations"]["total"]
    d = a["decisions"]
    o = a["overhead"]
    return [
        name,
        f"{a['requests']:,}",
        f"{a['tokens']:,}",
        f"{fmt_share(a['reduction']['total'])} ({fmt_share(a['reduction']['median'])})",
        f"{fmt_share(a['cost']['openai']['total'], True)} / "
        f"{fmt_share(a['cost']['anthropic']['total'], True)}",
        f"{fmt_share(a['support']['total'])} ({fmt_share(a['support']['worst'])})",
        fmt_share(a["critical"]["total"]),
        fmt_share(a["recoverable"]["total"]),
        f"[red]{v}[/red]" if v else "0",
        f"{o['p50_ms']:.1f} / {o['p95_ms']:.1f}",
        f"{d['rewrites']:,} / {d['fallbacks']:,} / {d['prefix_breaks']:,}",
    ]


HEADERS = (
    "config",
    "requests",
    "input tokens",
    "reduction (med)",
    "cost saving oai / anth",
    "support (worst)",
    "critical",
    "recoverable",
    "violations",
    "p50 / p95 ms",
    "rewrites / fallbacks / prefix breaks",
)


def replay_table(result: ReplayResult, title: str | None = None) -> Table:
    """The comparison table of a replay as a rich :class:`~rich.table.Table`."""
    sessions = len(result.subjects[0].sessions) if result.subjects else 0
    caption = "totals over all requests; (med) median session; (worst) worst session"
    if result.skipped:
        caption += f"; {len(result.skipped)} input(s) skipped, in no figure (see stderr)"
    table = Table(
        title=title or f"ctxwarden replay · {sessions} sessions · {result.duration_s:.1f}s",
        caption=caption,
    )
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "config" else "right")
    for s in result.subjects:
        table.add_row(*_row(s.name, s.aggregate()))
    return table


def print_table(result: ReplayResult, console: Console | None = None) -> None:
    """Print :func:`replay_table` (and the peak memory) to ``console``."""
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    console.print(replay_table(result))
    peaks = [
        f"{s.name} {s.peak_condense_bytes / 1e6:.1f} MB"
        for s in result.subjects
        if s.peak_condense_bytes is not None
    ]
    line = f"peak RSS {result.peak_rss_bytes / 1e6:.0f} MB"
    if peaks:
        line += "; peak allocation per condense: " + ", ".join(peaks)
    console.print(line)
