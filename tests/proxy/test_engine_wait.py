"""A request waits for the engine thread at most ``max_engine_wait`` seconds.

A job that has not started by then never runs and its request goes out as it came; a
job that has started is awaited to its end. The engine thread is held on an event
here, so every ordering is deterministic.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager

import orjson
import pytest

from ctxwarden.errors import ConfigError
from ctxwarden.proxy import RECALL_TOOL_NAME, ProxySettings
from ctxwarden.proxy.engine_wait import run_within
from tests.proxy.conftest import Proxy, ProxyFactory
from tests.proxy.gate import Gate, entered
from tests.proxy.test_shadow_background import CHAT, _post

HOLD_SECONDS = 10.0


@pytest.fixture
def engine_thread() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=1)
    yield executor
    executor.shutdown(wait=True)


def _held(executor: Executor) -> tuple[threading.Event, threading.Event]:
    """Occupy the executor's one thread until the returned ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(HOLD_SECONDS)

    executor.submit(hold)
    assert entered.wait(HOLD_SECONDS)
    return entered, release


async def test_a_job_that_cannot_start_in_time_is_dropped_and_never_runs(
    engine_thread: ThreadPoolExecutor,
) -> None:
    _, release = _held(engine_thread)
    ran: list[int] = []
    assert await run_within(engine_thread, 0.05, ran.append, 1) == (False, None)
    release.set()
    await asyncio.to_thread(engine_thread.submit(lambda: None).result)  # the queue is done
    assert ran == []


async def test_a_job_that_started_is_awaited_past_the_limit(
    engine_thread: ThreadPoolExecutor,
) -> None:
    await asyncio.to_thread(engine_thread.submit(lambda: None).result)  # its thread is up
    started = threading.Event()

    def slow() -> str:  # starts at once (an idle thread) and runs past the limit
        started.set()
        threading.Event().wait(1.0)
        return "done"

    assert await run_within(engine_thread, 0.5, slow) == (True, "done")
    assert started.is_set()


async def test_no_limit_waits_and_errors_propagate(engine_thread: ThreadPoolExecutor) -> None:
    _, release = _held(engine_thread)
    asyncio.get_running_loop().call_later(0.1, release.set)
    assert await run_within(engine_thread, 0, lambda: 7) == (True, 7)

    def broken() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await run_within(engine_thread, 1.0, broken)


async def test_a_cancelled_caller_drops_its_queued_job(engine_thread: ThreadPoolExecutor) -> None:
    _, release = _held(engine_thread)
    ran: list[int] = []
    task = asyncio.create_task(run_within(engine_thread, 5.0, ran.append, 1))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await asyncio.to_thread(engine_thread.submit(lambda: None).result)
    assert ran == []


_READ = {"name": "read", "parameters": {"type": "object"}}
_AGENT = {**CHAT, "tools": [{"type": "function", "function": _READ}]}


