"""The ``--html`` report: one self-contained file (inline CSS, data, JS and SVG).

The page holds the summary table, three charts drawn by ``assets/report.js`` as
inline SVG (context tokens per turn for one session or the mean over all, cumulative
cost with and without the prompt cache, tokens saved by transform), the worst
sessions of each configuration and, linked from them, a side-by-side view of one
request (original vs condensed; the differing span and references highlighted).
Nothing is fetched from the network. Message contents appear only in those views.
"""

from __future__ import annotations

import html
import re
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.io import write_atomically
from ctxwarden.replay.report_table import fmt_share
from ctxwarden.replay.runner import ReplayResult

__all__ = ["render_html", "write_html"]

_REF = re.compile(r"cw:[0-9a-f]{12}")


def _asset(name: str) -> str:
    return resources.files("ctxwarden.replay").joinpath("assets", name).read_text("utf-8")


def _payload(result: ReplayResult) -> dict[str, Any]:
    first = result.subjects[0].sessions if result.subjects else []
    cost: dict[str, dict[str, list[list[int]]]] = {"openai": {}, "anthropic": {}}
    for s in result.subjects:
        cost["openai"][s.name] = [[round(c) for c in m.cost_openai] for m in s.sessions]
        cost["anthropic"][s.name] = [[round(c) for c in m.cost_anthropic] for m in s.sessions]
    return {
        "sessions": [m.session for m in first],
        "exact_tokens": [m.exact_tokens for m in first],
        "subjects": [{"name": s.name, "kind": s.kind} for s in result.subjects],
        "tokens": {s.name: [m.tokens for m in s.sessions] for s in result.subjects},
        "cost": cost,
        "transforms": {
            s.name: {
                k: v["tokens_saved"]
                for k, v in s.aggregate()["decisions"]["transforms"].items()
                if v["tokens_saved"]
            }
            for s in result.subjects
        },
    }


