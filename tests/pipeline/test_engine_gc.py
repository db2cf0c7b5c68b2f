"""An engine collects its store on a schedule of its own (``store.gc_interval_seconds``):
library and command-line users get the byte cap and the TTL held without running
``ctxwarden store gc`` (before, only the proxy ever collected)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.errors import ArtifactMissing
from ctxwarden.store import SqliteStore
from tests.passes.convo import FORCE, call, lines_of, request, result


def _wire(i: int) -> dict[str, Any]:
    messages = []
    for k in range(4):
        messages += [
            call(f"c{i}_{k}", f"cat f{i}_{k}"),
            result(f"c{i}_{k}", lines_of(f"s{i}{k}", 40)),  # under the cap alone
        ]
    return request(*messages)


def _engine(tmp_path: Path, interval: float, max_bytes: int = 4_000) -> Engine:
    config = EngineConfig(
        pipeline=FORCE,
        data_dir=str(tmp_path),
        store={"max_bytes": max_bytes, "gc_interval_seconds": interval},
    )
    return Engine(config)


def _stored_bytes(path: Path) -> int:
    store = SqliteStore(path / "store.sqlite3")
    try:
        return store.stats()["bytes"]
    finally:
        store.close()


def test_a_due_collection_holds_the_byte_cap(tmp_path: Path) -> None:
    engine = _engine(tmp_path, interval=0.05)
    for i in range(6):
        engine.condense(_wire(i), session=f"s{i}")
        time.sleep(0.06)  # each condense finds a collection due
    engine.close()  # waits for a collection under way
    assert _stored_bytes(tmp_path) <= 4_000


def test_no_collection_when_off(tmp_path: Path) -> None:
    engine = _engine(tmp_path, interval=0)
    for i in range(6):
        engine.condense(_wire(i), session=f"s{i}")
    engine.close()
    assert _stored_bytes(tmp_path) > 4_000  # what an engine that never collects keeps


def test_one_collection_at_a_time_and_close_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path, interval=0.01)
    engine.condense(_wire(0), session="s")
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow_gc() -> int:
        calls.append(1)
        started.set()
        release.wait(5)
        return 0

    monkeypatch.setattr(engine.store, "gc", slow_gc)
    time.sleep(0.02)
    engine.condense(_wire(1), session="s")
    assert started.wait(5)
    time.sleep(0.02)
    engine.condense(_wire(2), session="s")  # due again, but one is still running
    assert calls == [1]
    closer = threading.Thread(target=engine.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # close waits for the collection
    release.set()
    closer.join(5)
    assert not closer.is_alive()


def test_acondense_collects_too(tmp_path: Path) -> None:
    async def run() -> None:
        engine = _engine(tmp_path, interval=0.05)
        for i in range(6):
            await engine.acondense(_wire(i), session=f"s{i}")
            await asyncio.sleep(0.06)
        engine.close()

    asyncio.run(run())
    assert _stored_bytes(tmp_path) <= 4_000


def test_the_memory_store_is_safe_beside_its_collection() -> None:
    """Reads, writes and gc on several threads at once: the bytes it counts stay the
    sum of what it holds (unlocked, a get revived what gc dropped, and gc then failed
    with KeyError on every round)."""
    from ctxwarden.store import MemoryStore

    store = MemoryStore(max_bytes=20_000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        refs: list[str] = []
        k = 0
        while not stop.is_set():
            k += 1
            try:
                refs.append(store.put("t", f"{seed}-{k} " * 50))
                for ref in refs[-5:]:
                    with contextlib.suppress(ArtifactMissing):
                        store.get("t", ref)
                store.gc()
            except BaseException as exc:  # any failure is the finding
                errors.append(exc)
                return

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.stats()["bytes"] == sum(store._sizes.values())
