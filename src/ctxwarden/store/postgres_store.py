"""Placeholder for the PostgresStore backend (being built)."""

from __future__ import annotations

from ctxwarden.errors import ConfigError
from ctxwarden.store.memory import MemoryStore

__all__ = ["PostgresStore"]


class PostgresStore(MemoryStore):
    def __init__(self, url: str, **_: object) -> None:
        raise ConfigError("backend not available yet", "store.backend")
