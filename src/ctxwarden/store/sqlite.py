"""The default store: one SQLite file in WAL mode, safe across threads and processes.

Schema migrations are named, append-only and applied once (table ``migrations``).
sqlite3 errors are translated to :class:`~ctxwarden.errors.StoreError` where they enter.

Lookups by reference (``missing`` on every request, ``has``) read the covering index
``artifacts_lookup`` and never the bodies: ``artifacts`` is a WITHOUT ROWID table, so a
search of its primary key reads every overflowing body it compares against.

Bounded waits: a statement that needs the write lock while another connection (another
process, an operator's ``sqlite3`` shell in a transaction) holds it waits at most
``timeout`` seconds (SQLite's busy timeout; default :data:`DEFAULT_TIMEOUT`, the
``store.timeout_seconds`` of a configured store), then fails as "database is locked".
Writers sharing the file hold the lock for milliseconds (a ``gc`` batch for about 0.2 s
per 1,000 artifacts of 30 KB), so the wait is only spent on a lock held for good. That
failure and a disk I/O error open the store's :class:`~ctxwarden.store.breaker.Breaker`:
every write then fails at once for ``breaker_seconds`` (a condense's later writes too,
instead of each waiting again), then one is tried again; reads go on (WAL: a reader
never waits for a writer; a read's refresh of last use is skipped under a lock). A
constraint error, a damaged row or a removed file does not open it.
"""

from __future__ import annotations

import contextlib
import math
import os
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
    intact,
    make_ref,
    state_bytes,
    storage_name,
    text_body,
    touch_interval,
    verified_text,
)
from ctxwarden.store.breaker import Breaker

__all__ = ["DEFAULT_TIMEOUT", "MIGRATIONS", "SqliteStore"]

DEFAULT_TIMEOUT = 5.0
"""Seconds a statement waits for another connection's write lock (the busy timeout)."""

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
    (
        "0003_artifacts_lookup",
        """
        CREATE INDEX artifacts_lookup ON artifacts (tenant, ref, last_used, size);
        """,
    ),
    (
        "0004_sessions_updated",
        """
        CREATE INDEX sessions_updated ON sessions (updated);
        """,
    ),
)

_LOOKUP_INDEX = "artifacts_lookup"

GC_BATCH = 1000
"""Rows ``gc`` deletes per write transaction: it commits and lets go of the store (the
SQLite write lock and the store's own lock) between batches, so writers of other
processes and threads get in (one transaction over a 2 GB store held the write lock
for 12-18 s: another process's write failed as "database is locked")."""


