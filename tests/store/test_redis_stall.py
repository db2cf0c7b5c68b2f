"""Redis: bounded waits. redis-py 5 waited forever for a reply by default: the store
passes its own timeouts (the URL's win), so a stalled server is a StoreError."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ctxwarden.errors import StoreError
from tests.store.backends import Harness, RedisHarness
from tests.store.stall import bounded, silent_server, stopped

pytest.importorskip("redis")

from ctxwarden.store.redis_store import DEFAULT_TIMEOUT, RedisStore


@pytest.fixture
def redis_harness(harness_for: Callable[[str], Harness]) -> RedisHarness:
    harness = harness_for("redis")
    assert isinstance(harness, RedisHarness)
    return harness


@pytest.mark.parametrize(
    ("query", "timeout", "expected"),
    [("", None, DEFAULT_TIMEOUT), ("?socket_timeout=0.3", 30.0, 0.3)],
)
def test_the_timeouts_are_explicit_and_the_urls_win(
    query: str, timeout: float | None, expected: float
) -> None:
    with silent_server() as port:
        url = f"redis://127.0.0.1:{port}/0{query}"
        taken, error, _ = bounded(
            lambda: RedisStore(url) if timeout is None else RedisStore(url, timeout=timeout),
            expected + 10,
        )
    assert isinstance(error, StoreError)
    assert "failed to connect" in str(error)
    assert expected - 0.1 < taken < expected + 2


def test_the_pool_is_given_both_timeouts(redis_harness: RedisHarness) -> None:
    """Not redis-py's defaults (none before redis 6): the store's own."""
    store = RedisStore(redis_harness.url, timeout=2.5, namespace=redis_harness.namespace)
    try:
        given = store._redis.connection_pool.connection_kwargs
        assert given["socket_timeout"] == 2.5
        assert given["socket_connect_timeout"] == 2.5
    finally:
        store.close()


def test_a_stalled_server_is_a_store_error_within_the_bound(redis_harness: RedisHarness) -> None:
    store = RedisStore(redis_harness.url, timeout=0.5, namespace=redis_harness.namespace)
    try:
        ref = store.put("t", "kept through the stall")
        pid = int(redis_harness.client.info("server")["process_id"])
        with stopped(pid):
            taken, error, _ = bounded(lambda: store.get("t", ref), 30)
        assert isinstance(error, StoreError), error
        assert taken < 3
        assert store.get("t", ref) == "kept through the stall"
    finally:
        store.close()