def _summary(result: ReplayResult) -> str:
    head = (
        "<tr><th>config</th><th>requests</th><th>input tokens</th><th>reduction</th>"
        "<th>median</th><th>cost saving (OpenAI)</th><th>cost saving (Anthropic)</th>"
        "<th>support</th><th>critical</th><th>recoverable</th><th>violations</th>"
        "<th>p50 / p95 / max ms</th><th>rewrites</th><th>fallbacks</th><th>prefix breaks</th></tr>"
    )
    rows = []
    for s in result.subjects:
        a = s.aggregate()
        v = a["violations"]["total"]
        o = a["overhead"]
        d = a["decisions"]
        cells = [
            html.escape(s.name),
            f"{a['requests']:,}",
            f"{a['tokens']:,}",
            fmt_share(a["reduction"]["total"]),
            fmt_share(a["reduction"]["median"]),
            fmt_share(a["cost"]["openai"]["total"], signed=True),
            fmt_share(a["cost"]["anthropic"]["total"], signed=True),
            fmt_share(a["support"]["total"]),
            fmt_share(a["critical"]["total"]),
            fmt_share(a["recoverable"]["total"]),
            f'<span class="bad">{v}</span>' if v else "0",
            f"{o['p50_ms']:.1f} / {o['p95_ms']:.1f} / {o['max_ms']:.1f}",
            f"{d['rewrites']:,}",
            f"{d['fallbacks']:,}",
            f"{d['prefix_breaks']:,}",
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return f"<table id='cw-summary'>{head}{''.join(rows)}</table>"


def _marked(text: str, span: tuple[int, int] | None) -> str:
    def esc(part: str) -> str:
        return _REF.sub(lambda m: f'<mark class="ref">{m.group(0)}</mark>', html.escape(part))

    if span is None or span[0] >= span[1]:
        return esc(text)
    a, b = span
    return esc(text[:a]) + "<mark>" + esc(text[a:b]) + "</mark>" + esc(text[b:])


def _view(anchor: str, subject: str, view: dict[str, Any]) -> str:
    parts = [
        f"<div class='view' id='{anchor}'><h3>{html.escape(subject)} · "
        f"{html.escape(view['session'])} · request {view['turn'] + 1}</h3>"
    ]
    if view["violations"]:
        parts.append(f"<p class='bad'>violations: {html.escape(str(view['violations']))}</p>")
    if view["missed_strings"]:
        missed = ", ".join(html.escape(s) for s in view["missed_strings"])
        parts.append(f"<p>next-action strings no longer visible: <code>{missed}</code></p>")
    if view["lost_error_lines"]:
        lost = "<br>".join(html.escape(s) for s in view["lost_error_lines"])
        parts.append(f"<p>error lines no longer visible:<br><code>{lost}</code></p>")
    for row in view["items"]:
        changed = row["changed"]
        diff = row.get("diff")
        left = _marked(row["original"], (diff[0], diff[1]) if diff else None)
        if changed:
            right = _marked(row["condensed"] or "", (diff[0], diff[2]) if diff else None)
        else:
            right = "<span class='note'>(unchanged)</span>"
        parts.append(
            f"<div class='role'>#{row['index']} {html.escape(row['role'])} · "
            f"{row['original_chars']:,} → {row['condensed_chars']:,} chars</div>"
            f"<div class='pair{' changed' if changed else ''}'><pre>{left}</pre>"
            f"<pre>{right}</pre></div>"
        )
    parts.append("</div>")
    return "".join(parts)


def _worst(result: ReplayResult) -> str:
    out = []
    for k, s in enumerate(result.subjects):
        views = s.views.worst()
        if not views:
            continue
        by_id = {m.session: m for m in s.sessions}
        rows = []
        for j, view in enumerate(views):
            m = by_id[view["session"]]
            anchor = f"view-{k}-{j}"
            rows.append(
                f"<tr><td><a href='#{anchor}'>{html.escape(m.session)}</a></td>"
                f"<td>{m.requests}</td><td>{fmt_share(m.reduction())}</td>"
                f"<td>{fmt_share(m.saving('openai'), signed=True)}</td>"
                f"<td>{fmt_share(m.support())}</td><td>{fmt_share(m.critical())}</td>"
                f"<td>{sum(m.violations.values())}</td></tr>"
            )
        out.append(
            f"<h3>{html.escape(s.name)}</h3><table class='cw-worst'><tr><th>session</th>"
            "<th>requests</th><th>reduction</th><th>cost saving</th><th>support</th>"
            "<th>critical</th><th>violations</th></tr>" + "".join(rows) + "</table>"
        )
        out.extend(_view(f"view-{k}-{j}", s.name, v) for j, v in enumerate(views))
    return "".join(out) or "<p class='note'>no condensing configuration in this run</p>"


def _skipped(result: ReplayResult) -> str:
    """The inputs left out of every figure, each with its error (no contents)."""
    if not result.skipped:
        return ""
    items = "".join(f"<li>{html.escape(skip.error)}</li>" for skip in result.skipped)
    return f"<p class='note'>{len(result.skipped)} input(s) skipped:</p><ul>{items}</ul>"


def render_html(result: ReplayResult, title: str = "ctxwarden replay") -> str:
    """The whole report page (see module docstring)."""
    data = orjson.dumps(_payload(result)).decode().replace("</", "<\\/")
    sessions = len(result.subjects[0].sessions) if result.subjects else 0
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_asset("report.css")}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="note">{sessions} sessions from {len(result.files)} files, replayed in
{result.duration_s:.1f}s. Totals over all requests; cost saving is cache-adjusted
against exact (negative = more expensive than sending everything unchanged).</p>
{_skipped(result)}{_summary(result)}
<h2>Context and cost</h2>
<div class="controls">session <select id="cw-session"><option value="all">all sessions</option>
</select> pricing <select id="cw-style"><option value="openai">OpenAI-style</option>
<option value="anthropic">Anthropic-style</option></select></div>
<div id="cw-tokens"></div><div id="cw-cost"></div>
<h2>Where savings come from</h2><div id="cw-transforms"></div>
<h2>Worst sessions</h2>{_worst(result)}
<script type="application/json" id="cw-data">{data}</script>
<script>{_asset("report.js")}</script>
</body></html>
"""


def write_html(result: ReplayResult, path: str | Path, title: str = "ctxwarden replay") -> None:
    """Write :func:`render_html` to ``path`` (whole or not at all)."""
    write_atomically(path, render_html(result, title).encode("utf-8"))