@asynccontextmanager
async def _engine_held(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> AsyncIterator[Gate]:
    """The engine thread held inside a first request's condense until the block ends
    (then that request is answered)."""
    gate = Gate(proxy, monkeypatch)
    opened.append(gate)
    first = asyncio.create_task(_post(proxy, orjson.dumps(CHAT)))
    await entered(gate)
    try:
        yield gate
    finally:
        gate.open()
        assert (await first)[0] == 200


async def test_a_request_behind_a_busy_engine_thread_goes_out_as_it_came(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    async with make_proxy(max_engine_wait=0.2) as proxy:
        async with _engine_held(proxy, monkeypatch, opened) as gate:
            second = orjson.dumps({**CHAT, "messages": [*CHAT["messages"][:1],
                                   {"role": "user", "content": "another task"}]})  # fmt: skip
            status, _ = await _post(proxy, second)
            assert status == 200
            assert proxy.fake.received[-1].body == second  # the bytes it came with
            event = proxy.recorder.events[-1]
        await asyncio.to_thread(proxy.state.executor.submit(lambda: None).result)  # queue done
    assert event["fallback_reason"] == "proxy: limit: engine thread busy for over 0.2 s"
    assert event["level"] == "warning" and event["model"] == "gpt-4o"
    assert "tokens_before" not in event
    assert gate.calls == 1  # the second request's condense never ran


@pytest.mark.parametrize("name", ["max_engine_wait", "max_bound_wait"])
@pytest.mark.parametrize("wait", [-1.0, float("nan"), 4000.0])
def test_max_engine_wait_is_checked(name: str, wait: float) -> None:
    with pytest.raises(ConfigError, match=name):
        ProxySettings(**{name: wait})


async def test_an_agent_behind_a_busy_engine_thread_keeps_its_tool_list(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    # an agent gets the recall tool from its first turn on; a turn sent uncondensed
    # gets it too, or the start of its cached prompt would change
    async with (
        make_proxy(max_engine_wait=0.2) as proxy,
        _engine_held(proxy, monkeypatch, opened),
    ):
        assert (await _post(proxy, orjson.dumps(_AGENT)))[0] == 200
        sent = proxy.fake.received[-1].json()
        event = proxy.recorder.events[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["read", RECALL_TOOL_NAME]
    assert sent["messages"] == CHAT["messages"]
    assert event["fallback_reason"].startswith("proxy: limit: engine")


async def test_a_job_raising_after_its_caller_left_logs_nothing(
    engine_thread: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    entered_job, release = threading.Event(), threading.Event()

    def late() -> None:
        entered_job.set()
        release.wait(HOLD_SECONDS)
        raise ValueError("late")

    task = asyncio.create_task(run_within(engine_thread, 5.0, late))
    assert await asyncio.to_thread(entered_job.wait, HOLD_SECONDS)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    del task
    release.set()
    await asyncio.to_thread(engine_thread.submit(lambda: None).result)
    await asyncio.sleep(0.05)
    gc.collect()  # an unread exception is logged when its future is collected
    await asyncio.sleep(0.05)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_a_request_dropped_after_the_kill_switch_came_on_goes_out_exact(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    async with (
        make_proxy(max_engine_wait=0.5) as proxy,
        _engine_held(proxy, monkeypatch, opened),
    ):
        task = asyncio.create_task(_post(proxy, orjson.dumps(_AGENT)))
        await asyncio.sleep(0.2)  # it waits for the engine thread
        proxy.state.kill_switch.set(True, "test")
        assert (await task)[0] == 200
        sent = proxy.fake.received[-1].json()
        event = proxy.recorder.events[-1]
    assert [t["function"]["name"] for t in sent["tools"]] == ["read"]  # no recall tool
    assert (event["mode"], event["rollout_reason"]) == ("exact", "kill_switch")


async def test_a_stale_shadow_condense_is_skipped(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    # a shadow request is answered at once; its condense, still queued past the limit,
    # is stale work that would only delay what is queued behind it
    async with make_proxy(max_engine_wait=0.2) as proxy:
        async with _engine_held(proxy, monkeypatch, opened) as gate:
            shadow = {"x-ctxwarden-mode": "shadow"}
            assert (await _post(proxy, orjson.dumps(_AGENT), **shadow))[0] == 200
            await asyncio.sleep(0.4)
        await proxy.state.drain()
        event = proxy.recorder.events[0]  # the shadow request's, emitted first
    assert (event["mode"], event["rollout_reason"]) == ("shadow", "header")
    assert event["fallback_reason"] == "proxy: limit: engine thread busy for over 0.2 s"
    assert event["level"] == "warning" and "tokens_before" not in event
    assert gate.calls == 1  # its condense never ran


@pytest.mark.parametrize(
    ("model", "waits"), [("claude-fable-5-1", True), ("claude-opus-4-1", False)]
)
async def test_a_request_with_thinking_bound_to_its_prefix_waits_for_its_condense(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate],
    model: str, waits: bool,
) -> None:  # fmt: skip
    # sent without its session's adopted replacements, a binding model would refuse it
    thought = {"type": "thinking", "thinking": "List it.", "signature": "sig-1"}
    call = {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"path": "a"}}
    result = {"type": "tool_result", "tool_use_id": "tu_1", "content": "a"}
    body = orjson.dumps({"model": model, "max_tokens": 64, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [thought, call]},
        {"role": "user", "content": [result]}]})  # fmt: skip
    async with make_proxy(max_engine_wait=0.2) as proxy:
        async with _engine_held(proxy, monkeypatch, opened) as gate:
            task = asyncio.create_task(_post(proxy, body, "/v1/messages"))
            done, _ = await asyncio.wait({task}, timeout=1.0)
            assert (not done) is waits
            gate.open()
            assert (await task)[0] == 200
        event = proxy.recorder.last(route="messages")
    assert gate.calls == (2 if waits else 1)
    assert (event.get("fallback_reason") is None) is waits


async def test_a_request_with_bound_thinking_waits_at_most_max_bound_wait(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, opened: list[Gate]
) -> None:
    # a stuck engine thread must not hang it: past the longer wait it goes as sent
    call = {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"path": "a"}}
    result = {"type": "tool_result", "tool_use_id": "tu_1", "content": "a"}
    body = orjson.dumps({"model": "claude-fable-5-1", "max_tokens": 64, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]}]})  # fmt: skip
    settings = {"max_engine_wait": 0.1, "max_bound_wait": 0.6}
    async with make_proxy(**settings) as proxy, _engine_held(proxy, monkeypatch, opened) as gate:
        task = asyncio.create_task(_post(proxy, body, "/v1/messages"))
        done, _ = await asyncio.wait({task}, timeout=0.3)
        assert not done  # past max_engine_wait, still waiting
        status, _ = await asyncio.wait_for(task, 10.0)
        assert status == 200
        assert proxy.fake.received[-1].body == body  # as sent
        event = proxy.recorder.last(route="messages")
        gate.open()
    assert event["fallback_reason"] == "proxy: limit: engine thread busy for over 0.6 s"
