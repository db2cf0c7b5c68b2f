"""Upper bound of the input-token reduction any engine can reach under the exactness rules.

Not a test: a measurement behind the issue-4 discussion of the aggressive target. For
every request of every session it counts the tokens that must stay exact (the header,
system / developer messages, the first user message and everything after the last
assistant message: :func:`ctxwarden.replay.integrity.protected_positions`) and charges
every other message only ``--stub`` tokens, as if its content vanished. A session's
ceiling is ``1 - sum(floor) / sum(exact)`` over its turns, counted like
``ctxwarden replay`` counts reduction (same token counter, same per-message overhead).

    python benchmarks/reduction_ceiling.py ../shared/corpus/sessions --target 0.6
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ctxwarden.replay.inputs import expand_paths, iter_sessions
from ctxwarden.replay.integrity import protected_positions
from ctxwarden.replay.view import RequestView
from ctxwarden.tokens.counter import TokenCounter
from ctxwarden.tokens.registry import load_registry


def _source(path: Path) -> str:
    """The corpus source prefix of a session file name (``msb_sweagent__...``)."""
    return path.name.split("__")[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--stub", type=int, default=6, help="tokens left of a vanished message")
    parser.add_argument("--target", type=float, default=0.6)
    args = parser.parse_args()
    registry = load_registry()
    files = expand_paths(args.paths)
    by_source: dict[str, list[float]] = defaultdict(list)
    for index, session in iter_sessions(files):
        info = registry.lookup(session.model)
        counter = TokenCounter(registry.tokenizer_for(info))
        view = RequestView(counter.count_text)
        exact = floor = 0
        for rr in session.requests:
            step = view.advance(rr.request, rr.api)
            keep = protected_positions(step.messages)
            exact += step.tokens
            floor += step.header.tokens + sum(
                m.tokens if i in keep else min(m.tokens, args.stub)
                for i, m in enumerate(step.messages)
            )
        if exact:
            by_source[_source(files[index])].append(1 - floor / exact)
    everything = [v for values in by_source.values() for v in values]
    print(f"sessions {len(everything)}  ceiling median {100 * statistics.median(everything):.1f}%")
    for source, values in sorted(by_source.items()):
        reach = sum(v >= args.target for v in values)
        median = 100 * statistics.median(values)
        print(
            f"  {source:24} {len(values):4} sessions  median {median:5.1f}%"
            f"  >= {100 * args.target:.0f}%: {reach}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
