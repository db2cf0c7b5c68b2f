"""The byte cap over every capped backend: an artifact larger than the cap by itself
is dropped alone, not with every newer artifact that fits."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.store.backends import CAPPED, Harness


@pytest.fixture(params=CAPPED)
def capped(request: pytest.FixtureRequest, harness_for: Callable[[str], Harness]) -> Harness:
    return harness_for(request.param)


@pytest.mark.parametrize("place", ["newest", "middle", "oldest"])
def test_an_oversized_artifact_is_dropped_alone(capped: Harness, place: str) -> None:
    """Before: an oversized newest artifact made gc drop everything (and one in the
    middle every older artifact with it), though the others fit the cap."""
    store = capped.open(max_bytes=100)
    try:
        refs: list[str] = []
        texts = [f"small {i}" for i in range(4)]
        at = {"oldest": 0, "middle": 2, "newest": 4}[place]
        texts.insert(at, "B" * 500)
        for text in texts:
            refs.append(store.put("t", text))
            time.sleep(0.005)  # distinct last uses
        big = refs[at]
        assert store.gc() == 1
        assert not store.has("t", big)
        assert all(store.has("t", ref) for ref in refs if ref != big)
    finally:
        store.close()


def test_lru_order_holds_after_the_oversized_ones_went(capped: Harness) -> None:
    """The oversized artifact goes first; the least recently used go next until the
    rest fits (the newest ones stay)."""
    store = capped.open(max_bytes=25)
    try:
        smalls = []
        for i in range(4):
            smalls.append(store.put("t", f"{i}" * 10))
            time.sleep(0.005)
        big = store.put("t", "B" * 500)
        assert store.gc() == 3
        assert not store.has("t", big)
        assert [store.has("t", ref) for ref in smalls] == [False, False, True, True]
    finally:
        store.close()
