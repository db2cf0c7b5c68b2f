"""A bounded wait for the engine thread.

One engine thread condenses every request (:mod:`.engine_thread`). When it falls behind (a
burst, a pathological request that takes long to condense), every request queued
behind it would wait. :func:`run_within` bounds that wait: a job that has not
*started* within ``limit`` seconds is dropped (it never runs; the caller sends the
request uncondensed, an agent's still with the recall tool, as any request the engine
left unchanged). A job that has started is awaited to its end, since its condense is
already under way and its session state is written by it.

A dropped request leaves its session's state as it was (its cost is missing from the
session's ledger). Sent without the session's frozen replacements, it pays one
prompt-cache rewrite from the first of them; the next request, planned as if it had
not been seen, applies them again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["run_within"]

T = TypeVar("T")


class _Slot:
    """A queued job's fate, settled once under a lock: it starts or it is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "queued"

    def start(self) -> bool:
        """On the engine thread: True if the job may run (it was not dropped)."""
        with self._lock:
            if self._state == "dropped":
                return False
            self._state = "running"
            return True

    def drop(self) -> bool:
        """On the event loop: True if the job will never run (it had not started)."""
        with self._lock:
            if self._state == "running":
                return False
            self._state = "dropped"
            return True


async def run_within(
    executor: Executor, limit: float, fn: Callable[..., T], *args: object
) -> tuple[bool, T | None]:
    """Run ``fn(*args)`` on ``executor``: ``(True, result)``, or ``(False, None)`` when
    it had not started within ``limit`` seconds (0: no limit) and never will.

    Exceptions of ``fn`` propagate as from ``run_in_executor``. Cancelling the caller
    while the job waits drops it (and cancels its executor future, so an executor that
    purges cancelled jobs lets go of its arguments); once it runs, it runs to its end (the executor
    cannot stop a thread) and its result is discarded."""
    slot = _Slot()

    def job() -> tuple[bool, T | None]:
        if not slot.start():
            return False, None
        return True, fn(*args)

    future = asyncio.get_running_loop().run_in_executor(executor, job)
    # a caller cancelled while the job ran leaves its outcome unread: read it here, so
    # that asyncio does not log "exception was never retrieved" for it
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    if not limit:
        return await future
    try:
        return await asyncio.wait_for(asyncio.shield(future), limit)
    except TimeoutError:
        if slot.drop():
            future.cancel()  # it leaves the executor's queue, and what it holds with it
            return False, None
        return await future  # started in the meantime: its condense is under way
    except asyncio.CancelledError:
        if slot.drop():
            future.cancel()
        raise
