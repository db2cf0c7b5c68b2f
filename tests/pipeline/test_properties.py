"""Property tests: whatever the preset, a condensed chat request keeps the protocol."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from ctxwarden import Engine
from tests.passes.convo import FORCE, make_engine
from tests.passes.strategies import chat_requests, condense_turns

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "conservative": ("conservative", {}),
    "balanced": ("balanced", {}),
    "aggressive": ("aggressive", {}),
    "forced": ("aggressive", FORCE),
}
_ENGINES: dict[str, Engine] = {}

PROPERTY = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _engine(name: str) -> Engine:
    if name not in _ENGINES:
        preset, pipeline = CONFIGS[name]
        _ENGINES[name] = make_engine(preset, pipeline)
    return _ENGINES[name]


@pytest.mark.parametrize("name", list(CONFIGS))
@PROPERTY
@given(wire=chat_requests())
def test_condensed_chat_request_keeps_every_invariant(name: str, wire: dict[str, Any]) -> None:
    condense_turns(_engine(name), wire)
