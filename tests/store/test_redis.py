"""Redis specifics: server-side expiry refreshed on use, keys, error translation."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ctxwarden.config import StoreConfig
from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store import open_store
from ctxwarden.store.redis_store import RedisStore
from tests.store.backends import Harness, RedisHarness, service_url


@pytest.fixture
def redis_harness(harness_for: Callable[[str], Harness]) -> RedisHarness:
    harness = harness_for("redis")
    assert isinstance(harness, RedisHarness)
    return harness


def test_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="redis store failed to connect"):
        RedisStore("redis://127.0.0.1:1/0", ttl_seconds=60)


def test_keys_are_namespaced_by_escaped_tenant(redis_harness: RedisHarness) -> None:
    store = redis_harness.open()
    assert isinstance(store, RedisStore)
    ref = store.put("team:{x}", "text")
    key = store.artifact_key("team:{x}", ref)
    assert key == f"{redis_harness.namespace}:{{team%3A%7Bx%7D}}:a:{ref}"
    assert redis_harness.client.exists(key) == 1
    store.close()


def test_artifacts_expire_on_the_server(redis_harness: RedisHarness) -> None:
    store = redis_harness.open(ttl_seconds=0.2)
    ref = store.put("t", "short-lived")
    assert store.has("t", ref)
    deadline = time.monotonic() + 5
    while store.has("t", ref) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not store.has("t", ref)
    with pytest.raises(ArtifactMissing):
        store.get("t", ref)
    store.close()


def test_get_and_put_refresh_the_expiry(redis_harness: RedisHarness) -> None:
    store = redis_harness.open(ttl_seconds=100)
    assert isinstance(store, RedisStore)
    ref = store.put("t", "kept while used")
    key = store.artifact_key("t", ref)
    redis_harness.client.pexpire(key, 1000)  # as if it had gone unused for ~99 s
    assert store.get("t", ref) == "kept while used"
    assert redis_harness.client.pttl(key) > 90_000
    redis_harness.client.pexpire(key, 1000)
    store.put("t", "kept while used")
    assert redis_harness.client.pttl(key) > 90_000
    store.close()


def test_get_of_a_missing_ref_creates_no_key(redis_harness: RedisHarness) -> None:
    store = redis_harness.open()
    assert isinstance(store, RedisStore)
    with pytest.raises(ArtifactMissing):
        store.get("t", "cw:0123456789ab")
    assert redis_harness.client.exists(store.artifact_key("t", "cw:0123456789ab")) == 0
    store.close()


def test_session_state_expires_ttl_after_its_last_write(redis_harness: RedisHarness) -> None:
    store = redis_harness.open(ttl_seconds=100)
    assert isinstance(store, RedisStore)
    store.put_state("t", "s", b"state")
    ttl_ms = redis_harness.client.pttl(store.state_key("t", "s"))
    assert 90_000 < ttl_ms <= 100_000
    store.close()


def test_server_errors_are_translated(redis_harness: RedisHarness) -> None:
    store = redis_harness.open()
    assert isinstance(store, RedisStore)
    ref = "cw:0123456789ab"
    redis_harness.client.set(store.artifact_key("t", ref), b"a string, not a hash")
    with pytest.raises(StoreError, match="redis store failed to read an artifact") as info:
        store.get("t", ref)
    assert not isinstance(info.value, ArtifactMissing)
    store.close()


def test_open_store_opens_redis() -> None:
    url = service_url("CTXWARDEN_TEST_REDIS_URL", "Redis")
    store = open_store(StoreConfig(backend="redis", url=url, ttl_seconds=60))
    assert isinstance(store, RedisStore)
    assert store.ttl == 60
    store.close()


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379/0", "redis://127.0.0.1:notaport/0", "redis://[::1/0"]
)
def test_a_malformed_url_is_a_store_error(url: str) -> None:
    with pytest.raises(StoreError, match="redis store failed to connect: invalid url"):
        RedisStore(url, ttl_seconds=60)
