"""Per-pass property: run alone and forced, no pass breaks pairing, changes a protocol
field, touches the protected messages, hides an error line or leaves a dead reference."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from ctxwarden import Engine
from ctxwarden.pipeline.presets import PASS_NAMES
from tests.passes.convo import FORCE, make_engine
from tests.passes.strategies import chat_requests, check_invariants, fresh_session

_ENGINES: dict[str, Engine] = {}


def _engine(name: str) -> Engine:
    if name not in _ENGINES:
        pipeline = {**FORCE, "order": [name], "summarize": {"enabled": True, "min_tokens": 100}}
        if name == "suppress":  # the generated calls are all `bash`
            pipeline["tools"] = {"bash": {"suppress": True}}
        _ENGINES[name] = make_engine("balanced", pipeline)
    return _ENGINES[name]


@pytest.mark.parametrize("name", PASS_NAMES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wire=chat_requests())
def test_single_pass_keeps_every_invariant(name: str, wire: dict[str, Any]) -> None:
    engine = _engine(name)
    res = engine.condense(wire, session=fresh_session())
    assert res.report["fallback_reason"] is None
    check_invariants(engine, wire, res.request)
    assert set(res.report["transforms"]) <= {name}
