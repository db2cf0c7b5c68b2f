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

Bounded waits: a server that stops answering (a stalled backend, a network that drops
packets) is a :class:`~ctxwarden.errors.StoreError` after about ``timeout`` seconds
(default :data:`DEFAULT_TIMEOUT`), never a hang. Unless the URL (or libpq's ``PG*``
environment) sets them, the connection gets ``connect_timeout``, TCP keepalives and
``tcp_user_timeout`` from ``timeout``, and a ``statement_timeout`` of ``timeout`` when
none is configured for the session (URL ``options``, role, database or server); since a
stalled backend cannot cancel its own statement, the store also gives up on the
connection itself one second after the statement timeout (the next call opens a new
one). ``gc`` runs on a connection of its own, under :data:`GC_STATEMENT_TIMEOUT` instead
of the store's own default. A statement timeout of 0 (set by the user) turns both off.
Unless configured, ``lock_timeout`` is four fifths of the statement timeout: a call
waiting on a row another connection holds (a replica's gc) fails alone as a lock
timeout, which does not open the breaker, instead of as a cancelled statement, which
does.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ctxwarden.errors import ArtifactMissing, StoreError
from ctxwarden.store.base import (
    content_digest,
    intact,
    make_ref,
    one_line,
    state_bytes,
    storage_name,
    text_body,
    touch_interval,
    verified_text,
)
from ctxwarden.store.breaker import Breaker

_T = TypeVar("_T")
_Db = psycopg.Connection[Any]

__all__ = ["DEFAULT_TIMEOUT", "GC_STATEMENT_TIMEOUT", "MIGRATIONS", "PostgresStore"]

DEFAULT_TIMEOUT = 5.0
"""Seconds the store waits by default for the server: to connect (libpq counts at least
2), for one statement, and for an unacknowledged packet (``tcp_user_timeout``)."""

GC_STATEMENT_TIMEOUT = 60.0
"""Seconds one statement of ``gc`` may take when the store set the statement timeout
itself (a cap trim sorts the whole table)."""

_GRACE = 1.0
"""Seconds past the statement timeout before the store gives up on the connection (the
server cancels a statement that ran too long itself, keeping the connection)."""

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
    except psycopg.Error as exc:  # libpq's messages span lines (a hint on the next one)
        raise StoreError(f"postgres store failed to {action}: {one_line(str(exc))}") from exc


_OUTAGE_STATES = frozenset({"57014", "57P01", "57P02", "57P03"})
"""SQLSTATEs of a server that is not serving: a statement cancelled at its timeout,
an administrator or crash shutdown, a server that cannot connect now (with class 08,
connection exceptions)."""


def _is_outage(cause: BaseException) -> bool:
    """Whether a driver error means the server did not answer: an operational error
    raised on the client side (a connection refused, lost or timed out, a statement the
    store's watchdog gave up on: no SQLSTATE) or one of :data:`_OUTAGE_STATES` or class
    08. A live server's refusal (a deadlock, a serialization failure, a lock timeout, a
    full disk) is not one."""
    if not isinstance(cause, psycopg.OperationalError):
        return False
    state = cause.sqlstate
    return state is None or state.startswith("08") or state in _OUTAGE_STATES


def _set_by_user(params: dict[str, Any], name: str) -> bool:
    """Whether connection parameter ``name`` is in the URL or libpq's environment."""
    if name in params:
        return True
    for default in psycopg.pq.Conninfo.get_defaults():
        if default.keyword.decode() == name:
            return bool(default.envvar and os.environ.get(default.envvar.decode()))
    return False


def _connect_params(url: str, timeout: float) -> dict[str, Any]:
    """The keyword arguments besides ``url`` to connect with: bounded waits derived from
    ``timeout`` for what neither ``url`` nor libpq's environment sets (a keyword argument
    would override the URL's value). :class:`psycopg.ProgrammingError` for a malformed
    URL."""
    given = conninfo_to_dict(url)
    seconds = max(1, math.ceil(timeout))
    defaults: dict[str, Any] = {
        "connect_timeout": seconds,
        "keepalives": 1,
        "keepalives_idle": seconds,
        "keepalives_interval": max(1, math.ceil(timeout / 3)),
        "keepalives_count": 3,
    }
    if psycopg.pq.version() >= 120000:  # older libpq has no such option
        defaults["tcp_user_timeout"] = max(1, round(timeout * 1000))
    return {name: value for name, value in defaults.items() if not _set_by_user(given, name)}


class _Watchdog:
    """Gives up on a connection whose statement outlives its deadline: shuts its socket
    down, so the waiting call fails at once (a stalled server answers nothing, and no
    server-side timeout or TCP error comes). One thread per store, started on first use.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._fd = -1
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.fired = False

    def arm(self, db: _Db, seconds: float | None) -> None:
        """Watch ``db`` for ``seconds`` from now (``None``: not at all)."""
        with self._cond:
            if seconds is None or self._stopped:
                self._deadline = None
                return
            self._deadline = time.monotonic() + seconds
            self._fd = db.pgconn.socket if not db.closed else -1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="ctxwarden-postgres-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._deadline = None
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline = None
                self.fired = True
                with suppress(OSError):
                    dup = socket.socket(fileno=os.dup(self._fd))
                    try:
                        dup.shutdown(socket.SHUT_RDWR)  # the socket, not just this fd
                    finally:
                        dup.close()


class _Watched:
    """A connection whose every statement is watched by a :class:`_Watchdog`."""

    def __init__(self, db: _Db, watchdog: _Watchdog, seconds: float | None) -> None:
        self.db = db
        self._watchdog = watchdog
        self._seconds = seconds

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[Any]:
        self._watchdog.arm(self.db, self._seconds)  # a deadline per statement
        return self.db.execute(query, params)

    def transaction(self) -> Any:
        return self.db.transaction()


class PostgresStore:
    """Artifacts and session state in PostgreSQL (see :mod:`store.base`).

    One connection in autocommit mode, serialized by a lock (like SQLite's); run one
    store per process or thread pool and let the server handle concurrency.
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_seconds: float = 30 * 86400,
        max_bytes: int = 2 << 30,
        timeout: float = DEFAULT_TIMEOUT,
        breaker_seconds: float = 0.0,
    ) -> None:
        if not timeout > 0:
            raise StoreError("postgres store needs a positive timeout")
        self.url = url
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self.timeout = timeout
        self._lock = threading.Lock()
        self._breaker = Breaker("postgres", breaker_seconds, _is_outage)
        self._closed = False
        self._watchdog = _Watchdog()
        self._statement_timeout: float | None = timeout  # as set for the session
        self._own_timeout = True  # whether the store set it (not the user)
        with _translated("connect"):
            self._params = _connect_params(url, timeout)
            self._db = self._connect()
        try:
            self._run("migrate the schema", self._migrate)
        except BaseException:
            self.close()
            raise

    def _connect(self) -> _Db:
        """The store's connection, opened anew."""
        db, self._statement_timeout, self._own_timeout = self._open(self._watchdog)
        return db

    def _open(self, watchdog: _Watchdog) -> tuple[_Db, float | None, bool]:
        """A new connection watched by ``watchdog``, its statement timeout set unless
        the user set one; with the statement timeout in seconds (``None``: none) and
        whether the store set it."""
        db = psycopg.connect(self.url, autocommit=True, **self._params)
        bound = self.timeout + _GRACE
        watchdog.fired = False
        watchdog.arm(db, bound)
        try:
            rows = db.execute(
                "SELECT name, setting, source FROM pg_settings"
                " WHERE name IN ('statement_timeout', 'lock_timeout')"
            ).fetchall()
            found = {name: (setting, source) for name, setting, source in rows}
            setting, source = found.get("statement_timeout", ("0", "default"))
            own = source == "default"  # not configured anywhere
            millis = max(1, round(self.timeout * 1000)) if own else int(setting)
            if own:
                db.execute("SELECT set_config('statement_timeout', %s, false)", (str(millis),))
            if millis > 0 and found.get("lock_timeout", ("0", "default"))[1] == "default":
                # a wait for a row lock (a replica's gc holds many in one transaction)
                # ends as a lock timeout, a live server's refusal, before the statement
                # timeout would end it as a sign of a server not serving
                lock = max(1, millis * 4 // 5)
                db.execute("SELECT set_config('lock_timeout', %s, false)", (str(lock),))
            return db, (millis / 1000 if millis > 0 else None), own
        except BaseException as exc:
            db.close()
            if isinstance(exc, psycopg.Error) and watchdog.fired:
                raise psycopg.OperationalError(self._no_answer(bound)) from None
            raise
        finally:
            watchdog.disarm()

    @staticmethod
    def _no_answer(bound: float | None) -> str:
        return f"no answer from the server within {bound or 0:g} s (gave up on the connection)"

    @staticmethod
    def _bound(statement: float | None) -> float | None:
        """How long the watchdog lets one statement run."""
        return None if statement is None else statement + _GRACE

    def _migrate(self, db: _Watched) -> None:
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

    def _run(
        self, action: str, work: Callable[[_Watched], _T], statement: float | None = None
    ) -> _T:
        """``work(connection)`` under the lock, errors translated; a connection found
        closed or broken by the server is opened again and ``work`` run once more. Each
        statement gets the watchdog's deadline (``statement`` seconds, default the
        session's statement timeout, plus a grace); one that passes it is a
        :class:`StoreError` (not run again: the server did not answer)."""
        with self._lock, self._breaker.guard(action), _translated(action):
            if self._db.closed and not self._closed:
                self._reconnect()
            try:
                return self._watched(work, statement)
            except psycopg.Error:
                if self._watchdog.fired or self._closed or not self._db.closed:
                    raise  # no answer, a query failed on a live connection, or closed
            self._reconnect()
            return self._watched(work, statement)

    def _watched(self, work: Callable[[_Watched], _T], statement: float | None) -> _T:
        """``work`` on the connection, every statement watched (see :meth:`_run`)."""
        bound = self._bound(self._statement_timeout if statement is None else statement)
        self._watchdog.fired = False
        try:
            return work(_Watched(self._db, self._watchdog, bound))
        except psycopg.Error:
            if self._watchdog.fired:  # raised as the store gave up: not run again
                raise psycopg.OperationalError(self._no_answer(bound)) from None
            raise
        finally:
            self._watchdog.disarm()

    def _reconnect(self) -> None:
        with suppress(psycopg.Error):
            self._db.close()
        self._db = self._connect()

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

        def work(db: _Watched) -> None:
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
        self, db: _Watched, row: tuple[str, str, str, bytes, int, float, float]
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

        def work(db: _Watched) -> list[tuple[Any, ...]]:
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
        """Drop artifacts unused since ``now - ttl``, then those larger than the cap by
        themselves (they could never be kept), then the least recently used until the
        rest fits ``max_bytes`` (the same rule as SQLite, in one transaction).

        Runs on a connection of its own, opened for it (the store's calls do not wait
        behind a collection), whose statements may take :data:`GC_STATEMENT_TIMEOUT`
        when the store set the statement timeout (a user's own stands).
        """
        at = time.time() if now is None else now
        if self._closed:
            raise StoreError("postgres store failed to collect garbage: the store is closed")
        watchdog = _Watchdog()
        try:
            with _translated("collect garbage"):
                db, statement, own = self._open(watchdog)
                with db:
                    if own and statement is not None:
                        statement = max(statement, GC_STATEMENT_TIMEOUT)
                    bound = self._bound(statement)
                    watched = _Watched(db, watchdog, bound)
                    try:
                        with db.transaction():
                            if own and statement is not None:
                                millis = round(statement * 1000)
                                watched.execute(
                                    "SELECT set_config('statement_timeout', %s, true),"
                                    " set_config('lock_timeout', %s, true)",
                                    (str(millis), str(max(1, millis * 4 // 5))),
                                )
                            return self._collect(watched, at)
                    except psycopg.Error:
                        if watchdog.fired:
                            raise psycopg.OperationalError(self._no_answer(bound)) from None
                        raise
                    finally:
                        watchdog.disarm()
        finally:
            watchdog.stop()

    def _collect(self, db: _Watched, now: float) -> int:
        expired = db.execute(
            "DELETE FROM ctxwarden_artifacts WHERE last_used < %s", (now - self.ttl,)
        ).rowcount
        db.execute("DELETE FROM ctxwarden_sessions WHERE updated < %s", (now - self.ttl,))
        dropped = max(0, expired)
        for _ in range(3):  # a pass may skip rows refreshed meanwhile: count again
            total = db.execute("SELECT COALESCE(SUM(size), 0) FROM ctxwarden_artifacts").fetchone()
            if total is None or int(total[0]) <= self.max_bytes:  # under the cap: no sort
                break
            # Keep the longest most-recently-used run that fits the cap (artifacts over
            # the cap by themselves last: never kept); drop the rest. A row another
            # connection used meanwhile is skipped (its last_used no longer matches the
            # one ranked, and the update is what PostgreSQL rechecks): it is the most
            # recently used now, and the next pass ranks it as such.
            over = db.execute(
                "DELETE FROM ctxwarden_artifacts AS a USING ("
                "  SELECT tenant, ref, last_used, SUM(size) OVER ("
                "    ORDER BY size > %s, last_used DESC, tenant, ref ROWS UNBOUNDED PRECEDING"
                "  ) AS kept FROM ctxwarden_artifacts) AS r "
                "WHERE r.kept > %s AND a.tenant = r.tenant AND a.ref = r.ref "
                "AND a.last_used = r.last_used",
                (self.max_bytes, self.max_bytes),
            ).rowcount
            dropped += max(0, over)
        return dropped

    def close(self) -> None:
        with self._lock, _translated("close"):
            self._closed = True
            self._watchdog.stop()
            if hasattr(self, "_db"):
                self._db.close()
