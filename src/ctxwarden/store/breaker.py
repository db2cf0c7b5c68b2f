"""Fail fast while a store's server is down (or its SQLite file is locked).

A server that stops answering (down, unreachable, its packets dropped) makes every call
wait the store's timeout before it fails: the engine would spend that on each request
(the proxy then sends requests uncondensed, but its engine thread stays busy), and on
each of the several store calls of one condense. So does a SQLite file whose write lock
another process holds (each write waits the busy timeout). After a call fails that way,
the :class:`Breaker` fails every call at once for ``cooldown`` seconds; the first call
after that is tried again, and a failure opens the breaker for another ``cooldown``. A
call that fails on a live server or a usable file (a missing or damaged artifact, a
query or constraint error) does not open it. ``cooldown`` 0: every call is tried (a
store made directly; :func:`~ctxwarden.store.open_store` gives the configured
``store.breaker_seconds``, 10 s by default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ctxwarden.errors import StoreError

__all__ = ["Breaker"]


class Breaker:
    """One per store; safe to use from several threads."""

    def __init__(
        self,
        backend: str,
        cooldown: float,
        is_outage: Callable[[BaseException], bool],
        clock: Callable[[], float] = time.monotonic,
        *,
        outage: str = "the server did not answer a call",
    ) -> None:
        """``is_outage(cause)``: whether a driver error (the translated
        :class:`StoreError`'s cause) means the server did not answer (or the file could
        not be used); ``outage`` says so in the error of a call failed at once."""
        self.backend = backend
        self.outage = outage
        self.cooldown = cooldown
        self._is_outage = is_outage
        self._clock = clock
        self._open_until = 0.0
        self._lock = threading.Lock()

    @contextmanager
    def guard(self, action: str) -> Iterator[None]:
        """Run the body unless the breaker is open (then a :class:`StoreError` that
        names ``action``, at once); a :class:`StoreError` of the body caused by an
        outage opens it."""
        with self._lock:
            until = self._open_until
        if until and self._clock() < until:
            raise StoreError(
                f"{self.backend} store failed to {action}: {self.outage} in the last "
                f"{self.cooldown:g} s (not tried again yet)"
            )
        try:
            yield
        except StoreError as exc:
            cause = exc.__cause__
            if self.cooldown > 0 and cause is not None and self._is_outage(cause):
                with self._lock:
                    self._open_until = self._clock() + self.cooldown
            raise
