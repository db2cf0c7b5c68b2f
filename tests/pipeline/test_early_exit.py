"""Early exit of a forced step: the passes stop once the step's target is saved.

A step the soft or hard band forces aims at ``request - 0.8 * soft trigger`` tokens;
every pass, whether or not it reads the target itself, has its proposals taken oldest
first only until the target is met, and a pass is told what earlier passes left.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden import Engine, EngineConfig
from tests.passes.convo import FORCE, MODEL, call, call_with, lines_of, result


def _write(call_id: str, i: int) -> dict[str, Any]:
    content = "\n".join(f"line {j}: value_{i}_{j} = compute({j})" for j in range(60))
    return call_with(call_id, "write", {"path": f"f{i}.py", "content": content})


def _request(kind: str) -> dict[str, Any]:
    turns: list[dict[str, Any]] = []
    for i in range(20):
        if kind == "trim_args":
            turns += [_write(f"c{i}", i), result(f"c{i}", "ok")]
        else:  # outputs repeated every fifth turn: dedupe finds some, mask the rest
            turns += [
                call(f"c{i}", f"cat f{i % 5}.py"),
                result(f"c{i}", lines_of(f"o{i % 5 if i % 2 else i}", 60)),
            ]
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing build."},
        *turns,
        {"role": "assistant", "content": "Looking at the results."},
        {"role": "user", "content": "please continue"},
    ]
    return {"model": MODEL, "messages": messages}


def _engine(order: list[str], window: int | None = None) -> Engine:
    budget = {} if window is None else {"context_window": window}
    return Engine(
        EngineConfig(pipeline={**FORCE, "order": order}, budget=budget, store={"backend": "memory"})
    )


@pytest.mark.parametrize("order", [["trim_args"], ["dedupe", "mask"]], ids=lambda o: "+".join(o))
def test_a_forced_step_saves_its_target_and_little_more(order: list[str]) -> None:
    wire = _request(order[0])
    total = _engine(order).condense(wire, session="probe").report["tokens_before"]
    # a window whose soft band forces a step of about a fifth of the request
    for window in range(8_000, 200_000, 500):
        engine = _engine(order, window)
        budget = engine.budget_for(MODEL)
        target = total - int(0.8 * budget.soft_trigger)
        if budget.band(total) in ("soft", "hard") and target < 0.25 * total:
            break
    report = engine.condense(wire, session="s").report
    assert report["forced_step"]
    saved = total - report["tokens_after"]
    biggest = max(t["tokens_saved"] / t["count"] for t in report["transforms"].values())
    assert target <= saved < target + 2 * biggest, (target, saved, report["transforms"])
