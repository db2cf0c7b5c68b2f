"""Engine overhead benchmark (not a test): condense time per request on real sessions.

Every assistant turn of every session becomes one request, sent in order through one
``Engine`` per session (memory store), exactly as a proxy sees them. Prints p50 / p95 /
max milliseconds of ``Engine.condense`` alone (no replay metrics in the process).

With ``--interleave K`` one engine serves all sessions, K at a time, turn by turn in
turn (the first request of each of K sessions, then the second of each...): what a
proxy with K live sessions sees. Its per-process memos must then hold the histories of
all K sessions at once. ``--memo-mb N`` caps the memos together
(:func:`ctxwarden.set_memo_budget`, as ``serve --memo-mb``); the line printed last gives
their estimated weight and the process's peak RSS at the end.

    .venv/bin/python benchmarks/engine_overhead.py [CORPUS_DIR] [--preset balanced] [--every N]
        [--interleave K] [--memo-mb N]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

from ctxwarden import Engine, EngineConfig, set_memo_budget
from ctxwarden.io import load_session, session_requests
from ctxwarden.memo import memo_weight

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(ROOT.parent / "shared/corpus/sessions"))
    parser.add_argument("--preset", default="balanced")
    parser.add_argument("--every", type=int, default=1, help="every N-th session only")
    parser.add_argument("--interleave", type=int, default=0, help="K live sessions, one engine")
    parser.add_argument("--memo-mb", type=float, help="memo budget (default: built-in)")
    args = parser.parse_args()
    if args.memo_mb is not None:
        set_memo_budget(int(args.memo_mb * 1024 * 1024))
    files = sorted(Path(args.corpus).glob("*.json.gz"))[:: args.every]
    Engine(EngineConfig(store={"backend": "memory"})).counter_for(None)  # load vocabulary
    times = interleaved(files, args) if args.interleave > 0 else one_by_one(files, args)
    times.sort()
    p50, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
    mode = f", {args.interleave} live sessions" if args.interleave > 0 else ""
    print(
        f"{args.preset}: {len(files)} sessions{mode}, {len(times)} requests; "
        f"condense p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {times[-1]:.1f} ms"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"memos {memo_weight() / 2**20:.1f} MB (estimated) at the end; peak RSS {peak:.0f} MB")


def _timed(engine: Engine, request: dict[str, Any], session: str, times: list[float]) -> None:
    started = time.perf_counter()
    engine.condense(request, session=session)
    times.append((time.perf_counter() - started) * 1000)


def one_by_one(files: list[Path], args: argparse.Namespace) -> list[float]:
    """One engine per session, its requests in order."""
    times: list[float] = []
    for path in files:
        session = load_session(path)
        engine = Engine(EngineConfig(preset=args.preset, store={"backend": "memory"}))
        for request, _ in session_requests(session):
            _timed(engine, request, session.id, times)
    return times


def interleaved(files: list[Path], args: argparse.Namespace) -> list[float]:
    """One engine; sessions in groups of ``--interleave``, each group turn by turn."""
    times: list[float] = []
    engine = Engine(EngineConfig(preset=args.preset, store={"backend": "memory"}))
    for start in range(0, len(files), args.interleave):
        group = []
        for path in files[start : start + args.interleave]:
            session = load_session(path)
            group.append((path.name, [r for r, _ in session_requests(session)]))
        for turn in range(max(len(requests) for _, requests in group)):
            for key, requests in group:
                if turn < len(requests):
                    _timed(engine, requests[turn], key, times)
    return times


if __name__ == "__main__":
    main()
