"""Per-source view of a replay's reduction (not a test): the figures behind the README's
discussion of the aggressive target.

For every configuration of a ``ctxwarden replay --json`` file: per corpus source (the
session file name's prefix, e.g. ``msb_sweagent``), the sessions, their median
reduction and how many reach ``--target``; then the median reduction per request.

    python benchmarks/reduction_breakdown.py r.json [--corpus DIR] [--target 0.6]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/corpus/sessions"))
    parser.add_argument("--target", type=float, default=0.6)
    args = parser.parse_args()
    source = {}
    for path in Path(args.corpus).glob("*.json.gz"):
        prefix, _, rest = path.name.partition("__")
        source[rest.removesuffix(".json.gz")] = prefix
    report = orjson.loads(Path(args.report).read_bytes())
    for subject in report["subjects"]:
        if subject["name"] == "exact":
            continue
        by_source: dict[str, list[float]] = defaultdict(list)
        per_request: list[float] = []
        for s in subject["sessions"]:
            by_source[source.get(s["session"], "?")].append(s["reduction"])
            turns = s["turns"]
            per_request += [
                1 - t / e for t, e in zip(turns["tokens"], turns["exact_tokens"], strict=True) if e
            ]
        every = [r for values in by_source.values() for r in values]
        reach = sum(r >= args.target for r in every)
        median = 100 * statistics.median(every)
        print(
            f"{subject['name']}: {len(every)} sessions, median {median:.1f}%, {reach} at "
            f"{100 * args.target:.0f}% or more; per request median "
            f"{100 * statistics.median(per_request):.1f}%"
        )
        for name, values in sorted(by_source.items()):
            print(
                f"  {name:24} {len(values):4} sessions  median "
                f"{100 * statistics.median(values):5.1f}%  >= target: "
                f"{sum(r >= args.target for r in values)}"
            )


if __name__ == "__main__":
    main()
