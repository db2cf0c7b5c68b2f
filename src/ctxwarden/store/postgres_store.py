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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager

import psycopg

from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store.base import content_digest, make_ref, touch_interval, verified_text

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

    def put(self, tenant: str, text: str) -> str:
        digest = content_digest(text)
        ref = make_ref(digest)
        body = text.encode("utf-8")
        now = time.time()
        with self._lock, _translated("store an artifact"):
            self._db.execute(
                "INSERT INTO ctxwarden_artifacts VALUES (%s,%s,%s,%s,%s,%s,%s) "
                "ON CONFLICT (tenant, ref) DO UPDATE SET last_used=EXCLUDED.last_used",
                (tenant, ref, digest, body, len(body), now, now),
            )
        return ref

    def get(self, tenant: str, ref: str) -> str:
        with self._lock, _translated("read an artifact"):
            row = self._db.execute(
                "UPDATE ctxwarden_artifacts SET last_used=%s WHERE tenant=%s AND ref=%s "
                "RETURNING digest, body",
                (time.time(), tenant, ref),
            ).fetchone()
        if row is None:
            raise ArtifactMissing(f"no artifact {ref}")
        digest, body = row
        return verified_text(ref, digest, body)

    def has(self, tenant: str, ref: str) -> bool:
        with self._lock, _translated("look up an artifact"):
            row = self._db.execute(
                "SELECT 1 FROM ctxwarden_artifacts WHERE tenant=%s AND ref=%s", (tenant, ref)
            ).fetchone()
        return row is not None

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        wanted = sorted(set(refs))
        if not wanted:
            return frozenset()
        now = time.time()
        with self._lock, _translated("look up artifacts"):
            rows = self._db.execute(
                "SELECT ref, last_used FROM ctxwarden_artifacts WHERE tenant=%s AND ref = ANY(%s)",
                (tenant, wanted),
            ).fetchall()
            stale_before = now - touch_interval(self.ttl)
            stale = [ref for ref, last_used in rows if last_used < stale_before]
            if stale:
                self._db.execute(
                    "UPDATE ctxwarden_artifacts SET last_used=%s WHERE tenant=%s AND ref = ANY(%s)",
                    (now, tenant, stale),
                )
        return frozenset(wanted) - {ref for ref, _ in rows}

    def get_state(self, tenant: str, session: str) -> bytes | None:
        with self._lock, _translated("read session state"):
            row = self._db.execute(
                "SELECT state FROM ctxwarden_sessions WHERE tenant=%s AND session=%s",
                (tenant, session),
            ).fetchone()
        return bytes(row[0]) if row else None

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        with self._lock, _translated("write session state"):
            self._db.execute(
                "INSERT INTO ctxwarden_sessions VALUES (%s,%s,%s,%s) "
                "ON CONFLICT (tenant, session) "
                "DO UPDATE SET state=EXCLUDED.state, updated=EXCLUDED.updated",
                (tenant, session, state, time.time()),
            )

    def stats(self) -> dict[str, int]:
        with self._lock, _translated("read stats"):
            row = self._db.execute(
                "SELECT (SELECT COUNT(*) FROM ctxwarden_artifacts), "
                "(SELECT COALESCE(SUM(size), 0) FROM ctxwarden_artifacts), "
                "(SELECT COUNT(*) FROM ctxwarden_sessions), "
                "(SELECT COUNT(*) FROM (SELECT tenant FROM ctxwarden_artifacts "
                "UNION SELECT tenant FROM ctxwarden_sessions) AS t)"
            ).fetchone()
        assert row is not None  # an aggregate always returns one row
        artifacts, size, sessions, tenants = (int(value) for value in row)
        return {"artifacts": artifacts, "bytes": size, "sessions": sessions, "tenants": tenants}

    def gc(self, now: float | None = None) -> int:
        """Drop artifacts unused since ``now - ttl``, then the least recently used
        until the rest fits ``max_bytes`` (the same rule as SQLite, in one transaction).
        """
        now = time.time() if now is None else now
        with self._lock, _translated("collect garbage"), self._db.transaction():
            expired = self._db.execute(
                "DELETE FROM ctxwarden_artifacts WHERE last_used < %s", (now - self.ttl,)
            ).rowcount
            self._db.execute("DELETE FROM ctxwarden_sessions WHERE updated < %s", (now - self.ttl,))
            # Keep the longest most-recently-used run that fits the cap; drop the rest.
            over = self._db.execute(
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
            self._db.close()
