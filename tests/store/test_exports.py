"""The store's public surface is exactly the intended names."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "ctxwarden.store": {
        "REF_PATTERN",
        "MemoryStore",
        "SqliteStore",
        "Store",
        "content_digest",
        "default_data_dir",
        "make_ref",
        "open_store",
        "sqlite_path",
    },
    "ctxwarden.store.sqlite": {"DEFAULT_TIMEOUT", "MIGRATIONS", "SqliteStore"},
    "ctxwarden.store.redis_store": {"DEFAULT_TIMEOUT", "RedisStore"},
    "ctxwarden.store.postgres_store": {
        "DEFAULT_TIMEOUT",
        "GC_STATEMENT_TIMEOUT",
        "MIGRATIONS",
        "PostgresStore",
    },
    "ctxwarden.store.recall": {
        "MAX_RECALL_LINES",
        "Recalled",
        "checked_ref",
        "parse_line_range",
        "recall",
        "recall_text",
    },
    "ctxwarden.cli.store": {"register"},
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_exported_names(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    assert all(hasattr(mod, name) for name in mod.__all__)
