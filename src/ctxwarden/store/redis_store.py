"""A Redis store for fleets of proxies sharing originals (redis-py, synchronous).

Layout (``namespace`` defaults to ``ctxwarden``)::

    {namespace}:{<tenant>}:a:cw:<12 hex>   hash: digest, body, size, created
    {namespace}:{<tenant>}:s:<session>     string: the session state

``<tenant>`` and ``<session>`` are percent-encoded (their UTF-8, lone surrogates passed
through), so a tenant name can never reach into another tenant's keys (``:`` and braces
are always escaped); the braces make the tenant a Redis Cluster hash tag, keeping one
tenant's keys on one shard.

Time is Redis's: every artifact key carries an expiry of ``ttl`` that ``put`` and
``get`` refresh, so the server drops unused artifacts by itself and the last use of a
key is ``expiry - ttl``. Session state expires ``ttl`` after it was last written, as in
SQLite. There is no byte cap here: bound memory with the server's ``maxmemory`` and an
LRU eviction policy. ``gc(now)`` still honours its contract for a given ``now`` (it
drops keys whose expiry falls before ``now``), so callers can treat backends alike.

Every redis-py error is translated to :class:`~ctxwarden.errors.StoreError` where it
enters (:func:`_translated`).

Bounded waits: connecting and every reply wait at most ``timeout`` seconds (default
:data:`DEFAULT_TIMEOUT`; redis-py 5 waited forever by default), so a server that stops
answering is a StoreError, not a hang. The URL's own ``socket_timeout`` and
``socket_connect_timeout`` query parameters win over it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import redis

from ctxwarden.errors import ArtifactCorrupted, ArtifactMissing, StoreError
from ctxwarden.store.base import (
    content_digest,
    intact,
    make_ref,
    one_line,
    state_bytes,
    text_body,
    verified_text,
)
from ctxwarden.store.breaker import Breaker

__all__ = ["DEFAULT_TIMEOUT", "RedisStore"]

DEFAULT_TIMEOUT = 5.0
"""Seconds the store waits by default to connect and for each reply."""

_SCAN_BATCH = 500

_PUT = """
local old = redis.call('HGET', KEYS[1], 'digest')
if old and old ~= ARGV[1] and old ~= ARGV[6] then
  return 0
