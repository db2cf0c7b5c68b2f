"""The proxy's full-collection hook: what survives a full collection is frozen (later
ones skip it), the first full collection after the period walks everything again
(garbage cycles are collected then), and removing the hook unfreezes all."""

from __future__ import annotations

import gc
import weakref

import pytest

from ctxwarden.proxy.gc_pauses import freeze_after_full_collections


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_survivors_of_a_full_collection_are_frozen_until_the_hour_is_up() -> None:
    clock = _Clock()
    remove = freeze_after_full_collections(walk_all_every=3600, clock=clock)
    try:
        gc.collect()  # survivors frozen
        assert gc.get_freeze_count() > 0
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gc.collect()  # a and b survive (still referenced) and are frozen
        dead = weakref.ref(a)
        del a, b  # now a garbage cycle among frozen objects
        clock.now = 3599.0
        gc.collect()
        assert dead() is not None  # skipped: what the hook trades for short pauses
        clock.now = 3600.0
        gc.collect()  # the hour is up: unfreezes first, so the cycle is collected
        assert dead() is None
        assert gc.get_freeze_count() > 0  # frozen again after it
    finally:
        remove()
    assert gc.get_freeze_count() == 0


def test_a_frozen_cycle_is_collected_once_the_hook_is_removed() -> None:
    remove = freeze_after_full_collections(clock=_Clock())
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gc.collect()  # a, b frozen
        dead = weakref.ref(a)
        del a, b
        gc.collect()
        assert dead() is not None
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


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_a_period_that_is_no_positive_number_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="walk_all_every"):
        freeze_after_full_collections(walk_all_every=seconds)


def test_a_proxy_that_fails_to_start_leaves_no_hook() -> None:
    # the hook was installed before the listening socket: a port in use left it for the
    # rest of the process
    import asyncio
    import socket

    from ctxwarden import Engine, EngineConfig
    from ctxwarden.proxy.app import build_app
    from ctxwarden.proxy.server import serve_forever
    from ctxwarden.proxy.settings import ProxySettings

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    app = build_app(engine, ProxySettings(), tenant_secret=b"x" * 32)
    before = list(gc.callbacks)
    try:
        with pytest.raises(OSError):
            asyncio.run(serve_forever(app, "127.0.0.1", busy.getsockname()[1]))
    finally:
        busy.close()
        engine.close()
    assert gc.callbacks == before
    gc.collect()
    assert gc.get_freeze_count() == 0
