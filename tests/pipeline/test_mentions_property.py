"""Property: while the client only appends, no string of a masked output leaves the
request (beyond the mention cap), whatever the planner adopts turn by turn and whatever
dedupe and supersede do to the outputs that showed it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxwarden.signals import distinctive_strings
from tests.passes.convo import call, lines_of, make_engine, request, result

_TAGS = ("alpha", "beta", "gamma", "delta", "eps")
_COMMANDS = ("cat a.py", "cat b.py", "ls", "grep x a.py", "run")

_turn = st.tuples(
    st.sampled_from(_COMMANDS),
    st.lists(st.tuples(st.sampled_from(_TAGS), st.integers(5, 40)), min_size=1, max_size=2),
    st.booleans(),  # repeat the previous output instead
)


# two sessions a random search found (the planner adopted a newer proposal alone)
_FOUND = [
    (
        [("run", [("delta", 24)], False), ("grep x a.py", [("eps", 37), ("beta", 33)], True),
         ("ls", [("alpha", 31), ("gamma", 40)], False),
         ("run", [("beta", 8), ("gamma", 17)], False),
         ("cat a.py", [("gamma", 23), ("beta", 19)], True),
         ("ls", [("alpha", 20), ("eps", 15)], False), ("grep x a.py", [("alpha", 10)], False)],
        600,
        (3, 3),
    ),
    (
        [("cat a.py", [("delta", 40), ("gamma", 40)], False),
         ("cat a.py", [("alpha", 20), ("delta", 34)], True),
         ("run", [("eps", 35), ("gamma", 28)], True), ("ls", [("alpha", 8), ("alpha", 29)], False),
         ("ls", [("delta", 31)], False), ("grep x a.py", [("gamma", 26), ("eps", 34)], False),
         ("cat a.py", [("beta", 34), ("eps", 5)], True),
         ("cat a.py", [("beta", 10), ("gamma", 35)], True),
         ("cat b.py", [("delta", 31), ("delta", 36)], False)],
        600,
        (3, 10),
    ),
]  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(_turn, min_size=4, max_size=10),
    recency=st.sampled_from([0, 200, 600]),
    horizon=st.tuples(st.sampled_from([1, 3, 10]), st.sampled_from([3, 10, 50])).map(
        lambda h: (min(h), max(h))  # a min above the max is refused; the max won anyway
    ),
)
@example(*_FOUND[0])
@example(*_FOUND[1])
def test_no_string_of_a_masked_output_leaves_the_request(
    turns: list[tuple[str, list[tuple[str, int]], bool]],
    recency: int,
    horizon: tuple[int, int],
) -> None:
    planner = {"floor_tokens": 0, "floor_ratio": 0, "min_expected_turns": horizon[0],
               "max_expected_turns": horizon[1]}  # fmt: skip
    engine = make_engine(
        pipeline={
            "recency_tokens": recency,
            "relevance_turns": 0,
            "mask": {"max_keywords": 2000, "min_mention_score": 0},
            "planner": planner,
        }
    )
    flat: list[dict[str, Any]] = []
    for t, (command, parts, repeat) in enumerate(turns):
        text = "\n".join(lines_of(tag, n) for tag, n in parts)
        if repeat and flat:
            text = flat[-1]["content"]
        flat += [call(f"c{t}", f"{command} {t}" if command == "run" else command),
                 result(f"c{t}", text)]  # fmt: skip
        wire = request(*flat)
        sent = engine.condense(wire, session="s").request["messages"]
        visible = "\n".join(str(m.get("content") or "") for m in sent)
        for before, after in zip(wire["messages"], sent, strict=True):
            if before.get("role") != "tool" or before["content"] == after["content"]:
                continue
            if not after["content"].startswith("[ctxwarden: condensed output"):
                continue  # a duplicate's pointer or a superseded run's note: lossless
            for word in distinctive_strings(before["content"]):
                assert word in visible, (t, word)
