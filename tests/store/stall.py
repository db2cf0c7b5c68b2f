"""Helpers of the stall tests: a TCP server that accepts and never answers, a process
stopped for the length of a block, and a call bounded by a thread join."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def silent_server() -> Iterator[int]:
    """A loopback port whose server accepts connections and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for conn in held:
            conn.close()


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` stopped (SIGSTOP) inside the block, continued after it; skips when this
    process may not signal it."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip(f"cannot stop process {pid} (another user's)")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def bounded(call: Callable[[], Any], limit: float) -> tuple[float, BaseException | None, Any]:
    """``call()`` in a thread: ``(seconds taken, exception, result)``; fails the test
    when it has not returned after ``limit`` seconds (a hang, not a slow answer)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    taken = time.monotonic() - started
    if thread.is_alive():
        pytest.fail(f"the call still waits after {limit} s (hung)")
    return taken, box.get("error"), box.get("result")
