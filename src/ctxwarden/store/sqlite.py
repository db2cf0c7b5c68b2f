"""The default store: one SQLite file in WAL mode, safe across threads and processes.

Schema migrations are named, append-only and applied once (table ``migrations``).
sqlite3 errors are translated to :class:`~ctxwarden.errors.StoreError` where they enter.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store.base import (
    chunked,
    content_digest,
    make_ref,
    touch_interval,
    verified_text,
)

__all__ = ["MIGRATIONS", "SqliteStore"]

_MAX_PARAMS = 500
"""References per statement (SQLite limits bound parameters)."""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_artifacts",
        """
        CREATE TABLE artifacts (
            tenant TEXT NOT NULL,
            ref TEXT NOT NULL,
            digest TEXT NOT NULL,
            body BLOB NOT NULL,
            size INTEGER NOT NULL,
            created REAL NOT NULL,
            last_used REAL NOT NULL,
            PRIMARY KEY (tenant, ref)
        ) WITHOUT ROWID;
        CREATE INDEX artifacts_last_used ON artifacts (last_used);
        """,
    ),
    (
        "0002_sessions",
        """
        CREATE TABLE sessions (
            tenant TEXT NOT NULL,
            session TEXT NOT NULL,
            state BLOB NOT NULL,
            updated REAL NOT NULL,
            PRIMARY KEY (tenant, session)
        ) WITHOUT ROWID;
        """,
    ),
)


@contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite store failed to {action}: {exc}") from exc


class SqliteStore:
    """Artifacts and session state in one SQLite database (see :mod:`store.base`)."""

    def __init__(
        self, path: str | Path, *, ttl_seconds: float = 30 * 86400, max_bytes: int = 2 << 30
    ) -> None:
        self.path = Path(path)
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        with _translated("open"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=10
            )
            try:
                self._open_with_retry()
            except BaseException:
                self._db.close()
                raise

    def _open_with_retry(self, attempts: int = 50) -> None:
        """Switch to WAL and migrate. Changing the journal mode takes an exclusive lock
        that SQLite may refuse at once ("database is locked") while another process opens
        the same fresh file, without waiting on the busy timeout: retry with backoff."""
        for attempt in range(attempts):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._migrate()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(min(0.5, 0.01 * 2**attempt))

    def _migrate(self) -> None:
        db = self._db
        db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied REAL)")
        done = {row[0] for row in db.execute("SELECT name FROM migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            db.execute("BEGIN IMMEDIATE")
            try:
                if db.execute("SELECT 1 FROM migrations WHERE name=?", (name,)).fetchone():
                    db.execute("COMMIT")
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def put(self, tenant: str, text: str) -> str:
        digest = content_digest(text)
        ref = make_ref(digest)
        body = text.encode("utf-8")
        now = time.time()
        with self._lock, _translated("store an artifact"):
            self._db.execute(
                "INSERT INTO artifacts VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT (tenant, ref) DO UPDATE SET last_used=excluded.last_used",
                (tenant, ref, digest, body, len(body), now, now),
            )
        return ref

    def get(self, tenant: str, ref: str) -> str:
        with self._lock, _translated("read an artifact"):
            row = self._db.execute(
                "SELECT digest, body FROM artifacts WHERE tenant=? AND ref=?", (tenant, ref)
            ).fetchone()
            if row is not None:
                self._touch("UPDATE artifacts SET last_used=? WHERE tenant=? AND ref=?",
                            (time.time(), tenant, ref))  # fmt: skip
        if row is None:
            raise ArtifactMissing(f"no artifact {ref}")
        digest, body = row
        return verified_text(ref, digest, body)

    def _touch(self, sql: str, params: tuple[object, ...]) -> None:
        """Refresh last use; a read-only store (a copy, a mounted backup) is still read:
        only the refresh is skipped there (any other failure still raises)."""
        try:
            self._db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") != "SQLITE_READONLY":
                raise

    def has(self, tenant: str, ref: str) -> bool:
        with self._lock, _translated("look up an artifact"):
            row = self._db.execute(
                "SELECT 1 FROM artifacts WHERE tenant=? AND ref=?", (tenant, ref)
            ).fetchone()
        return row is not None

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        now = time.time()
        stale_before = now - touch_interval(self.ttl)
        found: set[str] = set()
        stale: list[str] = []
        with self._lock, _translated("look up artifacts"):
            for part in chunked(set(refs), _MAX_PARAMS):
                marks = ",".join("?" * len(part))
                for ref, last_used in self._db.execute(
                    f"SELECT ref, last_used FROM artifacts WHERE tenant=? AND ref IN ({marks})",
                    (tenant, *part),
                ):
                    found.add(ref)
                    if last_used < stale_before:
                        stale.append(ref)
            for part in chunked(stale, _MAX_PARAMS):
                marks = ",".join("?" * len(part))
                self._touch(
                    f"UPDATE artifacts SET last_used=? WHERE tenant=? AND ref IN ({marks})",
                    (now, tenant, *part),
                )
        return frozenset(refs) - found

    def get_state(self, tenant: str, session: str) -> bytes | None:
        with self._lock, _translated("read session state"):
            row = self._db.execute(
                "SELECT state FROM sessions WHERE tenant=? AND session=?", (tenant, session)
            ).fetchone()
        return bytes(row[0]) if row else None

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        with self._lock, _translated("write session state"):
            self._db.execute(
                "INSERT INTO sessions VALUES (?,?,?,?) ON CONFLICT (tenant, session) "
                "DO UPDATE SET state=excluded.state, updated=excluded.updated",
                (tenant, session, state, time.time()),
            )

    def stats(self) -> dict[str, int]:
        with self._lock, _translated("read stats"):
            artifacts, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM artifacts"
            ).fetchone()
            sessions = self._db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            tenants = self._db.execute(
                "SELECT COUNT(*) FROM "
                "(SELECT tenant FROM artifacts UNION SELECT tenant FROM sessions)"
            ).fetchone()[0]
        return {"artifacts": artifacts, "bytes": size, "sessions": sessions, "tenants": tenants}

    def gc(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        with self._lock, _translated("collect garbage"):
            cur = self._db.execute("DELETE FROM artifacts WHERE last_used < ?", (now - self.ttl,))
            dropped = cur.rowcount
            self._db.execute("DELETE FROM sessions WHERE updated < ?", (now - self.ttl,))
            total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM artifacts").fetchone()[0]
            if total > self.max_bytes:
                excess = total - self.max_bytes
                rows = self._db.execute(
                    "SELECT tenant, ref, size FROM artifacts ORDER BY last_used"
                ).fetchall()
                for tenant, ref, size in rows:
                    if excess <= 0:
                        break
                    self._db.execute(
                        "DELETE FROM artifacts WHERE tenant=? AND ref=?", (tenant, ref)
                    )
                    excess -= size
                    dropped += 1
        return dropped

    def close(self) -> None:
        with self._lock:
            self._db.close()
