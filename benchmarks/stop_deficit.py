"""How much dearer than exact a session can be if it stops at any turn (not a test).

The replay reports each session's cost saving at its recorded end. A session that
stops earlier (an agent that finishes sooner, a user who gives up) ends wherever it
is: right after a compaction step, before the step has paid back its cache rewrite,
it can be dearer than exact by more than at its recorded end. This reads a
``ctxwarden replay --json`` file and prints, per configuration and price style, the
worst such figure over every turn of every session, and how many sessions are ever
more than 2% dearer; then the same from the 20th turn on.

    .venv/bin/python benchmarks/stop_deficit.py r.json
"""

from __future__ import annotations

import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

import orjson

STYLES = ("anthropic", "openai")


FROM_TURN = 20
"""The shortest session of the corpus has 20 turns: stops from there on are the ones a
session of the same sources ends at."""


def worst_stop(exact: list[float], sent: list[float], from_turn: int = 1) -> float:
    """The lowest saving ``1 - sent / exact`` over every prefix of the turns' costs of
    ``from_turn`` turns or more (0 when there is none)."""
    prefixes = zip(accumulate(exact), accumulate(sent), strict=True)
    return min(
        (1 - s / e for n, (e, s) in enumerate(prefixes, 1) if n >= from_turn and e > 0),
        default=0.0,
    )


def rows(report: dict[str, Any]) -> list[str]:
    subjects = {s["name"]: s for s in report["subjects"]}
    exact = {s["session"]: s["turns"] for s in subjects["exact"]["sessions"]}
    out = [
        "| config | worst at any turn, Anthropic / OpenAI | sessions ever below -2% "
        f"| worst from turn {FROM_TURN} on | sessions below -2% from turn {FROM_TURN} on "
        "| worst at the recorded end, Anthropic / OpenAI |",
        "|---|---|---|---|---|---|",
    ]
    for name, subject in subjects.items():
        if name == "exact":
            continue
        worst = dict.fromkeys(STYLES, 0.0)
        late = dict.fromkeys(STYLES, 0.0)
        end = dict.fromkeys(STYLES, 0.0)
        below = dict.fromkeys(STYLES, 0)
        late_below = dict.fromkeys(STYLES, 0)
        for session in subject["sessions"]:
            turns, base = session["turns"], exact[session["session"]]
            for style in STYLES:
                key = f"cost_{style}"
                w = worst_stop(base[key], turns[key])
                worst[style] = min(worst[style], w)
                below[style] += w < -0.02
                w = worst_stop(base[key], turns[key], FROM_TURN)
                late[style] = min(late[style], w)
                late_below[style] += w < -0.02
                if sum(base[key]) > 0:
                    end[style] = min(end[style], 1 - sum(turns[key]) / sum(base[key]))
        out.append(
            f"| {name} | {100 * worst['anthropic']:.1f}% / {100 * worst['openai']:.1f}% "
            f"| {below['anthropic']} / {below['openai']} of {len(subject['sessions'])} "
            f"| {100 * late['anthropic']:.1f}% / {100 * late['openai']:.1f}% "
            f"| {late_below['anthropic']} / {late_below['openai']} "
            f"| {100 * end['anthropic']:.1f}% / {100 * end['openai']:.1f}% |"
        )
    return out


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: stop_deficit.py REPLAY_JSON")
    print("\n".join(rows(orjson.loads(Path(sys.argv[1]).read_bytes()))))


if __name__ == "__main__":
    main()
