"""The planner's free-step rule and the state that carries it across requests."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.config import StoreConfig
from ctxwarden.io import bundled_sessions, load_session, session_requests
from ctxwarden.pipeline.condenser import step_is_free
from ctxwarden.pipeline.presets import PlannerConfig
from ctxwarden.pipeline.state import SessionState
from ctxwarden.tokens.budget import Budget
from tests.passes.convo import MODEL, call, lines_of, result

PLANNER = PlannerConfig(
    free_step_cost=0.5,
    free_payback_turns=1,
    risk_window=2,
    free_step_deficit_requests=0.4,
    max_session_deficit=0.015,
)


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


@pytest.mark.parametrize(
    ("cum_exact", "cum_sent", "exact_cost", "step_cost", "bound", "fits"),
    [
        (1000.0, 1000.0, 100.0, 150.0, 0.05, True),  # 1,150 against 1,100: 4.5% dearer
        (1000.0, 1000.0, 100.0, 160.0, 0.05, False),  # 1,160 against 1,100: 5.5%
        (1000.0, 1000.0, 100.0, 160.0, 0.015, False),
        (1000.0, 900.0, 100.0, 210.0, 0.015, True),  # earlier savings pay for this step
        (0.0, 0.0, 100.0, 100.0, 0.0, True),  # a first request sent as cheap as exact
    ],
)
def test_fits_ledger_bounds_the_session_as_if_it_ended_now(
    cum_exact: float, cum_sent: float, exact_cost: float, step_cost: float, bound: float, fits: bool
) -> None:
    from ctxwarden.pipeline.condenser import fits_ledger

    state = SessionState(cum_exact={"anthropic": cum_exact}, cum_sent={"anthropic": cum_sent})
    assert fits_ledger(state, "anthropic", exact_cost, step_cost, bound) is fits
    # a style with no ledger yet: this request alone is the session
    alone = step_cost - exact_cost <= bound * exact_cost
    assert fits_ledger(state, "openai", exact_cost, step_cost, bound) is alone


@pytest.mark.parametrize(
    ("turns", "bound"),
    [
        (0, 0.4),  # the first request: 0.4 of itself
        (7, 0.05),  # the 8th: 0.4 of an average request is 5% of the session
        (19, 0.02),
        (100, 0.015),  # never tighter than the ledger's own bound
    ],
)
def test_the_free_step_bound_is_a_share_of_an_average_request(turns: int, bound: float) -> None:
    from ctxwarden.pipeline.condenser import free_step_bound

    assert free_step_bound(SessionState(turns=turns), PLANNER) == pytest.approx(bound)


def _worst_excess_after_steps(path: Path, requests: float | None) -> float:
    """The largest amount by which the session's cost so far exceeds exact's beyond the
    default free-step bound (as a share of exact; negative: within it), read from its
    ledger after each unforced compaction step of the bundled session ``path``, run
    with ``free_step_deficit_requests=requests`` (the default: ``None``)."""
    from ctxwarden.pipeline.condenser import free_step_bound

    override = {} if requests is None else {"free_step_deficit_requests": requests}
    engine = Engine(
        EngineConfig(pipeline={"planner": override}, store=StoreConfig(backend="memory"))
    )
    planner = PlannerConfig()
    worst = -1.0
    for wire, _ in session_requests(load_session(path)):
        report = engine.condense(wire, session="s").report
        if not report["new_replacements"] or report["forced_step"]:
            continue
        state = SessionState.decode(engine.store.get_state("local", "s"))
        # the bound the step was judged by: the state counted this request since
        bound = free_step_bound(replace(state, turns=state.turns - 1), planner)
        for style, exact in state.cum_exact.items():
            worst = max(worst, (state.cum_sent[style] - exact) / exact - bound)
    return worst


@pytest.mark.parametrize("path", bundled_sessions(), ids=lambda p: p.name[:40])
def test_no_unforced_step_leaves_the_session_dearer_than_the_free_step_bound(path: Path) -> None:
    assert _worst_excess_after_steps(path, None) <= 1e-9


def test_the_free_step_bound_binds_on_a_bundled_session() -> None:
    # without it, an early free step leaves a session about a tenth dearer until it pays
    assert max(_worst_excess_after_steps(p, 100.0) for p in bundled_sessions()) > 0.02


# window 20,000, reserve 1,000: usable 19,000, hard trigger 17,600; floor max(128, 1%)
_BUDGET = Budget(context_window=20_000, output_reserve=1_000, window_source="config")


@pytest.mark.parametrize(
    ("total", "saving", "pays"),
    [
        (18_000, 180, True),  # the floor (1% of the request) is met
        (18_000, 179, False),  # below it, and the request fitted anyway
        (19_050, 60, True),  # below it, but the request now fits the usable budget
        (20_100, 120, True),  # ... or the window at all
        (21_000, 120, False),  # over the window either way
        (19_500, 120, False),  # over the usable budget either way
    ],
)
def test_a_forced_step_pays_by_its_floor_or_by_making_the_request_fit(
    total: int, saving: int, pays: bool
) -> None:
    from ctxwarden.pipeline.condenser import forced_step_pays

    assert forced_step_pays(_BUDGET, PlannerConfig(), total, saving) is pays


def test_a_huge_newest_output_forces_no_step_that_saves_next_to_nothing() -> None:
    """The newest output, always sent exact, holds the request over the hard trigger;
    what older content offers is below the floor, and the request fits its window
    either way: no step is forced (one was, and broke the prompt cache for 77 tokens;
    a corpus session lost 1.7% of its cost that way under conservative)."""
    engine = Engine(
        EngineConfig(
            budget={"context_window": 20_000, "output_reserve": 1_000},
            store=StoreConfig(backend="memory"),
        )
    )
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing build."},
    ]
    for i in range(12):
        messages += [
            call(f"c{i}", f"cat f{i}.py"),
            result(f"c{i}", lines_of(f"f{i}", 8 if i == 0 else 1)),
        ]
        report = engine.condense({"model": MODEL, "messages": messages}, session="s").report
        assert report["band"] == "low"
    messages += [call("cz", "find /usr"), result("cz", lines_of("big", 1100))]
    report = engine.condense({"model": MODEL, "messages": messages}, session="s").report
    assert report["band"] == "hard"
    assert 17_600 < report["tokens_before"] < 19_000  # over the hard trigger, fits
    assert not report["forced_step"]
    assert not report["rewritten"]
    assert not report["compaction_step"]


def test_a_budget_style_prices_the_steps() -> None:
    """``[budget] style`` was accepted and ignored unless the planner's price_style was
    "model": the ledger priced both providers whatever the style said."""
    path = bundled_sessions()[0]
    ledgers = {}
    for style in (None, "openai", "anthropic"):
        budget = {} if style is None else {"style": style}
        engine = Engine(EngineConfig(budget=budget, store=StoreConfig(backend="memory")))
        for wire, _ in session_requests(load_session(path)):
            engine.condense(wire, session="s")
        state = SessionState.decode(engine.store.get_state("local", "s"))
        ledgers[style] = state.cum_exact
    assert set(ledgers[None]) == {"openai", "anthropic"}
    assert set(ledgers["openai"]) == set(ledgers["anthropic"]) == {"model"}
    # each style's own prices: Anthropic's cache writes cost more
    assert ledgers["anthropic"]["model"] > ledgers["openai"]["model"]
