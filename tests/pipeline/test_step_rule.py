"""The planner's free-step rule and the state that carries it across requests."""

from __future__ import annotations

import pytest

from ctxwarden.pipeline.condenser import step_is_free
from ctxwarden.pipeline.presets import PlannerConfig
from ctxwarden.pipeline.state import SessionState

PLANNER = PlannerConfig(free_step_cost=0.5, free_payback_turns=1, risk_window=2)


@pytest.mark.parametrize(
    ("extra", "payback", "turns", "risk_until", "free"),
    [
        (40, 0.5, 10, 0, True),  # cheap and quick: free
        (60, 0.5, 10, 0, False),  # costs more than half the exact request: ledger
        (40, 3.0, 10, 0, True),  # a slow bet with none outstanding: free
        (40, 3.0, 10, 12, False),  # a second slow bet while the first is unpaid: ledger
        (40, 0.5, 10, 12, True),  # a quick step is free even then
        (40, 3.0, 12, 12, True),  # the window is over
    ],
)
def test_step_is_free(
    extra: float, payback: float, turns: int, risk_until: int, free: bool
) -> None:
    state = SessionState(turns=turns, risk_until=risk_until)
    assert step_is_free(extra, 100.0, payback, state, PLANNER) is free


def test_risk_window_survives_the_store_round_trip() -> None:
    state = SessionState(turns=7, risk_until=9)
    assert SessionState.decode(state.encode()).risk_until == 9
    # a state written before the field existed reads as no outstanding bet
    legacy = state.encode().replace(b',"risk_until":9', b"")
    assert b"risk_until" not in legacy
    assert SessionState.decode(legacy).risk_until == 0
    assert SessionState.decode(legacy).turns == 7


def test_request_cost_follows_the_cache_rules() -> None:
    from ctxwarden.pipeline.costs import PriceStyle, request_cost

    anthropic = PriceStyle("anthropic", read=0.1, write=1.25, min_cacheable=1024)
    # too short to cache: plain input price, no write premium
    assert request_cost(800, 0, anthropic) == 800.0
    # a prefix below the minimum is not served from the cache
    assert request_cost(3000, 1000, anthropic) == 1.25 * 3000
    # a cached prefix is read at 0.1, the rest written at 1.25
    assert request_cost(3000, 2000, anthropic) == 0.1 * 2000 + 1.25 * 1000


def test_a_state_from_a_newer_replica_keeps_what_this_one_knows() -> None:
    import orjson

    data = orjson.loads(SessionState(turns=5, steps=2).encode())
    data["something_new"] = [1, 2, 3]
    state = SessionState.decode(orjson.dumps(data))
    assert (state.turns, state.steps) == (5, 2)
