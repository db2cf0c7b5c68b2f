"""The proxy's full-collection hook: what survives a full collection is frozen (later
ones skip it), every n-th full collection walks everything again, garbage cycles are
still collected then, and removing the hook unfreezes all."""

from __future__ import annotations

import gc
import weakref

import pytest

from ctxwarden.proxy.gc_pauses import freeze_after_full_collections


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_survivors_of_a_full_collection_are_frozen_until_the_nth() -> None:
    remove = freeze_after_full_collections(unfreeze_every=3)
    try:
        gc.collect()  # 1st full: survivors frozen
        assert gc.get_freeze_count() > 0
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gc.collect()  # 2nd: a and b survive (still referenced) and are frozen
        dead = weakref.ref(a)
        del a, b  # now a garbage cycle among frozen objects
        gc.collect()  # 3rd: unfreezes first, so the cycle is collected
        assert dead() is None
        assert gc.get_freeze_count() > 0  # frozen again after it
    finally:
        remove()
    assert gc.get_freeze_count() == 0


def test_a_frozen_cycle_waits_for_the_walk_of_everything() -> None:
    remove = freeze_after_full_collections(unfreeze_every=100)
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gc.collect()  # a, b frozen
        dead = weakref.ref(a)
        del a, b
        gc.collect()
        assert dead() is not None  # skipped: what the hook trades for short pauses
    finally:
        remove()  # unfreezes: the next full collection finds the cycle
    gc.collect()
    assert dead() is None


def test_removing_the_hook_restores_the_collector() -> None:
    before = len(gc.callbacks)
    remove = freeze_after_full_collections()
    assert len(gc.callbacks) == before + 1
    remove()
    assert len(gc.callbacks) == before
    gc.collect()
    assert gc.get_freeze_count() == 0


def test_a_period_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="unfreeze_every"):
        freeze_after_full_collections(unfreeze_every=0)
