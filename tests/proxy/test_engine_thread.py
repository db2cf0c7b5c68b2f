"""The engine thread's two lanes: foreground jobs first, each lane in arrival order.

The thread is held on an event while jobs queue, so every ordering is deterministic.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.proxy import canary_bucket
from ctxwarden.proxy.engine_thread import EngineThread
from ctxwarden.proxy.engine_wait import run_within
from tests.proxy.conftest import ProxyFactory
from tests.proxy.test_engine_wait import HOLD_SECONDS
from tests.proxy.test_engine_wait import _held as held
from tests.proxy.test_rollout_s7 import _post


@pytest.fixture
def engine_thread() -> Iterator[EngineThread]:
    thread = EngineThread("test-engine")
    yield thread
    thread.shutdown(wait=True, cancel_futures=True)


def _held(thread: EngineThread) -> threading.Event:
    """Occupy the thread until the returned event is set."""
    return held(thread)[1]


@settings(max_examples=40, deadline=None)
@given(lanes=st.lists(st.booleans(), max_size=12))
def test_foreground_jobs_run_first_and_each_lane_in_arrival_order(lanes: list[bool]) -> None:
    thread = EngineThread("test-engine")
    try:
        release = _held(thread)
        ran: list[int] = []
        futures = [
            (thread.background if background else thread).submit(ran.append, k)
            for k, background in enumerate(lanes)
        ]
        assert thread.queued() == (lanes.count(False), lanes.count(True))
        release.set()
        for future in futures:
            future.result(HOLD_SECONDS)
        foreground = [k for k, background in enumerate(lanes) if not background]
        assert ran == foreground + [k for k, background in enumerate(lanes) if background]
        assert thread.queued() == (0, 0)
    finally:
        thread.shutdown(wait=True)


def test_a_background_job_runs_when_no_foreground_job_waits(engine_thread: EngineThread) -> None:
    assert engine_thread.background.submit(lambda: 7).result(HOLD_SECONDS) == 7


def test_an_exception_reaches_the_waiter_and_the_thread_goes_on(
    engine_thread: EngineThread,
) -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        engine_thread.submit(fail).result(HOLD_SECONDS)
    assert engine_thread.submit(lambda: 1).result(HOLD_SECONDS) == 1


def test_a_cancelled_job_never_runs(engine_thread: EngineThread) -> None:
    release = _held(engine_thread)
    ran: list[int] = []
    queued = engine_thread.background.submit(ran.append, 1)
    assert queued.cancel()
    release.set()
    engine_thread.submit(ran.append, 2).result(HOLD_SECONDS)
    assert ran == [2]


def test_shutdown_cancels_what_waits_and_refuses_new_jobs() -> None:
    thread = EngineThread("test-engine")
    release = _held(thread)
    waiting = [thread.submit(lambda: 1), thread.background.submit(lambda: 2)]
    release.set()
    thread.shutdown(wait=True, cancel_futures=True)
    assert all(f.cancelled() for f in waiting)
    with pytest.raises(RuntimeError, match="shutdown"):
        thread.submit(lambda: 3)
    with pytest.raises(RuntimeError, match="shutdown"):
        thread.background.submit(lambda: 3)


def test_shutdown_without_cancelling_runs_what_waits() -> None:
    thread = EngineThread("test-engine")
    release = _held(thread)
    ran: list[int] = []
    thread.background.submit(ran.append, 1)
    release.set()
    thread.shutdown(wait=True)
    assert ran == [1]


async def test_a_background_job_past_the_wait_is_dropped_behind_foreground_work(
    engine_thread: EngineThread,
) -> None:
    release = _held(engine_thread)
    ran: list[str] = []
    late = asyncio.ensure_future(
        run_within(engine_thread.background, 0.3, ran.append, "background")
    )
    await asyncio.sleep(0)
    first = asyncio.ensure_future(run_within(engine_thread, 0, ran.append, "foreground"))
    await asyncio.sleep(0.5)  # the background job's wait ends while the thread is held
    release.set()
    assert await first == (True, None)
    assert await late == (False, None)
    await asyncio.to_thread(engine_thread.background.submit(lambda: None).result)
    assert ran == ["foreground"]


async def test_an_active_request_is_condensed_before_a_canary_out_one_queued_earlier(
    make_proxy: ProxyFactory,
) -> None:
    names = [f"s{i}" for i in range(100)]
    inside = next(s for s in names if canary_bucket(s) < 50)
    outside = next(s for s in names if canary_bucket(s) >= 50)
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x " * 50}]})
    async with make_proxy(canary_percent=50) as proxy:
        order: list[str | None] = []
        condense = proxy.engine.condense

        def recorded(*args: object, **kwargs: object) -> object:
            order.append(kwargs.get("session"))  # type: ignore[arg-type]
            return condense(*args, **kwargs)  # type: ignore[arg-type]

        proxy.engine.condense = recorded  # type: ignore[method-assign]
        release = _held(proxy.state.executor)
        try:
            # relayed at once; its condense (telemetry only) waits in the background lane
            assert await _post(proxy, body, **{"x-ctxwarden-session": outside}) == 200
            await _until(lambda: proxy.state.executor.queued() == (0, 1))
            active = asyncio.ensure_future(_post(proxy, body, **{"x-ctxwarden-session": inside}))
            await _until(lambda: proxy.state.executor.queued() == (1, 1))
        finally:
            release.set()
        assert await active == 200
        await proxy.state.drain()
        events = {e["rollout_reason"]: e for e in proxy.recorder.events}
    assert order == [inside, outside]
    assert events["canary_out"]["tokens_before"] > 0  # the background condense still ran
    assert events["canary_in"]["mode"] == "active"


async def _until(condition: object) -> None:
    """Poll ``condition()`` until true (at most :data:`HOLD_SECONDS`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HOLD_SECONDS
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.01)
