"""The one exception tree of ctxwarden.

Every error that leaves the package is a :class:`CtxwardenError`; foreign errors
(sqlite, redis, aiohttp, orjson) are translated where they enter and re-raised
``from`` the original::

    CtxwardenError
    ├── RequestError            a client request is not what its API expects
    │   └── MalformedRequest    (names the JSON path, e.g. ``/messages/3/tool_call_id``)
    ├── ConfigError             a configuration value is invalid (names the key)
    │   └── ConfigValueError    (config.py) a config model built directly; a ValueError too
    ├── StoreError              the artifact store failed or is unavailable
    │   ├── ArtifactMissing     a reference does not resolve
    │   └── ArtifactCorrupted   stored bytes no longer match their address
    ├── ValidationFailed        a rewritten request broke a safety invariant
    └── ReplayError             a session file cannot be replayed

A failed safety check (:class:`ValidationFailed`) is always handled by the engine:
the segment is rolled back or the whole request falls back to the original.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = [
    "ArtifactCorrupted",
    "ArtifactMissing",
    "ConfigError",
    "CtxwardenError",
    "EngineClosed",
    "MalformedRequest",
    "ReplayError",
    "RequestError",
    "StoreError",
    "ValidationFailed",
    "json_pointer",
    "reraise_fatal",
    "store_failure",
]


@functools.lru_cache(maxsize=131072)
def json_pointer(path: tuple[str | int, ...]) -> str:
    """Render a path as an RFC 6901 JSON pointer (``()`` is the document root ``""``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


class CtxwardenError(Exception):
    """Root of every error raised by ctxwarden."""


class RequestError(CtxwardenError):
    """A client request cannot be understood."""


class MalformedRequest(RequestError):
    """A request is not valid for its API; ``pointer`` names where (JSON pointer)."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        self.path = path
        self.pointer = json_pointer(path)
        self.reason = message
        super().__init__(f"{message} at {self.pointer or '/'}")


class ConfigError(CtxwardenError):
    """A configuration value is invalid; ``key`` names it (dotted path), ``source``
    the file it came from, when it came from one."""

    def __init__(self, message: str, key: str = "", source: str = "") -> None:
        self.key = key
        self.source = source
        self.reason = message
        where = ": ".join(w for w in (source, key) if w)
        super().__init__(f"{where}: {message}" if where else message)

    def in_file(self, source: str | Path) -> ConfigError:
        """This error, naming ``source`` as the file it came from (kept if set)."""
        if self.source:
            return self
        return ConfigError(self.reason, self.key, str(source))


class StoreError(CtxwardenError):
    """The artifact store failed or is unavailable."""


def reraise_fatal(exc: BaseException) -> None:
    """Raise ``exc`` again when it stops the program (Ctrl-C, exit); any other failure,
    a native library's panic included (``pyo3``'s ``PanicException`` derives from
    ``BaseException``), is the caller's to handle locally."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        raise exc


def store_failure(exc: StoreError) -> str:
    """What ``exc`` says failed, for logs and reports: its class and its message up to
    the first ``": "`` (the store's own words; the driver's text after them may hold a
    URL with its password)."""
    return f"{exc.__class__.__name__}: {str(exc).split(': ', 1)[0]}"


class ArtifactMissing(StoreError):
    """A reference does not resolve in the store (for this tenant)."""


class ArtifactCorrupted(StoreError):
    """Stored bytes do not hash to their address."""


class EngineClosed(CtxwardenError):
    """An engine was used after :meth:`~ctxwarden.Engine.close`."""


class ValidationFailed(CtxwardenError):
    """A rewritten request violates a safety invariant.

    ``scope`` is ``"segment"`` when rolling back one segment repairs it and
    ``"request"`` when only the original request is safe.
    """

    def __init__(self, message: str, scope: str = "request", segment: str = "") -> None:
        self.scope = scope
        self.segment = segment
        super().__init__(message)


class ReplayError(CtxwardenError):
    """A session file cannot be replayed."""
