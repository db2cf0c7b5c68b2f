"""A PostgreSQL store for fleets of proxies sharing originals (psycopg 3, synchronous).

Same contract and rules as :mod:`ctxwarden.store.sqlite`; the tables carry a
``ctxwarden_`` prefix because a PostgreSQL database is usually shared with other
applications. To keep several stores apart in one database, give each its own schema
through the URL (``?options=-csearch_path%3Dmyschema``); the schema must exist.

Schema migrations are named, append-only and applied once (table
``ctxwarden_migrations``), under a transaction-scoped advisory lock so that replicas
starting together do not race. Timestamps are the clients' ``time.time()`` (as in
SQLite), so ``gc(now)`` means the same thing on every backend. psycopg errors are
translated to :class:`~ctxwarden.errors.StoreError` where they enter.

A connection the server dropped (a restart, a failover, an idle timeout,
``pg_terminate_backend``) is opened again by the next call, which then runs once more
on the fresh connection (every operation is idempotent); after :meth:`close` nothing
reconnects. Tenant and session names go through
:func:`~ctxwarden.store.base.storage_name` (a text column holds no NUL).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import psycopg

from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store.base import (
    content_digest,
    intact,
    make_ref,
    state_bytes,
    storage_name,
    text_body,
    touch_interval,
    verified_text,
)

_T = TypeVar("_T")
_Db = psycopg.Connection[Any]

__all__ = ["MIGRATIONS", "PostgresStore"]

# Advisory lock key serializing migrations ("ctxw" in ASCII).
_MIGRATION_LOCK = 0x63747877

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_artifacts",
        """
        CREATE TABLE ctxwarden_artifacts (
            tenant TEXT NOT NULL,
            ref TEXT NOT NULL,
            digest TEXT NOT NULL,
            body BYTEA NOT NULL,
            size BIGINT NOT NULL,
            created DOUBLE PRECISION NOT NULL,
            last_used DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, ref)
        );
        CREATE INDEX ctxwarden_artifacts_last_used ON ctxwarden_artifacts (last_used);
        """,
    ),
    (
        "0002_sessions",
        """
        CREATE TABLE ctxwarden_sessions (
            tenant TEXT NOT NULL,
            session TEXT NOT NULL,
            state BYTEA NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, session)
        );
        """,
    ),
)


@contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise StoreError(f"postgres store failed to {action}: {exc}".strip()) from exc


class PostgresStore:
    """Artifacts and session state in PostgreSQL (see :mod:`store.base`).

    One connection in autocommit mode, serialized by a lock (like SQLite's); run one
    store per process or thread pool and let the server handle concurrency.
    """

    def __init__(
        self, url: str, *, ttl_seconds: float = 30 * 86400, max_bytes: int = 2 << 30
    ) -> None:
        self.url = url
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._closed = False
        with _translated("connect"):
            self._db = psycopg.connect(url, autocommit=True)
        try:
            with _translated("migrate the schema"):
                self._migrate()
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        db = self._db
        with db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            db.execute(
                "CREATE TABLE IF NOT EXISTS ctxwarden_migrations "
                "(name TEXT PRIMARY KEY, applied DOUBLE PRECISION NOT NULL)"
            )
            done = {row[0] for row in db.execute("SELECT name FROM ctxwarden_migrations")}
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        db.execute(statement.encode("utf-8"))
                db.execute("INSERT INTO ctxwarden_migrations VALUES (%s, %s)", (name, time.time()))

    def _run(self, action: str, work: Callable[[_Db], _T]) -> _T:
        """``work(connection)`` under the lock, errors translated; a connection found
        closed or broken by the server is opened again and ``work`` run once more."""
        with self._lock, _translated(action):
            if self._db.closed and not self._closed:
                self._reconnect()
            try:
                return work(self._db)
            except psycopg.Error:
                if self._closed or not self._db.closed:
                    raise  # a query failed on a live connection (or the store is closed)
            self._reconnect()
            return work(self._db)

    def _reconnect(self) -> None:
        with suppress(psycopg.Error):
            self._db.close()
        self._db = psycopg.connect(self.url, autocommit=True)

    def put(self, tenant: str, text: str) -> str:
        """Keep ``text``. A stored copy of the same digest gets the body again when it
        differs (a damaged copy heals; an intact one keeps its stored value, not
        rewritten); one of another digest (a 48-bit prefix collision, or a damaged
        digest) is replaced only when it is damaged or expired: a valid one wins."""
        body = text_body(text)
        digest = content_digest(text)
        ref = make_ref(digest)
        now = time.time()
        row = (storage_name(tenant), ref, digest, body, len(body), now, now)

        def work(db: _Db) -> None:
            written = db.execute(
                "INSERT INTO ctxwarden_artifacts AS a VALUES (%s,%s,%s,%s,%s,%s,%s) "
                "ON CONFLICT (tenant, ref) DO UPDATE SET "
                "body = CASE WHEN a.body = EXCLUDED.body THEN a.body ELSE EXCLUDED.body END, "
                "size = EXCLUDED.size, last_used = EXCLUDED.last_used "
                "WHERE a.digest = EXCLUDED.digest",
                row,
            ).rowcount
            if not written:
                self._replace_unless_valid(db, row)

        self._run("store an artifact", work)
        return ref

    def _replace_unless_valid(
        self, db: _Db, row: tuple[str, str, str, bytes, int, float, float]
    ) -> None:
        key, ref, _, _, _, now, _ = row
        with db.transaction():
            old = db.execute(
                "SELECT digest, body, last_used FROM ctxwarden_artifacts "
                "WHERE tenant=%s AND ref=%s FOR UPDATE",
                (key, ref),
            ).fetchone()
            if old is not None and old[2] >= now - self.ttl and intact(ref, old[0], old[1]):
                return  # a valid artifact of another text: keep it
            db.execute("DELETE FROM ctxwarden_artifacts WHERE tenant=%s AND ref=%s", (key, ref))
            db.execute("INSERT INTO ctxwarden_artifacts VALUES (%s,%s,%s,%s,%s,%s,%s)", row)

    def get(self, tenant: str, ref: str) -> str:
        now = time.time()
        row = self._run(
            "read an artifact",
            lambda db: db.execute(
                "UPDATE ctxwarden_artifacts SET last_used=%s "
                "WHERE tenant=%s AND ref=%s AND last_used >= %s RETURNING digest, body",
                (now, storage_name(tenant), ref, now - self.ttl),
            ).fetchone(),
        )
        if row is None:
            raise ArtifactMissing(f"no artifact {ref}")
        digest, body = row
        return verified_text(ref, digest, body)

    def has(self, tenant: str, ref: str) -> bool:
        row = self._run(
            "look up an artifact",
            lambda db: db.execute(
                "SELECT 1 FROM ctxwarden_artifacts WHERE tenant=%s AND ref=%s AND last_used >= %s",
                (storage_name(tenant), ref, time.time() - self.ttl),
            ).fetchone(),
        )
        return row is not None

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        wanted = sorted(set(refs))
        if not wanted:
            return frozenset()
        now = time.time()
        key = storage_name(tenant)

        def work(db: _Db) -> list[tuple[Any, ...]]:
            rows = db.execute(
                "SELECT ref, last_used FROM ctxwarden_artifacts "
                "WHERE tenant=%s AND ref = ANY(%s) AND last_used >= %s",
                (key, wanted, now - self.ttl),
            ).fetchall()
            stale_before = now - touch_interval(self.ttl)
            stale = [ref for ref, last_used in rows if last_used < stale_before]
            if stale:
                db.execute(
                    "UPDATE ctxwarden_artifacts SET last_used=%s WHERE tenant=%s AND ref = ANY(%s)",
                    (now, key, stale),
                )
            return rows

        rows = self._run("look up artifacts", work)
        return frozenset(wanted) - {ref for ref, _ in rows}

    def get_state(self, tenant: str, session: str) -> bytes | None:
        row = self._run(
            "read session state",
            lambda db: db.execute(
                "SELECT state FROM ctxwarden_sessions "
                "WHERE tenant=%s AND session=%s AND updated >= %s",
                (storage_name(tenant), storage_name(session), time.time() - self.ttl),
            ).fetchone(),
        )
        return state_bytes(row[0]) if row else None

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        self._run(
            "write session state",
            lambda db: db.execute(
                "INSERT INTO ctxwarden_sessions VALUES (%s,%s,%s,%s) "
                "ON CONFLICT (tenant, session) "
                "DO UPDATE SET state=EXCLUDED.state, updated=EXCLUDED.updated",
                (storage_name(tenant), storage_name(session), state, time.time()),
            ),
        )

    def stats(self) -> dict[str, int]:
        row = self._run(
            "read stats",
            lambda db: db.execute(
                "SELECT (SELECT COUNT(*) FROM ctxwarden_artifacts), "
                "(SELECT COALESCE(SUM(size), 0) FROM ctxwarden_artifacts), "
                "(SELECT COUNT(*) FROM ctxwarden_sessions), "
                "(SELECT COUNT(*) FROM (SELECT tenant FROM ctxwarden_artifacts "
                "UNION SELECT tenant FROM ctxwarden_sessions) AS t)"
            ).fetchone(),
        )
        assert row is not None  # an aggregate always returns one row
        artifacts, size, sessions, tenants = (int(value) for value in row)
        return {"artifacts": artifacts, "bytes": size, "sessions": sessions, "tenants": tenants}

    def gc(self, now: float | None = None) -> int:
        """Drop artifacts unused since ``now - ttl``, then the least recently used
        until the rest fits ``max_bytes`` (the same rule as SQLite, in one transaction).
        """
        at = time.time() if now is None else now

        def work(db: _Db) -> int:
            with db.transaction():
                return self._collect(db, at)

        return self._run("collect garbage", work)

    def _collect(self, db: _Db, now: float) -> int:
        expired = db.execute(
            "DELETE FROM ctxwarden_artifacts WHERE last_used < %s", (now - self.ttl,)
        ).rowcount
        db.execute("DELETE FROM ctxwarden_sessions WHERE updated < %s", (now - self.ttl,))
        total = db.execute("SELECT COALESCE(SUM(size), 0) FROM ctxwarden_artifacts").fetchone()
        if total is None or int(total[0]) <= self.max_bytes:  # under the cap: no sort
            return max(0, expired)
        # Keep the longest most-recently-used run that fits the cap; drop the rest.
        over = db.execute(
            "DELETE FROM ctxwarden_artifacts AS a USING ("
            "  SELECT tenant, ref, SUM(size) OVER ("
            "    ORDER BY last_used DESC, tenant, ref ROWS UNBOUNDED PRECEDING) AS kept"
            "  FROM ctxwarden_artifacts) AS r "
            "WHERE r.kept > %s AND a.tenant = r.tenant AND a.ref = r.ref",
            (self.max_bytes,),
        ).rowcount
        return max(0, expired) + max(0, over)

    def close(self) -> None:
        with self._lock, _translated("close"):
            self._closed = True
            self._db.close()
