"""Short full garbage collections for a long-running proxy.

The engine's memos keep tens of GC-tracked objects per history message of every live
session (parsed messages, segments, their tuples): about 600,000 objects for the 160
live sessions the memo budget is sized for. Each full (generation 2) collection walks
all of them while every thread waits: 0.2-0.45 s on two cores, growing with the
working set (``benchmarks/gc_pauses.py``). The memos hold no reference cycles, so a
full collection frees none of them.

:func:`freeze_after_full_collections` moves what survives each full collection into
the permanent generation (:func:`gc.freeze`), which later collections skip: a full
collection then walks only what became long-lived since the last one. Objects in the
permanent generation are still freed as soon as nothing refers to them (reference
counting); only a reference cycle among them that became garbage would wait. So the
first full collection after ``walk_all_every`` seconds since the last whole walk
returns them (:func:`gc.unfreeze`) and walks everything, as without the hook: one
long pause an hour (by default) instead of one per full collection.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["freeze_after_full_collections"]

_OLDEST = 2


def freeze_after_full_collections(
    walk_all_every: float = 3600.0, clock: Callable[[], float] = time.monotonic
) -> Callable[[], None]:
    """Install the hook (see the module docstring) and return the call that removes
    it and returns every frozen object to the collector. ``walk_all_every`` > 0: the
    seconds after which a full collection walks everything again (``clock`` reads
    them)."""
    if not walk_all_every > 0:
        raise ValueError(f"walk_all_every must be > 0 seconds, got {walk_all_every}")
    last_whole_walk = clock()

    def hook(phase: str, info: dict[str, Any]) -> None:
        nonlocal last_whole_walk
        if info.get("generation") != _OLDEST:
            return
        if phase == "start":
            now = clock()
            if now - last_whole_walk >= walk_all_every:
                last_whole_walk = now
                gc.unfreeze()  # this collection walks everything, cycles included
        elif phase == "stop":
            gc.freeze()

    gc.callbacks.append(hook)

    def remove() -> None:
        if hook in gc.callbacks:
            gc.callbacks.remove(hook)
        gc.unfreeze()

    return remove