@contextmanager
def _translated(action: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite store failed to {action}: {exc}") from exc


_OUTAGE_CODES = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_IOERR")
"""Error codes (and their extended codes) of a file that cannot be used now: its lock
held past the busy timeout, or its disk failing."""


def _is_outage(cause: BaseException) -> bool:
    """Whether a sqlite3 error means the file cannot be used now (see
    :data:`_OUTAGE_CODES`). ``SQLITE_BUSY_SNAPSHOT`` is not one: it fails at once,
    without waiting, and the next write succeeds."""
    if not isinstance(cause, sqlite3.OperationalError):
        return False
    name = getattr(cause, "sqlite_errorname", "")
    return name != "SQLITE_BUSY_SNAPSHOT" and name.startswith(_OUTAGE_CODES)


_OS_ERRORS: dict[str, type[OSError]] = {}


def _store_os_error(kind: type[OSError]) -> type[OSError]:
    """A :class:`StoreError` that is also ``kind`` (callers that tell a folder made over
    a file from a denied one by the OSError subclass keep working)."""
    made = _OS_ERRORS.get(kind.__qualname__)
    if made is None or not issubclass(made, kind):

        def __str__(self: OSError) -> str:
            return str(self.args[-1]) if len(self.args) == 3 else OSError.__str__(self)

        made = type(f"Store{kind.__name__}", (StoreError, kind), {"__str__": __str__})
        _OS_ERRORS[kind.__qualname__] = made
    return made


def _folder_error(path: Path, exc: OSError) -> OSError:
    """The error of a folder ``path`` cannot be created in: a StoreError naming it."""
    message = (
        f"sqlite store failed to open {path}: cannot create its folder "
        f"{path.parent}: {exc.strerror or exc}"
    )
    error = _store_os_error(type(exc))(exc.errno, exc.strerror, exc.filename)
    error.args = (exc.errno, exc.strerror, message)
    return error


def _file_id(path: Path) -> tuple[int, int] | None:
    """The device and inode of the file at ``path`` (``None`` when there is none; any
    other failure of the stat raises :class:`OSError`)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _text(raw: bytes) -> str:
    """TEXT values as read: a damaged row's invalid UTF-8 is kept (surrogateescape), so
    it fails verification as corrupt instead of failing the read."""
    return raw.decode("utf-8", "surrogateescape")


def _check_ours(db: sqlite3.Connection, path: Path) -> None:
    """A :class:`StoreError` when the database at ``path`` has tables but no
    ``migrations`` table: another program's file (a mistyped ``--data-dir`` or
    ``[store] path``), which opening must leave as it is, not switch to WAL and add
    ctxwarden's tables to. A file with no table (new or empty) is ours to migrate; the
    ``migrations`` table is the first one a migration creates, so a store another
    process is making at the same time passes."""
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables and "migrations" not in tables:
        raise StoreError(
            f"{path} is not a ctxwarden store (a SQLite database with tables of its own "
            "and no migrations table; it was left as it is)"
        )


_SKIPPED_TOUCH = frozenset({"SQLITE_READONLY", "SQLITE_BUSY", "SQLITE_LOCKED"})
"""Failures of a last-use refresh that leave the read it belongs to standing."""


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner alone when it does not exist yet
    (it holds tool outputs, secrets among them; SQLite gives its ``-wal`` and ``-shm``
    files the database's permissions). An existing file keeps the mode it has."""
    with contextlib.suppress(FileExistsError, IsADirectoryError):  # opening reports a folder
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class SqliteStore:
    """Artifacts and session state in one SQLite database (see :mod:`store.base`).
    A folder or database file it creates is its owner's alone (``0700`` / ``0600``).
    An existing database that is not a ctxwarden store (tables, but no ``migrations``)
    is a :class:`StoreError` naming it, and is not changed. ``timeout``: seconds a
    statement waits for another connection's write lock; ``breaker_seconds``: how long
    calls fail at once after one found the file locked or failing (0: every call is
    tried; see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        ttl_seconds: float = 30 * 86400,
        max_bytes: int = 2 << 30,
        timeout: float = DEFAULT_TIMEOUT,
        breaker_seconds: float = 0.0,
    ) -> None:
        if not (timeout > 0 and math.isfinite(timeout)):
            raise StoreError(f"sqlite store needs a positive, finite timeout, got {timeout!r}")
        self.path = Path(os.path.abspath(path))  # the file opened, whatever the cwd later
        self.timeout = timeout
        self.read_only = False
        """The file cannot be written (opened to read: lookups and recalls work, every
        write fails)."""
        self.ttl = ttl_seconds
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._puts = 0  # artifacts written through this store (gc's running total)
        self._held = 0.0  # seconds the last gc batch held the store
        self._breaker = Breaker(
            "sqlite",
            breaker_seconds,
            _is_outage,
            outage="a call found the database locked by another connection or failing",
        )
        with _translated("open"):
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                _create_private(self.path)
            except OSError as exc:
                raise _folder_error(self.path, exc) from exc
            self._db = self._connect(str(self.path))
            try:
                try:
                    self._open_with_retry()
                except sqlite3.OperationalError as exc:
                    if not self._unwritable(exc):
                        raise
                    self._db.close()
                    self._db = self._open_read_only()
                    self.read_only = True
                self._lookup = self._lookup_clause()
            except BaseException:
                self._db.close()
                raise
        # SQLite itself opens a file it may not write to read (writes then fail)
        self.read_only = self.read_only or not os.access(self.path, os.W_OK)
        try:
            self._file_id = _file_id(self.path)
        except OSError:  # the file opened but cannot be looked at: writes go unchecked
            self._file_id = None

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        db = sqlite3.connect(
            target, check_same_thread=False, isolation_level=None, timeout=self.timeout, uri=uri
        )
        db.text_factory = _text
        return db

    def _unwritable(self, exc: sqlite3.OperationalError) -> bool:
        """True when opening failed because an existing database cannot be written
        where it lies (a read-only mount or folder: WAL cannot create its ``-shm``
        file; SQLite names it ``SQLITE_READONLY`` or an extended code of it, such as
        ``SQLITE_READONLY_DIRECTORY``)."""
        name = getattr(exc, "sqlite_errorname", "")
        unwritable = name == "SQLITE_CANTOPEN" or name.startswith("SQLITE_READONLY")
        return unwritable and self.path.is_file()

    def _open_read_only(self) -> sqlite3.Connection:
        """The database as an immutable file (no ``-shm``, no locks): reads work, writes
        fail as SQLITE_READONLY (so ``get``/``missing`` skip refreshing last use and
        ``put`` raises). A ``-wal`` left beside it unmerged is not read."""
        db = self._connect(self.path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
        try:
            _check_ours(db, self.path)
            db.execute("SELECT COUNT(*) FROM migrations").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _lookup_clause(self) -> str:
        """``INDEXED BY`` the lookup index (the planner may pick the primary key, whose
        search reads bodies), or nothing where a read-only copy predates it."""
        found = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='index' AND name=?", (_LOOKUP_INDEX,)
        ).fetchone()
        return f"INDEXED BY {_LOOKUP_INDEX}" if found else ""

    def _open_with_retry(self, attempts: int = 50) -> None:
        """Check the file is a ctxwarden store (or none yet), switch to WAL and
        migrate. Changing the journal mode takes an exclusive lock
        that SQLite may refuse at once ("database is locked") while another process opens
        the same fresh file, without waiting on the busy timeout: retry with backoff."""
        for attempt in range(attempts):
            try:
                _check_ours(self._db, self.path)
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

    @contextmanager
    def _calling(self, action: str) -> Iterator[None]:
        """One call (the caller holds the lock): through the breaker, its errors
        translated to a :class:`StoreError` naming ``action``."""
        with self._breaker.guard(action), _translated(action):
            yield

    @contextmanager
    def _reading(self, action: str) -> Iterator[None]:
        """One read (the caller holds the lock), its errors translated, not through the
        breaker: in WAL mode a read never waits for another connection's write lock
        (a refresh of last use it makes is skipped under one, :meth:`_touch`), so it
        answers while the breaker fails writes (recalls, the lookups of a condense, the
        proxy's readiness probe: a lock held elsewhere must not flap them)."""
        with _translated(action):
            yield

    def _check_file(self, action: str) -> None:
        """A :class:`StoreError` when the database file was removed or replaced since
        it was opened (a data directory deleted under a running engine): writes to the
        open, unlinked file would succeed and be lost at exit, and a reference sent to
        the model could never be recalled. The writer's segment then stays as sent."""
        if self._file_id is None:
            return
        try:
            now = _file_id(self.path)
        except OSError:  # a stat that failed for another reason (a network file system's
            return  # moment): the write goes on, as before the check
        if now != self._file_id:
            raise StoreError(
                f"sqlite store failed to {action}: {self.path} was removed or replaced "
                "while open (make a new engine to use the file now there)"
            )

    def put(self, tenant: str, text: str) -> str:
        """Keep ``text``. A stored copy of the same digest is rewritten with the body
        (a damaged copy heals; SQLite rewrites the whole row for ``last_used`` anyway);
        one of another digest (a 48-bit prefix collision, or a damaged digest) is
        replaced only when it is damaged or expired: a valid one wins, as first write."""
        body = text_body(text)
        digest = content_digest(text)
        ref = make_ref(digest)
        now = time.time()
        key = storage_name(tenant)
        with self._lock, self._calling("store an artifact"):
            self._check_file("store an artifact")
            self._puts += 1
            row = (key, ref, digest, body, len(body), now, now)
            written = self._db.execute(
                "INSERT INTO artifacts VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT (tenant, ref) DO UPDATE SET body=excluded.body, "
                "size=excluded.size, last_used=excluded.last_used "
                "WHERE artifacts.digest=excluded.digest",
                row,
            ).rowcount
            if not written:
                self._replace_unless_valid(row)
        return ref

    def _replace_unless_valid(self, row: tuple[str, str, str, bytes, int, float, float]) -> None:
        key, ref, _, _, _, now, _ = row
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            old = db.execute(
                "SELECT digest, body, last_used FROM artifacts WHERE tenant=? AND ref=?",
                (key, ref),
            ).fetchone()
            if old is not None and old[2] >= now - self.ttl and intact(ref, old[0], old[1]):
                old = None  # a valid artifact of another text: keep it
            if old is not None:
                db.execute("DELETE FROM artifacts WHERE tenant=? AND ref=?", (key, ref))
                db.execute("INSERT INTO artifacts VALUES (?,?,?,?,?,?,?)", row)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def get(self, tenant: str, ref: str) -> str:
        now = time.time()
        key = storage_name(tenant)
        with self._lock, self._reading("read an artifact"):
            row = self._db.execute(
                "SELECT digest, body FROM artifacts WHERE tenant=? AND ref=? AND last_used>=?",
                (key, ref, now - self.ttl),
            ).fetchone()
            if row is not None:
                self._touch("UPDATE artifacts SET last_used=? WHERE tenant=? AND ref=?",
                            (now, key, ref))  # fmt: skip
        if row is None:
            raise ArtifactMissing(f"no artifact {ref}")
        digest, body = row
        return verified_text(ref, digest, body)

    def _touch(self, sql: str, params: tuple[object, ...]) -> None:
        """Refresh last use, best effort: a read-only store (a copy, a mounted backup) is
        still read, and so is one whose write lock another connection holds: the
        refresh is then skipped at once, never waited for (a read would otherwise wait
        the busy timeout and fail, opening the breaker; the next read refreshes it).
        Any other failure still raises."""
        db = self._db
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorname", "") not in _SKIPPED_TOUCH:
                raise
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")

    def has(self, tenant: str, ref: str) -> bool:
        with self._lock, self._reading("look up an artifact"):
            row = self._db.execute(
                f"SELECT 1 FROM artifacts {self._lookup} WHERE tenant=? AND ref=? AND last_used>=?",
                (storage_name(tenant), ref, time.time() - self.ttl),
            ).fetchone()
        return row is not None

    def missing(self, tenant: str, refs: Collection[str]) -> frozenset[str]:
        now = time.time()
        stale_before = now - touch_interval(self.ttl)
        key = storage_name(tenant)
        found: set[str] = set()
        stale: list[str] = []
        with self._lock, self._reading("look up artifacts"):
            for part in chunked(set(refs), _MAX_PARAMS):
                marks = ",".join("?" * len(part))
                for ref, last_used in self._db.execute(
                    f"SELECT ref, last_used FROM artifacts {self._lookup} "
                    f"WHERE tenant=? AND ref IN ({marks}) AND last_used>=?",
                    (key, *part, now - self.ttl),
                ):
                    found.add(ref)
                    if last_used < stale_before:
                        stale.append(ref)
            for part in chunked(stale, _MAX_PARAMS):
                marks = ",".join("?" * len(part))
                self._touch(
                    f"UPDATE artifacts SET last_used=? WHERE tenant=? AND ref IN ({marks})",
                    (now, key, *part),
                )
        return frozenset(refs) - found

    def get_state(self, tenant: str, session: str) -> bytes | None:
        with self._lock, self._reading("read session state"):
            row = self._db.execute(
                "SELECT state FROM sessions WHERE tenant=? AND session=? AND updated>=?",
                (storage_name(tenant), storage_name(session), time.time() - self.ttl),
            ).fetchone()
        return state_bytes(row[0]) if row else None

    def put_state(self, tenant: str, session: str, state: bytes) -> None:
        with self._lock, self._calling("write session state"):
            self._check_file("write session state")
            self._db.execute(
                "INSERT INTO sessions VALUES (?,?,?,?) ON CONFLICT (tenant, session) "
                "DO UPDATE SET state=excluded.state, updated=excluded.updated",
                (storage_name(tenant), storage_name(session), state, time.time()),
            )

    def stats(self) -> dict[str, int]:
        with self._lock, self._reading("read stats"):
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
        """Drop what expired, then what is past the cap: artifacts larger than the cap
        by themselves (they could never be kept), then the least recently used.

        Deletes in batches of :data:`GC_BATCH` rows, each its own write transaction; the
        store (the SQLite write lock and the store's lock) is let go between batches for
        about as long as the batch held it, so other writers get in. Each batch of the
        cap trim counts the excess again inside its transaction, so two collectors at
        once (two replicas, a cron and the CLI) see each other's deletions instead of
        trimming the same excess twice."""
        now = time.time() if now is None else now
        dropped = 0
        expired = now - self.ttl
        self._trim_batches(
            "DELETE FROM sessions WHERE (tenant, session) IN (SELECT tenant, session "
            "FROM sessions WHERE updated < ? ORDER BY updated LIMIT ?)",
            (expired, GC_BATCH),
        )
        dropped += self._trim_batches(
            "DELETE FROM artifacts WHERE (tenant, ref) IN (SELECT tenant, ref "
            "FROM artifacts INDEXED BY artifacts_last_used "
            "WHERE last_used < ? ORDER BY last_used LIMIT ?)",
            (expired, GC_BATCH),
        )
        counted: tuple[int, int] | None = None  # bytes stored and the largest artifact
        seen = (-1, -1)
        while True:
            with self._lock, self._batch() as db:
                # Another connection's commit changes data_version, this store's own
                # puts the counter: the running count is kept only while neither moved
                # (else counted again: a scan of the lookup index, ~65 ms at 450,000).
                if counted is None or self._seen(db) != seen:
                    counted = db.execute(
                        "SELECT COALESCE(SUM(size), 0), COALESCE(MAX(size), 0) "
                        f"FROM artifacts {self._lookup}"
                    ).fetchone()
                total, largest = counted
                if total <= self.max_bytes:
                    return dropped
                doomed = self._over_cap(db, total - self.max_bytes, largest > self.max_bytes)
                db.executemany(
                    "DELETE FROM artifacts WHERE tenant=? AND ref=?",
                    [(tenant, ref) for tenant, ref, _ in doomed],
                )
                gone = sum(size for _, _, size in doomed)
                # after dropping the oversized ones the largest left is not known
                counted = None if largest > self.max_bytes else (total - gone, largest)
                seen = self._seen(db)
            dropped += len(doomed)
            if not doomed:  # nothing to drop (a count that no longer holds): done
                return dropped
            self._pause()

    def _seen(self, db: sqlite3.Connection) -> tuple[int, int]:
        """What changes when artifacts may have been written since last asked."""
        return db.execute("PRAGMA data_version").fetchone()[0], self._puts

    def _over_cap(
        self, db: sqlite3.Connection, excess: int, oversized: bool
    ) -> list[tuple[str, str, int]]:
        """At most :data:`GC_BATCH` artifacts to drop for ``excess`` bytes: those larger
        than the cap by themselves when there are any (they could never be kept, and
        dropping them first keeps newer ones that fit), else the least recently used."""
        lookup = self._lookup
        if oversized:
            rows: list[tuple[str, str, int]] = db.execute(
                f"SELECT tenant, ref, size FROM artifacts {lookup} WHERE size > ? LIMIT ?",
                (self.max_bytes, GC_BATCH),
            ).fetchall()
            return rows
        # the sizes from the lookup index: reading them from the table reads each body
        size_of = (
            f"(SELECT s.size FROM artifacts AS s {lookup} WHERE s.tenant=o.tenant AND s.ref=o.ref)"
        )
        doomed: list[tuple[str, str, int]] = []
        for tenant, ref, size in db.execute(
            f"SELECT o.tenant, o.ref, {size_of} FROM artifacts AS o "
            "INDEXED BY artifacts_last_used ORDER BY o.last_used LIMIT ?",
            (GC_BATCH,),
        ):
            if excess <= 0:
                break
            doomed.append((tenant, ref, size))
            excess -= size
        return doomed

    def _trim_batches(self, sql: str, params: tuple[object, ...]) -> int:
        """Run the deleting ``sql`` in batches until it deletes fewer than a batch."""
        dropped = 0
        while True:
            with self._lock, self._batch() as db:
                count: int = db.execute(sql, params).rowcount
            dropped += max(0, count)
            if count < GC_BATCH:
                return dropped
            self._pause()

    @contextmanager
    def _batch(self) -> Iterator[sqlite3.Connection]:
        """One write transaction of ``gc`` (the caller holds the lock)."""
        db = self._db
        with self._calling("collect garbage"):
            started = time.monotonic()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                self._held = time.monotonic() - started

    def _pause(self) -> None:
        """Between two batches: let go for as long as the last one held the store (at
        least a millisecond, at most 0.1 s), so a writer polling for the lock finds it
        free about half the time."""
        time.sleep(min(0.1, max(0.001, self._held)))

    def close(self) -> None:
        with self._lock:
            self._db.close()
