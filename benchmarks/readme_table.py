"""Render the README's replay table from a ``ctxwarden replay --json`` file.

Usage: ``python benchmarks/readme_table.py r.json`` prints a Markdown table with one row
per configuration (totals over all requests; median and worst sessions).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def rows(report: dict[str, Any]) -> list[str]:
    head = (
        "| config | reduction total (median) | cost saving OpenAI / Anthropic (worst session)"
        " | support (median) | error lines kept | recoverable | violations | p50 / p95 ms |"
    )
    out = [head, "|" + "---|" * 8]
    for subject in report["subjects"]:
        a = subject["aggregate"]
        oai, anth = a["cost"]["openai"], a["cost"]["anthropic"]
        recoverable = a.get("recoverable") or {}
        overhead = a.get("overhead") or {}
        out.append(
            f"| {subject['name']} | {_pct(a['reduction']['total'])} "
            f"({_pct(a['reduction']['median'])}) "
            f"| {_pct(oai['total'])} / {_pct(anth['total'])} "
            f"({_pct(oai['worst'])} / {_pct(anth['worst'])}) "
            f"| {_pct(a['support']['total'])} ({_pct(a['support']['median'])}) "
            f"| {_pct(a['critical']['total'])} | {_pct(recoverable.get('total'))} "
            f"| {a['violations']['total']} "
            f"| {overhead.get('p50_ms', 0):.1f} / {overhead.get('p95_ms', 0):.1f} |"
        )
    return out


def main() -> int:
    report = orjson.loads(Path(sys.argv[1]).read_bytes())
    print("\n".join(rows(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
