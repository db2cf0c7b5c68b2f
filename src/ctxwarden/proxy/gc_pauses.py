"""Short full garbage collections for a long-running proxy.

The engine's memos keep tens of GC-tracked objects per history message of every live
session (parsed messages, segments, their tuples): about 576,000 objects for the 160
live sessions the memo budget is sized for. Each full (generation 2) collection walks
all of them while every thread waits: 0.2-0.45 s on two cores, growing with the
working set (``benchmarks/gc_pauses.py``). The memos hold no reference cycles, so a
full collection frees none of them.

:func:`freeze_after_full_collections` moves what survives each full collection into
the permanent generation (:func:`gc.freeze`), which later collections skip: a full
collection then walks only what became long-lived since the last one (longest pause
403 -> 36 ms on 160 corpus sessions). Objects in the permanent generation are still
freed as soon as nothing refers to them (reference counting); only a reference cycle
among them that became garbage would wait. So every ``unfreeze_every``-th full
collection first returns them (:func:`gc.unfreeze`) and walks everything once, as
without the hook.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

__all__ = ["freeze_after_full_collections"]

_OLDEST = 2


def freeze_after_full_collections(unfreeze_every: int = 16) -> Callable[[], None]:
    """Install the hook (see the module docstring) and return the call that removes
    it and returns every frozen object to the collector. ``unfreeze_every`` >= 1: one
    full collection in that many walks everything (1: every one, as without the
    hook)."""
    if unfreeze_every < 1:
        raise ValueError(f"unfreeze_every must be >= 1, got {unfreeze_every}")
    full_collections = 0

    def hook(phase: str, info: dict[str, Any]) -> None:
        nonlocal full_collections
        if info.get("generation") != _OLDEST:
            return
        if phase == "start":
            full_collections += 1
            if full_collections % unfreeze_every == 0:
                gc.unfreeze()  # this collection walks everything, cycles included
        elif phase == "stop":
            gc.freeze()

    gc.callbacks.append(hook)

    def remove() -> None:
        if hook in gc.callbacks:
            gc.callbacks.remove(hook)
        gc.unfreeze()

    return remove
