"""The engine thread's two lanes: foreground jobs first, each lane in arrival order.

The thread is held on an event while jobs queue, so every ordering is deterministic.
"""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future

import aiohttp
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


class _Body:
    """Stands for a parsed request body (weakly referable)."""


def _held(thread: EngineThread) -> threading.Event:
    """Occupy the thread until the returned event is set."""
    return held(thread)[1]


LANES = ("foreground", "background", "in_order")


@settings(max_examples=60, deadline=None)
@given(lanes=st.lists(st.sampled_from(LANES), max_size=14))
def test_jobs_run_in_the_order_the_lanes_promise(lanes: list[str]) -> None:
    """Foreground first, each lane in arrival order; an ``in_order`` job runs after
    every background job queued before it (they move ahead of it)."""
    thread = EngineThread("test-engine")
    try:
        release = _held(thread)
        ran: list[int] = []
        ways = {"foreground": thread, "background": thread.background, "in_order": thread.in_order}
        futures = [ways[lane].submit(ran.append, k) for k, lane in enumerate(lanes)]
        front: list[int] = []
        back: list[int] = []
        for k, lane in enumerate(lanes):  # the model
            if lane == "in_order":
                front += back
                back = []
            (back if lane == "background" else front).append(k)
        assert thread.queued() == (len(front), len(back))
        release.set()
        for future in futures:
            future.result(HOLD_SECONDS)
        assert ran == front + back
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


def test_a_cancelled_job_never_runs_and_leaves_its_lane_with_what_it_holds(
    engine_thread: EngineThread,
) -> None:
    release = _held(engine_thread)
    ran: list[object] = []
    body = _Body()
    alive = weakref.ref(body)
    queued = engine_thread.background.submit(ran.append, body)
    del body
    assert engine_thread.queued() == (0, 1)
    assert queued.cancel()
    assert engine_thread.queued() == (0, 0)
    gc.collect()
    assert alive() is None  # the lane let go of the job's arguments
    release.set()
    engine_thread.submit(ran.append, 2).result(HOLD_SECONDS)
    assert ran == [2]


def test_a_finished_job_and_its_result_are_not_kept(engine_thread: EngineThread) -> None:
    seen: list[weakref.ref[_Body]] = []

    def job(argument: _Body) -> _Body:
        seen.append(weakref.ref(argument))
        return _Body()

    result = engine_thread.submit(job, _Body()).result(HOLD_SECONDS)
    alive = [seen[0], weakref.ref(result)]
    del result
    for _ in range(100):  # the thread lets go once it waits for its next job
        gc.collect()
        if all(ref() is None for ref in alive):
            break
        time.sleep(0.01)
    assert [ref() for ref in alive] == [None, None]


def test_a_base_exception_reaches_the_waiter_and_the_thread_goes_on(
    engine_thread: EngineThread,
) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine_thread.submit(interrupted).result(HOLD_SECONDS)
    assert engine_thread.background.submit(lambda: 1).result(HOLD_SECONDS) == 1


def test_shutdown_cancels_what_waits_and_refuses_new_jobs() -> None:
    thread = EngineThread("test-engine")
    release = _held(thread)
    waiting = [thread.submit(lambda: 1), thread.background.submit(lambda: 2)]
    thread.shutdown(wait=False, cancel_futures=True)  # while the thread is still held
    release.set()
    thread.shutdown(wait=True)
    assert all(f.cancelled() for f in waiting)
    for way in (thread, thread.background, thread.in_order):
        with pytest.raises(RuntimeError, match="shutdown"):
            way.submit(lambda: 3)


def test_shutdown_without_cancelling_runs_what_waits() -> None:
    thread = EngineThread("test-engine")
    release = _held(thread)
    ran: list[int] = []
    thread.background.submit(ran.append, 1)
    release.set()
    thread.shutdown(wait=True)
    assert ran == [1]


def test_shutdown_from_a_job_ends_the_thread_after_what_waits() -> None:
    thread = EngineThread("test-engine")
    release = _held(thread)
    ran: list[int] = []
    first = thread.submit(thread.shutdown)  # wait=True from the thread itself: no join
    thread.background.submit(ran.append, 1)
    release.set()
    first.result(HOLD_SECONDS)
    thread.shutdown(wait=True)
    assert ran == [1]