end
if old and old ~= ARGV[1] then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'digest', ARGV[1], 'body', ARGV[2], 'size', ARGV[3])
redis.call('HSETNX', KEYS[1], 'created', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""
"""Write an artifact in one step: the hash of the same digest gets the body again (a
damaged body heals); one of another digest is kept (first write wins) unless it is the
digest ARGV[6] the caller found damaged. Returns 1 when written."""


@contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        raise StoreError(f"redis store failed to {action}: {one_line(str(exc))}") from exc


def _is_outage(cause: BaseException) -> bool:
    """Whether a driver error means the server did not answer."""
    return isinstance(cause, redis.ConnectionError | redis.TimeoutError)


def _segment(name: str) -> str:
    return quote(name.encode("utf-8", "surrogatepass"), safe="")


class RedisStore:
    """Artifacts and session state in one Redis database (see :mod:`store.base`).

    The constructor connects and pings, so an unreachable server is a
    :class:`StoreError` at open time rather than at the first request.
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_seconds: float = 30 * 86400,
        namespace: str = "ctxwarden",
        timeout: float = DEFAULT_TIMEOUT,
        breaker_seconds: float = 0.0,
    ) -> None:
        if ttl_seconds <= 0:
            raise StoreError("redis store needs a positive ttl")
        if not timeout > 0:
            raise StoreError("redis store needs a positive timeout")
        self.url = url
        self.ttl = ttl_seconds
        self.namespace = namespace
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._lock = threading.Lock()
        self._breaker = Breaker("redis", breaker_seconds, _is_outage)
        with _translated("connect"):
            try:
                # the URL's query parameters win over these (redis-py's rule)
                self._redis: redis.Redis = redis.Redis.from_url(
                    url,
                    decode_responses=False,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    socket_keepalive=True,
                )
            except (ValueError, TypeError) as exc:
                raise StoreError(f"redis store failed to connect: invalid url: {exc}") from exc
            self._redis.ping()
            self._put = self._redis.register_script(_PUT)

    @contextmanager
    def _calling(self, action: str) -> Iterator[None]:
        """One call to the server: under the lock, through the breaker, its errors
        translated to a :class:`StoreError` naming ``action``."""
        with self._lock, self._breaker.guard(action), _translated(action):
            yield

    # -- keys --------------------------------------------------------------------------

    def artifact_key(self, tenant: str, ref: str) -> str:
        """The Redis key of ``ref`` for ``tenant`` (public for operators and tests)."""
        return f"{self.namespace}:{{{_segment(tenant)}}}:a:{ref}"

    def state_key(self, tenant: str, session: str) -> str:
        """The Redis key of the state of ``session`` for ``tenant``."""
        return f"{self.namespace}:{{{_segment(tenant)}}}:s:{_segment(session)}"

    def _parse_key(self, key: bytes) -> tuple[str, str] | None:
        """``(tenant, kind)`` of one of this namespace's keys, else ``None``; the tenant
        as encoded in the key (one-to-one, so it counts tenants)."""
        rest = key.decode("utf-8", "replace")[len(self.namespace) + 1 :]
        if not rest.startswith("{") or "}:" not in rest:
            return None
        tenant, _, tail = rest[1:].partition("}:")
        kind = tail[:2]
        if kind not in ("a:", "s:"):
            return None
        return tenant, kind[0]

    def _scan(self) -> Iterator[tuple[bytes, str, str]]:
        """Every key of this namespace as ``(key, tenant, kind)``."""
        pattern = f"{self.namespace}:{{*"
        for key in self._redis.scan_iter(match=pattern, count=_SCAN_BATCH):
            parsed = self._parse_key(key)
            if parsed is not None:
                yield key, parsed[0], parsed[1]

    # -- artifacts ---------------------------------------------------------------------

    def put(self, tenant: str, text: str) -> str:
        """Keep ``text`` and refresh its expiry. The body is written again, so a damaged
        copy heals; a valid artifact of another text under the same reference (a 48-bit
        prefix collision) is kept (first write wins, as in SQLite)."""
        body = text_body(text)
        digest = content_digest(text)
        ref = make_ref(digest)
        key = self.artifact_key(tenant, ref)
        args: list[Any] = [digest, body, len(body), repr(time.time()), self._ttl_ms, b""]
        with self._calling("store an artifact"):
            if self._put(keys=[key], args=args):
                return ref
            found: list[Any] = self._redis.hmget(key, ["digest", "body"])
            other, other_body = found
            if other is None:
                args[5] = b""  # gone meanwhile
            elif intact(ref, bytes(other).decode("utf-8", "replace"), other_body):
                return ref  # a valid artifact of another text
            else:
                args[5] = other
            self._put(keys=[key], args=args)
        return ref

    def get(self, tenant: str, ref: str) -> str:
        """The verified text; refreshes the expiry (a missing key is not created)."""
        key = self.artifact_key(tenant, ref)
        with self._calling("read an artifact"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hmget(key, ["digest", "body"])
            pipe.pexpire(key, self._ttl_ms)
            result: list[Any] = pipe.execute()
        digest_raw, body = result[0]
        if digest_raw is None or body is None:
            raise ArtifactMissing(f"no artifact {ref}")
        try:
            digest = bytes(digest_raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ArtifactCorrupted(f"artifact {ref} has a broken digest") from None
        return verified_text(ref, digest, body)

    def has(self, tenant: str, ref: str) -> bool:
        with self._calling("look up an artifact"):
            return bool(self._redis.exists(self.artifact_key(tenant, ref)))

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        """One pipeline of ``PEXPIRE``: it refreshes the expiry of the keys that exist
        (an in-memory write, cheap enough for every request) and answers 0 for the
        others (a missing key is not created)."""
        ordered = list(dict.fromkeys(refs))
        if not ordered:
            return frozenset()
        with self._calling("look up artifacts"):
            pipe = self._redis.pipeline(transaction=False)
            for ref in ordered:
                pipe.pexpire(self.artifact_key(tenant, ref), self._ttl_ms)
            answers: list[Any] = pipe.execute()
        return frozenset(ref for ref, alive in zip(ordered, answers, strict=True) if not alive)

    # -- session state -----------------------------------------------------------------

    def get_state(self, tenant: str, session: str) -> bytes | None:
        with self._calling("read session state"):
            value = self._redis.get(self.state_key(tenant, session))
        return None if value is None else state_bytes(value)

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        """Replace the state; it expires ``ttl`` after this write."""
        with self._calling("write session state"):
            self._redis.set(self.state_key(tenant, session), state, px=self._ttl_ms)

    # -- maintenance -------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counts over this namespace (a SCAN: an operator's command, not a hot path)."""
        artifacts: list[bytes] = []
        sessions = 0
        tenants: set[str] = set()
        with self._calling("read stats"):
            for key, tenant, kind in self._scan():
                tenants.add(tenant)
                if kind == "a":
                    artifacts.append(key)
                else:
                    sessions += 1
            pipe = self._redis.pipeline(transaction=False)
            for key in artifacts:
                pipe.hget(key, "size")
            sizes: list[Any] = pipe.execute() if artifacts else []
        present = [int(size) for size in sizes if size is not None]
        return {
            "artifacts": len(present),
            "bytes": sum(present),
            "sessions": sessions,
            "tenants": len(tenants),
        }

    def gc(self, now: float | None = None) -> int:
        """Drop keys whose expiry is before ``now`` (default: none, Redis already did).

        An artifact expiring before ``now`` was last used before ``now - ttl``, which
        is the SQLite rule; the byte cap belongs to the server's ``maxmemory``.
        """
        if now is None:
            return 0
        dropped = 0
        with self._calling("collect garbage"):
            keys = [(key, kind) for key, _, kind in self._scan()]
            pipe = self._redis.pipeline(transaction=False)
            for key, _ in keys:
                pipe.pttl(key)
            remaining: list[int] = pipe.execute() if keys else []
            clock = time.time()
            doomed = [
                (key, kind)
                for (key, kind), pttl in zip(keys, remaining, strict=True)
                if pttl >= 0 and clock + pttl / 1000 < now
            ]
            if doomed:
                pipe = self._redis.pipeline(transaction=False)
                for key, _ in doomed:
                    pipe.delete(key)
                deleted: list[int] = pipe.execute()
                dropped = sum(
                    n for (_, kind), n in zip(doomed, deleted, strict=True) if kind == "a"
                )
        return dropped

    def close(self) -> None:
        with self._lock, _translated("close"):
            self._redis.close()
