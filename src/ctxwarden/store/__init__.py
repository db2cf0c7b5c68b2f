"""Content-addressed artifact stores: the :class:`Store` protocol and its backends."""

from __future__ import annotations

import os
from pathlib import Path

from ctxwarden.config import StoreConfig
from ctxwarden.errors import ConfigError
from ctxwarden.store.base import REF_PATTERN, Store, content_digest, make_ref
from ctxwarden.store.memory import MemoryStore
from ctxwarden.store.sqlite import SqliteStore

__all__ = [
    "REF_PATTERN",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "content_digest",
    "default_data_dir",
    "make_ref",
    "open_store",
    "sqlite_path",
]


def default_data_dir() -> Path:
    """``$CTXWARDEN_DATA_DIR``, else ``$XDG_DATA_HOME/ctxwarden``, else ``~/.local/share/...``."""
    explicit = os.environ.get("CTXWARDEN_DATA_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "ctxwarden"


def sqlite_path(config: StoreConfig, data_dir: str | None = None) -> Path:
    """The file of a SQLite store: ``config.path``, else ``store.sqlite3`` in the data
    directory (``data_dir`` or the default one)."""
    folder = Path(data_dir) if data_dir else default_data_dir()
    return Path(config.path) if config.path else folder / "store.sqlite3"


def open_store(config: StoreConfig, data_dir: str | None = None) -> Store:
    """Open the configured backend.

    Redis and PostgreSQL need ``config.url`` and their client libraries (the ``fleet``
    extra); a missing one is a :class:`ConfigError`. An unreachable server is a
    :class:`~ctxwarden.errors.StoreError` raised here, not at first use. SQLite, Redis
    and PostgreSQL get ``store.timeout_seconds`` (SQLite: its busy timeout) and
    ``store.breaker_seconds``.
    """
    if config.backend == "memory":
        return MemoryStore(ttl_seconds=config.ttl_seconds, max_bytes=config.max_bytes)
    if config.backend == "sqlite":
        path = sqlite_path(config, data_dir)
        return SqliteStore(
            path,
            ttl_seconds=config.ttl_seconds,
            max_bytes=config.max_bytes,
            timeout=config.timeout_seconds,
            breaker_seconds=config.breaker_seconds,
        )
    if not config.url:
        raise ConfigError(f"the {config.backend} store needs a url", "store.url")
    try:
        if config.backend == "redis":
            from ctxwarden.store.redis_store import RedisStore

            return RedisStore(
                config.url,
                ttl_seconds=config.ttl_seconds,
                timeout=config.timeout_seconds,
                breaker_seconds=config.breaker_seconds,
            )
        from ctxwarden.store.postgres_store import PostgresStore
    except ImportError as exc:
        raise ConfigError(
            f"the {config.backend} store needs its client library ({exc.name}); "
            "install ctxwarden[fleet]",
            "store.backend",
        ) from exc
    return PostgresStore(
        config.url,
        ttl_seconds=config.ttl_seconds,
        max_bytes=config.max_bytes,
        timeout=config.timeout_seconds,
        breaker_seconds=config.breaker_seconds,
    )