def test_a_thread_that_cannot_start_leaves_no_job_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread = EngineThread("test-engine")

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="start new thread"):
            thread.submit(lambda: 1)
    assert thread.queued() == (0, 0)
    assert thread.submit(lambda: 2).result(HOLD_SECONDS) == 2  # the next job starts it
    thread.shutdown(wait=True)


async def test_a_background_job_past_the_wait_is_dropped_and_leaves_its_lane(
    engine_thread: EngineThread,
) -> None:
    release = _held(engine_thread)
    ran: list[str] = []
    late = asyncio.ensure_future(
        run_within(engine_thread.background, 0.05, ran.append, "background")
    )
    await asyncio.sleep(0)
    first = asyncio.ensure_future(run_within(engine_thread, 0, ran.append, "foreground"))
    assert await late == (False, None)  # while the thread is still held
    await _until(lambda: engine_thread.queued() == (1, 0))  # the dropped job is gone
    release.set()
    assert await first == (True, None)
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
            async with aiohttp.ClientSession() as http, http.get(proxy.url + "/metrics") as r:
                metrics = await r.text()
        finally:
            release.set()
        assert await active == 200
        for lane in ("foreground", "background"):  # what an operator sees waiting
            assert f'ctxwarden_engine_queued_jobs{{lane="{lane}"}} 1.0' in metrics
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


async def test_a_header_request_never_overtakes_a_queued_condense_of_its_session(
    make_proxy: ProxyFactory,
) -> None:
    """A header can send one request of a session outside the canary as active: its
    condense queues behind the session's background one (state is written in order)."""
    outside = next(s for s in (f"s{i}" for i in range(100)) if canary_bucket(s) >= 50)
    first = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x " * 50}]}
    second = {
        **first,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "more"},
        ],
    }
    async with make_proxy(canary_percent=50) as proxy:
        modes: list[object] = []
        condense = proxy.engine.condense

        def recorded(*args: object, **kwargs: object) -> object:
            modes.append(kwargs.get("mode"))
            return condense(*args, **kwargs)  # type: ignore[arg-type]

        proxy.engine.condense = recorded  # type: ignore[method-assign]
        release = _held(proxy.state.executor)
        try:
            named = {"x-ctxwarden-session": outside}
            assert await _post(proxy, orjson.dumps(first), **named) == 200
            await _until(lambda: proxy.state.executor.queued() == (0, 1))
            active = asyncio.ensure_future(
                _post(proxy, orjson.dumps(second), **named, **{"x-ctxwarden-mode": "active"})
            )
            await _until(lambda: proxy.state.executor.queued() == (2, 0))
        finally:
            release.set()
        assert await active == 200
        await proxy.state.drain()
    assert modes == ["shadow", "active"]


@pytest.mark.parametrize("seed", range(20))
def test_many_submitters_cancels_and_a_shutdown_leave_every_job_settled(seed: int) -> None:
    """Six threads submit to random lanes and cancel at random while another shuts the
    executor down: every future ends run or cancelled, none waits, the lanes are empty."""
    thread = EngineThread("test-engine")
    futures: list[Future[int]] = []
    lock = threading.Lock()
    start = threading.Barrier(7)

    def submit(k: int) -> None:
        rng = random.Random(seed * 10 + k)
        ways = (thread, thread.background, thread.in_order)
        start.wait()
        for n in range(40):
            try:
                future = rng.choice(ways).submit(int, n)
            except RuntimeError:  # shut down meanwhile
                return
            if rng.random() < 0.3:
                future.cancel()
            with lock:
                futures.append(future)

    workers = [threading.Thread(target=submit, args=(k,)) for k in range(6)]
    for worker in workers:
        worker.start()
    start.wait()
    thread.shutdown(wait=True, cancel_futures=seed % 2 == 0)
    for worker in workers:
        worker.join(HOLD_SECONDS)
    thread.shutdown(wait=True)
    for future in futures:
        assert future.cancelled() or future.result(HOLD_SECONDS) >= 0
    assert thread.queued() == (0, 0)
