"""Quick tuning loop: replay a sample of corpus sessions with pipeline overrides.

Not a test and not the reported figure (that is ``ctxwarden replay`` on the whole
corpus): a fast way to compare settings. Runs every ``--every``-th session (offset
``--offset``) in ``--jobs`` processes and prints the issue-4 figures for each config.

    python benchmarks/tune_sample.py --every 8 --set mask.max_keywords=40 --set recency_tokens=0

``--source PREFIX`` (repeatable) keeps the sessions of those corpus sources only.
``--set`` takes a dotted key under ``[pipeline]`` and a JSON value (a bare word is a
string). Several ``--config`` groups can be compared: separate them with ``--next``.
Every group is checked before any replay starts: an unknown or invalid key is one line
on stderr naming it (``pipeline.mask.min_tokenz: unknown key``) and exit status 2, as
is any other ctxwarden error (a corpus path that does not exist).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from stop_deficit import FROM_TURN, worst_stop

from ctxwarden.config import EngineConfig, StoreConfig
from ctxwarden.errors import ConfigError, CtxwardenError
from ctxwarden.pipeline.presets import PRESETS, resolve_pipeline
from ctxwarden.replay.inputs import expand_paths
from ctxwarden.replay.runner import ReplayOptions, run_replay

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "sessions"


def _parse_sets(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _run(job: tuple[list[str], str, dict[str, Any]]) -> list[dict[str, Any]]:
    files, preset, overrides = job
    # a memory store per process: a shared on-disk store would carry session state over
    # from earlier runs (and other configs) and skew the figures
    config = EngineConfig(preset=preset, pipeline=overrides, store=StoreConfig(backend="memory"))
    result = run_replay(files, [config], baselines=("exact",), options=ReplayOptions())
    subject = result.subject(result.subjects[-1].name)
    exact = {s.session: s for s in result.subject("exact").sessions}
    rows = []
    for s in subject.sessions:
        base = exact[s.session]
        rows.append(
            {
                "session": s.session,
                "tokens": sum(s.tokens),
                "exact": sum(s.exact_tokens),
                "reduction": s.reduction(),
                "anthropic": s.saving("anthropic"),
                "anthropic_any_turn": worst_stop(base.cost_anthropic, s.cost_anthropic),
                "anthropic_late": worst_stop(base.cost_anthropic, s.cost_anthropic, FROM_TURN),
                "openai": s.saving("openai"),
                "support": (s.support_visible, s.support_total),
                "critical": (s.critical_visible, s.critical_total),
                "ms": s.ms,
                "violations": sum(s.violations.values()),
            }
        )
    return rows


def _summary(rows: list[dict[str, Any]]) -> str:
    red = [r["reduction"] for r in rows if r["reduction"] is not None]
    ant = [r["anthropic"] for r in rows if r["anthropic"] is not None]
    sv = sum(r["support"][0] for r in rows)
    st = sum(r["support"][1] for r in rows)
    cv = sum(r["critical"][0] for r in rows)
    ct = sum(r["critical"][1] for r in rows)
    ms = sorted(m for r in rows for m in r["ms"])
    tokens = sum(r["tokens"] for r in rows)
    exact = sum(r["exact"] for r in rows)
    worst = min(rows, key=lambda r: r["anthropic"] if r["anthropic"] is not None else 1)
    below = sum(1 for a in ant if a < -0.02)
    any_turn = min(r["anthropic_any_turn"] for r in rows)
    late = min(r["anthropic_late"] for r in rows)
    return (
        f"median red {100 * statistics.median(red):5.1f}%  total {100 * (1 - tokens / exact):5.1f}%"
        f"  support {100 * sv / max(st, 1):5.1f}%  errors {100 * cv / max(ct, 1):5.1f}%"
        f"  anthropic median {100 * statistics.median(ant):5.1f}%"
        f" worst {100 * worst['anthropic']:5.1f}%"
        f" ({below} < -2%), at any turn {100 * any_turn:5.1f}%"
        f" (from turn {FROM_TURN} {100 * late:5.1f}%)"
        f"  p95 {ms[int(0.95 * (len(ms) - 1))]:.1f} ms"
        f"  violations {sum(r['violations'] for r in rows)}"
        f"  >= 60%: {sum(r >= 0.6 for r in red)}/{len(red)}"
    )


def main() -> int:
    """Run the comparison; 0 when every group ran, 2 (one line on stderr) on an error."""
    try:
        return _main()
    except CtxwardenError as exc:
        print(f"{_prog()}: error: {exc}", file=sys.stderr)
        return 2


def _prog() -> str:
    return Path(sys.argv[0]).name


def _main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=8)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--json", help="write per-session rows here")
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        help="only session files whose name starts with this corpus source "
        "(e.g. minisweagent_pr816; repeatable), before --every applies",
    )
    parser.add_argument(
        "configs", nargs=argparse.REMAINDER, help="PRESET [--set k=v ...] [--next ...]"
    )
    args = parser.parse_args()
    groups: list[list[str]] = [[]]
    for token in args.configs:
        if token == "--next":
            groups.append([])
        else:
            groups[-1].append(token)
    configs: list[tuple[str, list[str], dict[str, Any]]] = []
    for group in groups:
        preset = "balanced"
        sets: list[str] = []
        named = False
        it = iter(group)
        for token in it:
            if token == "--set":
                sets.append(next(it, ""))
            elif token in PRESETS and not named:
                preset, named = token, True
            else:  # options go before the configs: "--json F aggressive", not after
                parser.error(f"unexpected {token!r} in a config group (PRESET [--set k=v ...])")
        overrides = _parse_sets(sets)
        try:  # every group before any replay: a typo must not wait for the first run
            resolve_pipeline(preset, overrides)
        except ConfigError as exc:
            given = "".join(f" --set {item}" for item in sets)
            print(f"{_prog()}: error: {exc} (config {preset}{given})", file=sys.stderr)
            return 2
        configs.append((preset, sets, overrides))
    files = [
        str(f)
        for f in expand_paths([args.corpus])
        if not args.source or f.name.split("__")[0] in args.source
    ][args.offset :: args.every]
    if not files:
        print(f"{_prog()}: error: no session file in {args.corpus} matches", file=sys.stderr)
        return 2
    chunks = [files[i :: args.jobs * 4] for i in range(args.jobs * 4)]
    dump: dict[str, Any] = {}
    for preset, sets, overrides in configs:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = [
                r
                for part in pool.map(_run, [(c, preset, overrides) for c in chunks if c])
                for r in part
            ]
        label = f"{preset} {' '.join(sets)}".strip()
        print(f"{label}\n  {_summary(rows)}", flush=True)
        dump[label] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(dump))
    return 0


if __name__ == "__main__":
    sys.exit(main())
