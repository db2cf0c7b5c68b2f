"""The breaker of the networked stores: after a call the server did not answer, calls
fail at once for the cooldown, then one is tried again; an error on a live server
(a missing artifact) does not open it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ctxwarden.config import StoreConfig
from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store import Store, open_store
from ctxwarden.store.breaker import Breaker
from tests.store.backends import Harness, PostgresHarness, RedisHarness
from tests.store.stall import bounded, stopped


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _failing(breaker: Breaker, cause: BaseException) -> None:
    with breaker.guard("read an artifact"):
        raise StoreError("x store failed to read an artifact: down") from cause


def test_an_outage_opens_it_for_the_cooldown_then_one_call_is_tried() -> None:
    clock = _Clock()
    breaker = Breaker("x", 10.0, lambda cause: isinstance(cause, ConnectionError), clock)
    with pytest.raises(StoreError):
        _failing(breaker, ConnectionError())
    ran = []
    expected = "x store failed to look up: the server did not"
    with pytest.raises(StoreError, match=expected), breaker.guard("look up"):
        ran.append(1)
    assert not ran  # failed at once, the server not called
    clock.now += 10.0
    with breaker.guard("look up"):
        ran.append(1)
    assert ran == [1]


@pytest.mark.parametrize("cooldown", [10.0, 0.0])
def test_an_error_of_a_live_server_or_no_cooldown_leaves_it_closed(cooldown: float) -> None:
    breaker = Breaker("x", cooldown, lambda cause: isinstance(cause, ConnectionError), _Clock())
    cause = ValueError() if cooldown else ConnectionError()
    with pytest.raises(StoreError):
        _failing(breaker, cause)
    with pytest.raises(ArtifactMissing), breaker.guard("read an artifact"):
        raise ArtifactMissing("no artifact cw:000000000000")
    with breaker.guard("read an artifact"):
        pass  # tried


def test_the_config_gives_open_store_the_cooldown() -> None:
    assert StoreConfig().breaker_seconds == 10.0
    with pytest.raises(ValueError, match="breaker_seconds"):
        StoreConfig(breaker_seconds=-1)


def _opened(backend: str, harness: Harness) -> Store:
    """A store on ``harness``'s server, failing at once for 3 s after an outage."""
    if isinstance(harness, RedisHarness):  # in the harness's namespace, cleared after
        from ctxwarden.store.redis_store import RedisStore

        return RedisStore(harness.url, timeout=1, namespace=harness.namespace, breaker_seconds=3)
    assert isinstance(harness, PostgresHarness)
    config = StoreConfig(backend=backend, url=harness.url, timeout_seconds=1, breaker_seconds=3)
    store = open_store(config)  # the configured cooldown reaches the store
    assert store._breaker.cooldown == 3  # type: ignore[attr-defined]
    return store


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_stalled_server_costs_one_timeout_then_calls_fail_at_once(
    backend: str, harness_for: Callable[[str], Harness]
) -> None:
    pytest.importorskip("redis" if backend == "redis" else "psycopg")
    harness = harness_for(backend)
    store = _opened(backend, harness)
    try:
        ref = store.put("t", "kept through the outage")
        with pytest.raises(ArtifactMissing):  # a live server's answer: still closed
            store.get("t", "cw:000000000000")
        if isinstance(harness, RedisHarness):
            pid = int(harness.client.info("server")["process_id"])
        else:
            pid = store._db.info.backend_pid  # type: ignore[attr-defined]
        with stopped(pid):
            first, error, _ = bounded(lambda: store.get("t", ref), 30)
            assert isinstance(error, StoreError), error
            again, error, _ = bounded(lambda: store.get("t", ref), 30)
            assert isinstance(error, StoreError) and "not tried again yet" in str(error)
        assert first >= 0.5 and again < 0.2  # the timeout once, then at once
        time.sleep(3.1)  # the cooldown over, the server back: tried, and it answers
        assert store.get("t", ref) == "kept through the outage"
    finally:
        store.close()


def test_a_live_postgres_servers_refusal_is_no_outage() -> None:
    psycopg = pytest.importorskip("psycopg")
    from psycopg import errors

    from ctxwarden.store.postgres_store import _is_outage

    for refusal in (errors.DeadlockDetected, errors.SerializationFailure, errors.DiskFull):
        assert not _is_outage(refusal())  # the server answered
    for outage in (errors.ConnectionFailure, errors.AdminShutdown, errors.QueryCanceled):
        assert _is_outage(outage())
    assert _is_outage(psycopg.OperationalError("no answer from the server"))  # client side
