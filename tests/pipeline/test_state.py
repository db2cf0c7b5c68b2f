"""The session state's format: round trips, and replicas of the previous version and
this one read each other's states during a rolling deploy."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.pipeline.state import Decision, SessionState

_decisions = st.dictionaries(
    st.text(min_size=1, max_size=12),
    st.builds(
        Decision,
        text=st.text(min_size=1, max_size=30),
        transform=st.sampled_from(["mask", "dedupe", "summarize"]),
        original_ref=st.just("cw:5f3a9c21e0b4"),
        refs=st.lists(st.just("cw:000000000001"), max_size=2),
        saved=st.integers(0, 10_000),
        adopted=st.integers(0, 500),
        witness=st.none() | st.tuples(st.just("/messages/3/content"), st.just("cw:000000000002")),
    ),
    max_size=5,
)


@given(decisions=_decisions, turns=st.integers(0, 1000))
def test_state_round_trips(decisions: dict[str, Decision], turns: int) -> None:
    state = SessionState(
        decisions=decisions, turns=turns, sent_hashes=["a", "b"], sent_tokens=[1, 2]
    )
    assert SessionState.decode(state.encode()) == state


def _previous_version_decode(raw: bytes) -> dict[str, Any]:
    """What the previous release's decoder did with a state: five-element decisions,
    unknown top-level keys ignored."""
    data = orjson.loads(raw)
    decisions = {k: Decision(*v) for k, v in data["decisions"].items()}
    return {"decisions": decisions, "turns": data["turns"]}


@given(decisions=_decisions)
def test_the_previous_version_reads_this_versions_state(decisions: dict[str, Decision]) -> None:
    raw = SessionState(decisions=decisions, turns=9).encode()
    old = _previous_version_decode(raw)
    assert old["turns"] == 9
    assert {k: (d.text, d.refs) for k, d in old["decisions"].items()} == {
        k: (d.text, d.refs) for k, d in decisions.items()
    }


def test_a_state_without_adoption_turns_counts_them_as_the_previous_turn() -> None:
    """A state the previous version wrote: its decisions are read back once more on the
    next request (their adoption turn is unknown)."""
    legacy = orjson.dumps(
        {
            "v": 1,
            "decisions": {"/messages/3/content": ["text", "mask", "cw:5f3a9c21e0b4", [], 12]},
            "turns": 7,
        }
    )
    state = SessionState.decode(legacy)
    assert state.turns == 7
    assert state.decisions["/messages/3/content"].adopted == 6


def test_a_damaged_witness_is_read_as_none_not_a_lost_session() -> None:
    """A state another writer damaged must not make every later request fall back."""
    raw = orjson.dumps(
        {
            "v": 1,
            "decisions": {"/messages/3/content": ["t", "mask", "cw:5f3a9c21e0b4", [], 1]},
            "witness": {"/messages/3/content": ["only-one"]},
            "turns": 3,
        }
    )
    state = SessionState.decode(raw)
    assert state.turns == 3
    assert state.decisions["/messages/3/content"].witness is None
