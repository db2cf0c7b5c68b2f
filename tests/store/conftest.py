"""Fixtures of the store tests: a harness and a store per backend (see backends.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxwarden.store import Store
from tests.store.backends import BACKENDS, Harness, make_harness


@pytest.fixture
def harness_for(tmp_path: Path) -> Iterator[Callable[[str], Harness]]:
    """Build harnesses by backend name; all are closed after the test."""
    made: list[Harness] = []

    def build(name: str) -> Harness:
        harness = make_harness(name, tmp_path)
        made.append(harness)
        return harness

    yield build
    for harness in made:
        harness.close()


@pytest.fixture(params=BACKENDS)
def harness(request: pytest.FixtureRequest, harness_for: Callable[[str], Harness]) -> Harness:
    """One harness per backend (the contract suite runs over all of them)."""
    return harness_for(request.param)


@pytest.fixture
def store(harness: Harness) -> Iterator[Store]:
    """A store of the current backend with a one-hour TTL and no practical cap."""
    opened = harness.open()
    yield opened
    opened.close()
