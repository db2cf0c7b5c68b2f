"""The proxy's one engine thread, with a lane for work that can wait.

Every condense runs on one thread (an engine condenses one request at a time, and it
is CPU work under the GIL anyway). :class:`EngineThread` is that thread as an
:class:`~concurrent.futures.Executor`. Jobs queue in one of two lanes, each first in,
first out; the thread takes the oldest *foreground* job whenever there is one, and a
*background* job only when no foreground job waits. A job that has started runs to its
end (a thread cannot be interrupted), so a background job under way still delays a
foreground one by what is left of it.

- ``submit``: foreground.
- ``background.submit``: background.
- ``in_order.submit``: foreground, behind every background job queued so far (they
  move to the foreground lane first), for a job that may belong to the same session as
  one of them: a session's requests never overtake one another.

The background lane is for the condenses of sessions outside the canary: telemetry
only, relayed before they are condensed, so that they do not delay requests whose
clients wait for their condense (see :func:`ctxwarden.proxy.sides.lane`).

A job cancelled while it waits leaves its lane at once (with what it holds, a parsed
request body among it). The thread is a daemon: the app shuts it down (and joins it)
at cleanup; an executor never shut down keeps its idle thread until the process ends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["EngineThread"]

T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class EngineThread(Executor):
    """One worker thread, two FIFO lanes (see module doc); ``submit`` is the
    foreground lane, :attr:`background` the other. The thread starts with the first
    job and ends at :meth:`shutdown`."""

    def __init__(self, name: str = "ctxwarden-engine") -> None:
        self._name = name
        self._ready = threading.Condition()
        self._lanes: tuple[deque[_Job], deque[_Job]] = (deque(), deque())
        self._closed = False
        self._thread: threading.Thread | None = None
        self.background: Executor = _Lane(self, 1)
        """Jobs that run only while no foreground job waits."""
        self.in_order: Executor = _Lane(self, 0, behind_background=True)
        """Foreground jobs queued behind every background job queued before them."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)`` in the foreground lane."""
        return self._queue(0, fn, args, kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new jobs; with ``cancel_futures`` cancel the queued ones (else they
        still run); with ``wait`` return once the thread has ended."""
        with self._ready:
            self._closed = True
            if cancel_futures:
                for lane in self._lanes:
                    while lane:
                        lane.popleft()[0].cancel()
            self._ready.notify_all()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def queued(self) -> tuple[int, int]:
        """How many jobs wait in the foreground and the background lane."""
        with self._ready:
            return len(self._lanes[0]), len(self._lanes[1])

    def _queue(
        self,
        lane: int,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        behind_background: bool = False,
    ) -> Future[T]:
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if behind_background:
                self._lanes[0].extend(self._lanes[1])
                self._lanes[1].clear()
            self._lanes[lane].append((future, fn, args, kwargs))
            if self._thread is None:
                thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                try:
                    thread.start()
                except BaseException:  # no thread: the next job tries again
                    self._lanes[lane].pop()
                    raise
                self._thread = thread
            self._ready.notify()
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: Future[Any]) -> None:
        """A job cancelled while it waited leaves its lane (and what it holds)."""
        if not future.cancelled():
            return
        with self._ready:
            for lane in self._lanes:
                for i, job in enumerate(lane):
                    if job[0] is future:
                        del lane[i]
                        return

    def _next(self) -> _Job | None:
        """The next job to run (foreground first), or ``None`` once shut down and empty."""
        with self._ready:
            while True:
                for lane in self._lanes:
                    if lane:
                        return lane.popleft()
                if self._closed:
                    return None
                self._ready.wait()

    def _work(self) -> None:
        while (job := self._next()) is not None:
            _run(job)
            del job  # nothing of a finished job stays alive while the thread waits


def _run(job: _Job) -> None:
    future, fn, args, kwargs = job
    if not future.set_running_or_notify_cancel():
        return  # cancelled while it waited
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # handed to the waiter, as an executor does
        future.set_exception(exc)
    else:
        future.set_result(result)


class _Lane(Executor):
    """A way into an :class:`EngineThread`'s lanes, as an executor of its own."""

    def __init__(self, thread: EngineThread, lane: int, *, behind_background: bool = False):
        self._thread = thread
        self._lane = lane
        self._behind = behind_background

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._thread._queue(self._lane, fn, args, kwargs, behind_background=self._behind)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._thread.shutdown(wait, cancel_futures=cancel_futures)
