"""Placeholder for the RedisStore backend (being built)."""

from __future__ import annotations

from ctxwarden.errors import ConfigError
from ctxwarden.store.memory import MemoryStore

__all__ = ["RedisStore"]


class RedisStore(MemoryStore):
    def __init__(self, url: str, **_: object) -> None:
        raise ConfigError("backend not available yet", "store.backend")
