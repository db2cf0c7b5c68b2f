"""Full garbage-collection pauses of a proxy-sized engine (a benchmark, not a test).

S corpus sessions (each its own session key) go turn by turn through one ``Engine``,
as a proxy with S live sessions holds them in its memos; every full (generation 2)
collection's CPU time is recorded. ``--hook`` installs the proxy's
:func:`ctxwarden.proxy.gc_pauses.freeze_after_full_collections` (``ctxwarden serve``
always does).

    .venv/bin/python benchmarks/gc_pauses.py [CORPUS_DIR] [--sessions 160] [--hook]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path
from typing import Any

from ctxwarden import Engine, EngineConfig
from ctxwarden.io import load_session, session_requests
from ctxwarden.proxy.gc_pauses import freeze_after_full_collections

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", nargs="?", default=str(ROOT.parent / "shared/corpus/sessions"))
    parser.add_argument("--sessions", type=int, default=160)
    parser.add_argument("--hook", action="store_true", help="freeze after full collections")
    args = parser.parse_args()
    files = sorted(Path(args.corpus).glob("*.json.gz"))[: args.sessions]
    pauses: list[float] = []
    started: list[float] = []

    def timer(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            started.append(time.thread_time())
        elif started:
            pauses.append((time.thread_time() - started.pop()) * 1000)

    gc.callbacks.append(timer)  # first: its start is read before the hook's unfreeze
    remove = freeze_after_full_collections() if args.hook else None
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    times: list[float] = []
    for k, path in enumerate(files):
        for request, _ in session_requests(load_session(path)):
            begun = time.thread_time()
            engine.condense(request, session=f"s{k}")
            times.append((time.thread_time() - begun) * 1000)
    if remove is not None:
        remove()
    q = statistics.quantiles(times, n=1000)
    print(
        f"{len(files)} sessions, {len(times)} requests, hook {'on' if args.hook else 'off'}: "
        f"{len(pauses)} full collections, {sum(pauses) / 1000:.2f} s in them, the last "
        f"five {[round(p) for p in pauses[-5:]]} ms, longest {max(pauses, default=0):.0f} ms; "
        f"objects tracked at the end {len(gc.get_objects())}; request CPU p50 {q[499]:.1f} "
        f"p99 {q[989]:.1f} p99.9 {q[998]:.1f} ms"
    )


if __name__ == "__main__":
    main()
