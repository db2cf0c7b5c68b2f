"""Engine overhead benchmark (not a test): condense time per request on real sessions.

Every assistant turn of every session becomes one request, sent in order through one
``Engine`` per session (memory store), exactly as a proxy sees them. Prints p50 / p95 /
max milliseconds of ``Engine.condense`` alone (no replay metrics in the process).

    .venv/bin/python benchmarks/engine_overhead.py [CORPUS_DIR] [--preset balanced] [--every N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ctxwarden import Engine, EngineConfig
from ctxwarden.io import load_session, session_requests

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(ROOT.parent / "shared/corpus/sessions"))
    parser.add_argument("--preset", default="balanced")
    parser.add_argument("--every", type=int, default=1, help="every N-th session only")
    args = parser.parse_args()
    files = sorted(Path(args.corpus).glob("*.json.gz"))[:: args.every]
    Engine(EngineConfig(store={"backend": "memory"})).counter_for(None)  # load vocabulary
    times: list[float] = []
    for path in files:
        session = load_session(path)
        engine = Engine(EngineConfig(preset=args.preset, store={"backend": "memory"}))
        for request, _ in session_requests(session):
            started = time.perf_counter()
            engine.condense(request, session=session.id)
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p50, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
    print(
        f"{args.preset}: {len(files)} sessions, {len(times)} requests; "
        f"condense p50 {p50:.2f} ms, p95 {p95:.2f} ms, max {times[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
