"""``store.timeout_seconds`` reaches the server backends: a silent server fails the
call after about that long (the store's default is 5 s; a config could not change it)."""

from __future__ import annotations

import pytest

from ctxwarden.config import StoreConfig
from ctxwarden.errors import StoreError
from ctxwarden.store import open_store
from tests.store.stall import bounded, silent_server


@pytest.mark.parametrize(
    ("backend", "scheme"), [("postgres", "postgresql://u@"), ("redis", "redis://")]
)
def test_the_configured_timeout_bounds_a_silent_server(backend: str, scheme: str) -> None:
    pytest.importorskip("psycopg" if backend == "postgres" else "redis")
    with silent_server() as port:
        config = StoreConfig(backend=backend, url=f"{scheme}127.0.0.1:{port}/0", timeout_seconds=1)
        taken, error, _ = bounded(lambda: open_store(config), 20)
    assert isinstance(error, StoreError)
    assert taken < 4  # the default of 5 s would take longer (libpq counts at least 2)
