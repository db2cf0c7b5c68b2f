"""A gate on ``engine.condense``: tests hold the engine thread inside a condense, so
every ordering between the client's exchange and the engine is deterministic."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.proxy.conftest import Proxy

__all__ = ["GATE_SECONDS", "Gate", "entered"]

GATE_SECONDS = 10.0


class Gate:
    """Holds every ``engine.condense`` call until :meth:`open` (at most
    :data:`GATE_SECONDS`, so a failing test cannot hang the engine thread). Tests add
    each gate to the ``opened`` fixture's list, which opens it at teardown."""

    def __init__(self, proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
        self._event = threading.Event()
        self.entered = threading.Event()
        self.calls = 0
        condense = proxy.engine.condense

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.entered.set()
            self._event.wait(GATE_SECONDS)
            return condense(*args, **kwargs)

        monkeypatch.setattr(proxy.engine, "condense", gated)

    def open(self) -> None:
        self._event.set()


async def entered(gate: Gate) -> None:
    """Wait (off-loop) until the engine thread is inside the gated condense."""
    assert await asyncio.to_thread(gate.entered.wait, GATE_SECONDS)
