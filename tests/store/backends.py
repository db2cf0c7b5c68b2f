"""Backends under test: one harness per backend that opens isolated stores and can
tamper with stored bytes behind the store's back (the test-only corruption hook).

Redis and PostgreSQL come from ``CTXWARDEN_TEST_REDIS_URL`` /
``CTXWARDEN_TEST_POSTGRES_URL`` (``scripts/with-services.sh`` sets them). Without them
the tests skip, or fail when ``CTXWARDEN_REQUIRE_SERVICES=1``. Each test gets its own
Redis key namespace or PostgreSQL schema, removed afterwards.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.store import MemoryStore, SqliteStore, Store

BACKENDS = ("memory", "sqlite", "redis", "postgres")
# Backends that enforce a byte cap themselves (Redis leaves it to maxmemory).
CAPPED = ("memory", "sqlite", "postgres")


def service_url(variable: str, name: str) -> str:
    """The URL in ``variable``; skips, or fails under CTXWARDEN_REQUIRE_SERVICES=1."""
    url = os.environ.get(variable)
    if url:
        return url
    reason = (
        f"{name} is not available: {variable} is not set "
        "(run the tests under scripts/with-services.sh to start one)"
    )
    if os.environ.get("CTXWARDEN_REQUIRE_SERVICES") == "1":
        pytest.fail(f"CTXWARDEN_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


class Harness:
    """Opens stores of one backend and corrupts their entries for tests."""

    name: str

    def open(self, *, ttl_seconds: float = 3600, max_bytes: int = 1 << 30) -> Store:
        raise NotImplementedError

    def corrupt(self, store: Store, tenant: str, ref: str, body: bytes) -> None:
        """Replace the stored bytes of ``ref`` without touching its digest."""
        self.set_field(store, tenant, ref, "body", body)

    def set_digest(self, store: Store, tenant: str, ref: str, digest: str) -> None:
        """Replace the stored digest of ``ref`` (leaving its bytes)."""
        self.set_field(store, tenant, ref, "digest", digest)

    def set_field(self, store: Store, tenant: str, ref: str, field: str, value: Any) -> None:
        """Overwrite one stored field (``body`` or ``digest``) of an existing ``ref``."""
        raise NotImplementedError

    def close(self) -> None:
        return None


class MemoryHarness(Harness):
    name = "memory"

    def open(self, *, ttl_seconds: float = 3600, max_bytes: int = 1 << 30) -> Store:
        return MemoryStore(ttl_seconds=ttl_seconds, max_bytes=max_bytes)

    def corrupt(self, store: Store, tenant: str, ref: str, body: bytes) -> None:
        assert isinstance(store, MemoryStore)
        store.corrupt(tenant, ref, body.decode("utf-8", "replace"))

    def set_digest(self, store: Store, tenant: str, ref: str, digest: str) -> None:
        assert isinstance(store, MemoryStore)
        text, _, used = store._items[(tenant, ref)]
        store._items[(tenant, ref)] = (text, digest, used)


class SqliteHarness(Harness):
    name = "sqlite"

    def __init__(self, folder: Path) -> None:
        self.path = folder / "store.sqlite3"

    def open(self, *, ttl_seconds: float = 3600, max_bytes: int = 1 << 30) -> Store:
        return SqliteStore(self.path, ttl_seconds=ttl_seconds, max_bytes=max_bytes)

    def set_field(self, store: Store, tenant: str, ref: str, field: str, value: Any) -> None:
        with sqlite3.connect(self.path) as db:
            cur = db.execute(
                f"UPDATE artifacts SET {field}=? WHERE tenant=? AND ref=?", (value, tenant, ref)
            )
            assert cur.rowcount == 1
        db.close()


class RedisHarness(Harness):
    name = "redis"

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.namespace = f"cwtest-{uuid.uuid4().hex[:12]}"
        self.client = redis.Redis.from_url(url)

    def open(self, *, ttl_seconds: float = 3600, max_bytes: int = 1 << 30) -> Store:
        from ctxwarden.store.redis_store import RedisStore

        return RedisStore(self.url, ttl_seconds=ttl_seconds, namespace=self.namespace)

    def set_field(self, store: Store, tenant: str, ref: str, field: str, value: Any) -> None:
        from ctxwarden.store.redis_store import RedisStore

        assert isinstance(store, RedisStore)
        key = store.artifact_key(tenant, ref)
        assert self.client.exists(key)
        self.client.hset(key, field, value)

    def close(self) -> None:
        keys = list(self.client.scan_iter(match=f"{self.namespace}:*"))
        if keys:
            self.client.delete(*keys)
        self.client.close()


class PostgresHarness(Harness):
    name = "postgres"

    def __init__(self, url: str) -> None:
        import psycopg
        from psycopg.conninfo import make_conninfo

        self.schema = f"cwtest_{uuid.uuid4().hex[:12]}"
        self.admin = psycopg.connect(url, autocommit=True)
        self.admin.execute(f"CREATE SCHEMA {self.schema}".encode())
        self.url = make_conninfo(url, options=f"-csearch_path={self.schema}")

    def open(self, *, ttl_seconds: float = 3600, max_bytes: int = 1 << 30) -> Store:
        from ctxwarden.store.postgres_store import PostgresStore

        return PostgresStore(self.url, ttl_seconds=ttl_seconds, max_bytes=max_bytes)

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        """Run ``query`` in this test's schema; returns the cursor."""
        self.admin.execute(f"SET search_path TO {self.schema}".encode())
        return self.admin.execute(query.encode(), params)

    def set_field(self, store: Store, tenant: str, ref: str, field: str, value: Any) -> None:
        cur = self.sql(
            f"UPDATE ctxwarden_artifacts SET {field}=%s WHERE tenant=%s AND ref=%s",
            (value, tenant, ref),
        )
        assert cur.rowcount == 1

    def close(self) -> None:
        self.admin.execute(f"DROP SCHEMA {self.schema} CASCADE".encode())
        self.admin.close()


def make_harness(name: str, tmp_path: Path) -> Harness:
    if name == "memory":
        return MemoryHarness()
    if name == "sqlite":
        return SqliteHarness(tmp_path)
    if name == "redis":
        return RedisHarness(service_url("CTXWARDEN_TEST_REDIS_URL", "Redis"))
    return PostgresHarness(service_url("CTXWARDEN_TEST_POSTGRES_URL", "PostgreSQL"))
