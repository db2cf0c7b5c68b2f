"""Owed recall answers for bodies the proxy holds: no wait behind the engine thread,
no inflating or scanning of large bodies on the event loop, a process-wide budget of
held bytes, keys spelled with escapes, and the tenant's mark written around the items.

See ``proxy/owed.py``; the helpers come from ``test_owed_unread.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import threading
import time
from typing import Any

import orjson
import pytest

import ctxwarden.proxy.handlers as handlers
import ctxwarden.proxy.request_bodies as request_bodies
from ctxwarden import Engine, EngineConfig
from ctxwarden.errors import StoreError
from ctxwarden.proxy import owed
from ctxwarden.proxy.owed import owed_key, previous_ids
from tests.proxy.conftest import KEY_A, ProxyFactory
from tests.proxy.test_owed_unread import (
    _GIVEN,
    CAP,
    ORIGINAL,
    _big,
    _chunks,
    _no_contents,
    _outputs,
    _owed_first,
    _plain_first,
    _post,
    _unsettled,
)

_ENGINE_BUSY = 1.5
"""Seconds a stand-in condense keeps the engine thread."""


async def _while_the_engine_is_busy(proxy: Any, work: Any) -> tuple[Any, float]:
    """``work`` awaited while the engine thread sleeps; its result and seconds."""
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(proxy.state.executor, time.sleep, _ENGINE_BUSY)
    await asyncio.sleep(0.05)
    began = time.perf_counter()
    result = await work
    took = time.perf_counter() - began
    await busy
    return result, took


# -- 1. whether a tenant owes is read without the engine thread ----------------------


async def test_an_over_cap_body_does_not_wait_for_a_condense(make_proxy: ProxyFactory) -> None:
    """A tenant owing nothing, and one owing (its continuation settled), are answered
    while the engine thread is busy: the mark and the owed items are read elsewhere."""
    async with make_proxy(max_body_bytes=CAP) as proxy:
        plain = await _plain_first(proxy)
        raw = orjson.dumps(_big(plain, "x " * (2 * CAP)) | {"input": "go on " * CAP})
        (status, _), took = await _while_the_engine_is_busy(proxy, _post(proxy, raw))
        assert status == 200 and took < _ENGINE_BUSY / 2, took
        first = await _owed_first(proxy)
        raw = orjson.dumps(_big(first, "x " * (2 * CAP)))
        (status, answer), took = await _while_the_engine_is_busy(proxy, _post(proxy, raw))
        assert status == 200 and took < _ENGINE_BUSY / 2, (took, answer)
        items = proxy.fake.received[-1].json()["input"]
        assert _outputs(items) == {"call_recall_1": ORIGINAL, "call_read_1": "print()"}


async def test_owed_answers_are_written_without_the_engine_thread(
    make_proxy: ProxyFactory,
) -> None:
    """The answer that waits for its owed items to be kept does not wait for a condense."""
    async with make_proxy() as proxy:
        items = [{"type": "function_call_output", "call_id": "c1", "output": "x"}]
        kept, took = await _while_the_engine_is_busy(
            proxy, owed.remember(proxy.state, "t", "resp_1", items)
        )
        assert kept and took < _ENGINE_BUSY / 2, took
        assert await owed.owed_for(proxy.state, "t", {"previous_response_id": "resp_1"})


async def test_a_mark_another_replica_wrote_is_seen(make_proxy: ProxyFactory) -> None:
    """The store stays the source of truth: a proxy that did not write the owed items
    (another replica sharing the store) still settles the continuation."""
    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    try:
        async with make_proxy(engine, max_body_bytes=CAP) as writer:
            first = await _owed_first(writer)
            assert writer.state.owing_since  # its own fast path
        async with make_proxy(engine, max_body_bytes=CAP) as replica:
            assert not replica.state.owing_since
            raw = orjson.dumps(_big(first, "x " * (2 * CAP)))
            status, answer = await _post(replica, raw)
            assert status == 200, answer
            items = replica.fake.received[-1].json()["input"]
            assert _outputs(items) == {"call_recall_1": ORIGINAL, "call_read_1": "print()"}
    finally:
        engine.close()


async def test_the_fast_path_ends_with_the_store_ttl(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_proxy() as proxy:
        await _owed_first(proxy)
        tenant = proxy.tenant(KEY_A)
        assert await owed.owing(proxy.state, tenant)
        reads: list[str] = []
        get_state = proxy.engine.store.get_state

        def spy(tenant: str, session: str) -> bytes | None:
            reads.append(session)
            return get_state(tenant, session)

        monkeypatch.setattr(proxy.engine.store, "get_state", spy)
        assert await owed.owing(proxy.state, tenant) and not reads  # no store read
        proxy.state.owing_since[tenant] -= proxy.engine.store.ttl + 1  # type: ignore[attr-defined]
        assert await owed.owing(proxy.state, tenant)  # the store's mark, still there
        assert len(reads) == 1


# -- 2. large bodies are inflated and scanned off the event loop --------------------


async def test_a_small_gzip_body_inflating_far_is_decoded_once_off_the_loop(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    inline = request_bodies.INLINE_PARSE_BYTES
    decodes: list[tuple[bool, int]] = []
    scans: list[bool] = []
    decode_body, may_hold = request_bodies.decode_body, request_bodies.may_hold_wide_integer

    def decode_spy(raw: bytes, coding: str | None, limit: int) -> Any:
        decodes.append((threading.current_thread() is threading.main_thread(), limit))
        return decode_body(raw, coding, limit)

    def scan_spy(body: bytes) -> bool:
        if len(body) > inline:
            scans.append(threading.current_thread() is threading.main_thread())
        return may_hold(body)

    monkeypatch.setattr(request_bodies, "decode_body", decode_spy)
    monkeypatch.setattr(request_bodies, "may_hold_wide_integer", scan_spy)
    cap = inline + 64 * 1024
    async with make_proxy(max_body_bytes=cap, max_owed_body_bytes=2 * cap) as proxy:
        first = await _owed_first(proxy)
        for exact in (False, True):
            decodes.clear()
            raw = orjson.dumps(_big(first, "x " * (cap // 2 + 4096)))  # under 1 MiB (aiohttp)
            body = gzip.compress(raw)
            assert len(body) < inline < cap < len(raw)
            headers = {"Content-Encoding": "gzip"}
            if exact:
                headers["x-ctxwarden-mode"] = "exact"
            status, answer = await _post(proxy, body, **headers)
            assert status == 200, answer
            assert _outputs(proxy.fake.received[-1].json()["input"])["call_recall_1"] == ORIGINAL
            wide = [on_loop for on_loop, limit in decodes if limit > inline]
            assert wide == [False], decodes  # once, off the loop (no decode to the cap first)
        assert scans and not any(scans)
        assert proxy.state.owed_held.held == 0


# -- 3. the budget of held bytes ----------------------------------------------------


@pytest.mark.parametrize("how", ["sized", "chunked", "gzip_inflates"])
async def test_a_body_finding_the_held_budget_spent_streams_through_counted(
    make_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    """Other requests hold ``max_owed_held_bytes``: the body goes as sent (here the
    upstream then refuses it), counted as ``busy`` and warned about, no contents."""
    async with make_proxy(max_body_bytes=CAP, max_owed_held_bytes=8 * CAP) as proxy:
        first = await _owed_first(proxy)
        raw = orjson.dumps(_big(first, "secret-gamma " * CAP))
        body: Any = raw
        headers: dict[str, str] = {}
        if how == "chunked":
            body = _chunks(raw)
        elif how == "gzip_inflates":
            body = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        budget = proxy.state.owed_held
        with budget.hold() as others, caplog.at_level(logging.WARNING, logger="ctxwarden"):
            assert others.grow_to(budget.total - 3 * CAP)  # not enough for this body
            status, answer = await _post(proxy, body, **headers)
            assert budget.held == others.size
        assert budget.held == 0
        assert status == 400 and answer["error"]["message"].startswith("No tool output found")
        assert proxy.fake.received[-1].body == raw
        assert _unsettled(proxy, "busy") == 1
        assert _unsettled(proxy, "over_limit") == _unsettled(proxy, "coding") == 0
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "max_owed_held_bytes" in warnings[0].getMessage()
        _no_contents(caplog, "secret-gamma", first)


@pytest.mark.parametrize("ending", ["settled", "refused", "relay_fails"])
async def test_held_bytes_count_during_the_exchange_and_are_given_back(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    seen: list[int] = []
    relay = handlers.relay

    async def relay_spy(ex: Any, body: Any, record: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(ex.state.owed_held.held)
        if ending == "relay_fails":
            raise RuntimeError("relay broke")
        return await relay(ex, body, record, *args, **kwargs)

    monkeypatch.setattr(handlers, "relay", relay_spy)
    async with make_proxy(max_body_bytes=CAP) as proxy:
        first = await _owed_first(proxy)
        previous = await _plain_first(proxy) if ending == "refused" else first
        raw = orjson.dumps(_big(previous, "x " * (2 * CAP)))
        seen.clear()
        status, _ = await _post(proxy, raw)
        assert status == {"settled": 200, "refused": 400, "relay_fails": 500}[ending]
        assert seen == [len(raw)]  # the body, held while it is relayed
        assert proxy.state.owed_held.held == 0


async def test_held_bytes_are_given_back_when_the_client_body_breaks(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(max_body_bytes=CAP) as proxy:
        await _owed_first(proxy)
        host, port = proxy.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            f"POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY_A}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {4 * CAP}\r\n\r\n"
        )
        writer.write(head.encode() + b"{" + b" " * (2 * CAP))
        await writer.drain()
        await asyncio.sleep(0.2)
        assert proxy.state.owed_held.held == 4 * CAP  # held while read
        writer.close()  # the body is cut off
        await writer.wait_closed()
        for _ in range(50):
            if proxy.state.owed_held.held == 0:
                break
            await asyncio.sleep(0.02)
        assert proxy.state.owed_held.held == 0
        del reader


# -- 4. a key spelled with escapes --------------------------------------------------

_ESCAPED_KEY = b'"previous\\u005fresponse_id"'


@pytest.mark.parametrize("where", ["over_cap", "over_cap_exact", "exact", "exact_gzip"])
async def test_a_continuation_naming_its_response_with_escapes_gets_what_is_owed(
    make_proxy: ProxyFactory, where: str
) -> None:
    async with make_proxy(max_body_bytes=CAP) as proxy:
        first = await _owed_first(proxy)
        filler = "x " * (2 * CAP) if where.startswith("over_cap") else "small"
        raw = orjson.dumps(_big(first, filler)).replace(b'"previous_response_id"', _ESCAPED_KEY)
        assert orjson.loads(raw)["previous_response_id"] == first
        headers = {} if where == "over_cap" else {"x-ctxwarden-mode": "exact"}
        body = raw
        if where == "exact_gzip":
            body = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        status, answer = await _post(proxy, body, **headers)
        assert status == 200, answer
        items = proxy.fake.received[-1].json()["input"]
        assert _outputs(items) == {"call_recall_1": ORIGINAL, "call_read_1": "print()"}
        assert items[-2:] == [_GIVEN, {"role": "user", "content": filler}]


def test_previous_ids_leaves_escaped_names_to_a_parse() -> None:
    assert previous_ids(b'{"previous\\u005fresponse_id": "resp_1"}') is None
    assert previous_ids(b'{"prev\\u0069ous_response_id": "resp_1"}') is None
    # escapes of other characters do not spell the key: the search still answers
    assert previous_ids(b'{"a": "\\u00e9\\u0041", "previous_response_id": "r"}') == ["r"]


# -- 5. the mark exists whenever owed items do --------------------------------------


@pytest.mark.parametrize("failing", ["every_mark", "the_last_mark"])
async def test_owed_items_never_exist_without_the_mark(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    async with make_proxy() as proxy:
        store = proxy.engine.store
        put_state = store.put_state
        marks: list[str] = []

        def flaky(tenant: str, session: str, state: bytes) -> None:
            if session == owed._OWING:
                marks.append(session)
                if failing == "every_mark" or len(marks) > 1:
                    raise StoreError("the mark could not be written")
            put_state(tenant, session, state)

        monkeypatch.setattr(store, "put_state", flaky)
        first = await _owed_first(proxy)
        tenant = proxy.tenant(KEY_A)
        items = store.get_state(tenant, owed_key(first))
        mark = store.get_state(tenant, owed._OWING)
        if failing == "every_mark":
            assert items is None and mark is None
            assert not proxy.state.owing_since
        else:  # the mark written before the items is there
            assert items and mark


# -- 6. a body repeating the key without end ----------------------------------------


def test_previous_ids_stops_after_a_bounded_number_of_keys() -> None:
    assert owed.MAX_PREVIOUS_KEYS == 1024
    same = orjson.dumps([{"previous_response_id": "resp_1"} for _ in range(1024)])
    assert previous_ids(same) == ["resp_1"]
    more = orjson.dumps([{"previous_response_id": "resp_1"} for _ in range(1025)])
    assert previous_ids(more) is None  # the caller parses the body to know


# -- a tenant owing nothing: streamed -----------------------------------------------


async def test_an_over_cap_body_of_a_tenant_owing_nothing_is_relayed_as_a_stream(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[Any] = []
    relay = handlers.relay

    async def relay_spy(ex: Any, body: Any, record: Any, *args: Any, **kwargs: Any) -> Any:
        bodies.append(body)
        return await relay(ex, body, record, *args, **kwargs)

    monkeypatch.setattr(handlers, "relay", relay_spy)
    async with make_proxy(max_body_bytes=CAP) as proxy:
        plain = await _plain_first(proxy)
        bodies.clear()
        raw = orjson.dumps(_big(plain, "x " * (2 * CAP)) | {"input": "go on " * CAP})
        for body in (raw, _chunks(raw)):
            status, _ = await _post(proxy, body)
            assert status == 200
            assert proxy.fake.received[-1].body == raw
        assert [type(b) for b in bodies] == [request_bodies.BodyStream] * 2


@pytest.mark.parametrize("coded", [False, True])
@pytest.mark.parametrize("others", [0, 1])
async def test_a_coded_body_takes_only_the_room_it_needs(
    make_proxy: ProxyFactory, coded: bool, others: int
) -> None:
    """A compressed body is decoded as far as the budget has room, not refused as busy
    because the whole owed cap is not free (a budget below the cap, or another request
    holding a byte of it)."""
    settings: dict[str, int] = {"max_body_bytes": CAP}
    if not others:
        settings |= {"max_owed_body_bytes": 1_000_000, "max_owed_held_bytes": 200_000}
    async with make_proxy(**settings) as proxy:
        first = await _owed_first(proxy)
        raw = orjson.dumps(_big(first, "x " * (2 * CAP)))  # inflates past max_body_bytes
        body, headers = (gzip.compress(raw), {"Content-Encoding": "gzip"}) if coded else (raw, {})
        with proxy.state.owed_held.hold() as other:
            assert other.grow_to(others)
            status, _ = await _post(proxy, body, **headers)
            assert status == 200 and _unsettled(proxy, "busy") == 0
            sent = proxy.fake.received[-1].json()["input"]
            assert _outputs(sent).get("call_recall_1") == ORIGINAL
            assert proxy.state.owed_held.held == others


async def test_a_cancelled_decode_keeps_its_bytes_until_the_thread_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request cancelled (its client gone) while its body inflates in a thread does
    not give the budget back before the thread ends: else every new request could start
    one more decode of the owed cap's size."""
    from types import SimpleNamespace

    from ctxwarden.proxy.state import HeldBytes

    real, started, release = request_bodies.decode_body, threading.Event(), threading.Event()

    def slow(raw: bytes, coding: str | None, limit: int) -> Any:
        started.set()
        release.wait(5)
        return real(raw, coding, limit)

    monkeypatch.setattr(request_bodies, "decode_body", slow)
    state: Any = SimpleNamespace(settings=SimpleNamespace(max_body_bytes=CAP, owed_cap=100_000))
    budget = HeldBytes(100_000)
    body = gzip.compress(b"x" * (2 * CAP))

    async def request() -> None:
        with budget.hold() as hold:
            await request_bodies.decode_held(state, body, "gzip", hold)

    task = asyncio.ensure_future(request())
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert budget.held == 100_000  # the thread still inflates: still held
    release.set()
    deadline = time.monotonic() + 5
    while budget.held and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert budget.held == 0
