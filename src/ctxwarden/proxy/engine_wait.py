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
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

__all__ = ["run_within"]

T = TypeVar("T")


async def run_within(
    executor: Executor, limit: float, fn: Callable[..., T], *args: object
) -> tuple[bool, T | None]:
    """Run ``fn(*args)`` on ``executor``: ``(True, result)``, or ``(False, None)`` when
    it had not started within ``limit`` seconds (0: no limit) and never will.

    Exceptions of ``fn`` propagate as from ``run_in_executor``. Whether a job starts or
    is dropped is settled once by its executor future: cancelling it succeeds only
    while it waits, and an executor's thread starts a job only if it was not cancelled
    (an executor that purges cancelled jobs lets go of their arguments at once).
    Cancelling the caller while the job waits drops it; once it runs, it runs to its
    end (the executor cannot stop a thread) and its result is discarded."""
    job = executor.submit(fn, *args)
    future = asyncio.wrap_future(job)
    # a caller cancelled while the job ran leaves its outcome unread: read it here, so
    # that asyncio does not log "exception was never retrieved" for it
    future.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        if not limit:
            return True, await future
        return True, await asyncio.wait_for(asyncio.shield(future), limit)
    except TimeoutError:
        if job.cancel():
            return False, None
        return True, await future  # started in the meantime: its condense is under way
    except asyncio.CancelledError:
        job.cancel()
        raise
