"""What a replay reads: recorded sessions and request logs, as ordered request streams.

Inputs (files, or directories searched for them, sorted by name):

- ``*.json`` / ``*.json.gz``: a session, an OpenAI Chat or an Anthropic Messages
  message list (the API judged from the file's shape by
  :func:`ctxwarden.io.session_api`, as ``condense`` judges a request; an Anthropic
  session's other request fields, ``system`` and ``tools`` among them, go with each of
  its requests). Every assistant message at index ``k`` yields the request
  ``messages[:k]`` and its real next action ``messages[k]``
  (:func:`ctxwarden.io.session_requests`). A session with no assistant turn is a
  session of no request, not an error (an agent may stop before its first answer; an
  evaluation over many sessions must not fail on it). A Responses-shaped file
  (``input``) is refused: a Responses session is given as a request log.
- ``*.jsonl`` / ``*.jsonl.gz``: one request per line as a proxy records it, any of
  the three APIs. A line is either the request itself or a record
  ``{"request": {...}, "api": ..., "session": ..., "ts": ..., "response": ...}``
  (all but ``request`` optional). Lines group into sessions by ``session`` (default:
  one session per file). ``api`` defaults to :func:`ctxwarden.io.guess_api`. The
  next action is ``response`` when recorded, else the assistant items the next
  request of the session added after this request's items. ``ts`` (epoch seconds, or an
  ISO 8601 time such as ``2024-05-01T10:00:00Z``) feeds the idle-gap cache expiry. A
  log of no request (an empty file) is unusable, as an empty session file is; a record
  whose ``request`` is no object, or a Chat or Messages request without ``messages``,
  and a ``ts`` that is neither a number nor an ISO 8601 time, are named by their line
  and JSON path.

An input that cannot be used raises :class:`~ctxwarden.errors.ReplayError` naming it
(the replay skips it and says so); a directory named that holds no input is an error
of the whole replay (:func:`expand_paths`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxwarden.adapters import ADAPTERS
from ctxwarden.errors import CtxwardenError, ReplayError
from ctxwarden.io import (
    fast_loads,
    guess_api,
    json_kind,
    load_session,
    read_bytes,
    session_requests,
)
from ctxwarden.replay.wire import MESSAGE_KEYS, item_role, items_of

__all__ = [
    "ReplayRequest",
    "ReplaySession",
    "expand_paths",
    "iter_sessions",
    "read_jsonl",
    "read_sessions",
]

_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz")


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One request of a session, with the real next action when known."""

    request: dict[str, Any]
    api: str
    next_action: Any = None
    ts: float | None = None


@dataclass(frozen=True, slots=True)
class ReplaySession:
    """An ordered stream of requests of one agent session."""

    id: str
    model: str | None
    requests: list[ReplayRequest] = field(default_factory=list)
    source: str = ""


def _is_input(path: Path) -> bool:
    """A file a directory's replay reads: named like a session or a request log, in
    any letter case, and no macOS resource fork (``._name.json.gz``, copied beside
    every file by an archive made on a Mac)."""
    name = path.name
    return name.lower().endswith(_SUFFIXES) and not name.startswith("._") and path.is_file()


def expand_paths(paths: Sequence[str | Path], duplicates: list[Path] | None = None) -> list[Path]:
    """Files named, plus session / log files found (recursively) in directories named,
    each file once: a file named twice, or named and found in a directory named, is
    kept where first met (paths compared resolved) and appended to ``duplicates``.
    A :class:`ReplayError` names a path that does not exist, or a directory that
    holds no such file (a replay of nothing is a mistake, not a table of dashes)."""
    out = _expanded(paths)
    seen: set[Path] = set()
    unique: list[Path] = []
    for path in out:
        real = path.resolve()
        if real in seen:
            if duplicates is not None:
                duplicates.append(path)
            continue
        seen.add(real)
        unique.append(path)
    return unique


def _walk(folder: Path) -> Iterator[Path]:
    """Every file under ``folder``, recursively (links to folders not followed); a
    :class:`ReplayError` names a folder that cannot be listed (``rglob`` skipped it
    without a word: a replay of part of a corpus passed for all of it)."""

    def unlisted(exc: OSError) -> None:
        raise ReplayError(f"{exc.filename}: cannot list this directory ({exc.strerror or exc})")

    for root, _, files in os.walk(folder, onerror=unlisted):
        for name in files:
            yield Path(root) / name


def _expanded(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(f for f in _walk(p) if _is_input(f))
            if not found:
                raise ReplayError(
                    f"{p}: no session or request log in this directory "
                    f"(files named *{', *'.join(_SUFFIXES)})"
                )
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ReplayError(f"{p}: no such file or directory")
    return out


def _from_session_file(path: Path) -> ReplaySession:
    session = load_session(path)
    requests = [
        ReplayRequest(request=req, api=session.api, next_action=nxt)
        for req, nxt in session_requests(session)
    ]
    return ReplaySession(session.id, session.model, requests, session.source)


def _ts(record: dict[str, Any], line: str) -> float | None:
    """The record's ``ts`` (else ``timestamp``) in epoch seconds: a number, or an ISO
    8601 string (``2024-05-01T10:00:00Z``; one without an offset is UTC); ``None``
    when it has none. Any other value is a :class:`ReplayError` at ``line`` (it was
    dropped without a word, and ``--idle-gap`` then said no request had one)."""
    key = "ts" if "ts" in record else "timestamp"
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
        raise ReplayError(
            f"{line}: /{key} {value[:40]!r} is not an ISO 8601 time (or a number of seconds)"
        )
    raise ReplayError(
        f"{line}: /{key} is {json_kind(value)}, not a number of seconds or an ISO 8601 time"
    )


def read_jsonl(path: Path) -> list[ReplaySession]:
    """The sessions of one JSONL request log (see module docstring)."""
    data = read_bytes(path)
    groups: dict[str, list[tuple[dict[str, Any], str, Any, float | None]]] = {}
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = fast_loads(line)
        except ValueError as exc:
            raise ReplayError(f"{path}:{n}: not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise ReplayError(f"{path}:{n}: a line must be a JSON object")
        request, where = record, ""
        if "request" in record:  # a record: its request must be one
            request, where = record["request"], "/request"
            if not isinstance(request, dict):
                raise ReplayError(
                    f"{path}:{n}: {where} is {json_kind(request)}, not a request object"
                )
        api = str(record.get("api") or guess_api(request))
        if api not in ADAPTERS:
            known = ", ".join(sorted(ADAPTERS))
            raise ReplayError(f"{path}:{n}: unknown api {api!r} (known: {known})")
        key = MESSAGE_KEYS.get(api, "messages")
        if key not in request and api != "openai.responses":  # Responses: input optional
            raise ReplayError(f"{path}:{n}: {where}/{key} is missing (an {api} request needs one)")
        session = str(record.get("session") or path.name)
        ts = _ts(record, f"{path}:{n}")
        groups.setdefault(session, []).append((request, api, record.get("response"), ts))
    sessions = []
    for sid, rows in groups.items():
        requests = []
        for i, (request, api, response, ts) in enumerate(rows):
            action = response
            if action is None and i + 1 < len(rows):
                action = _added_assistant_items(request, rows[i + 1][0], api) or None
            requests.append(ReplayRequest(request, api, action, ts))
        model = rows[0][0].get("model")
        sessions.append(
            ReplaySession(sid, model if isinstance(model, str) else None, requests, "jsonl")
        )
    if not sessions:  # as an empty session file is: nothing to replay is named
        raise ReplayError(f"{path}: no request (an empty request log)")
    return sessions


def _added_assistant_items(request: Any, following: Any, api: str) -> list[Any]:
    before = items_of(request, api)
    after = items_of(following, api)
    out = []
    for item in after[len(before) :]:
        if item_role(item) != "assistant":
            break
        out.append(item)
    return out


def read_sessions(path: Path) -> list[ReplaySession]:
    """The sessions of one input file (a session file holds one, a request log any
    number). Raises :class:`~ctxwarden.errors.ReplayError` naming the file (and the
    line or JSON path) when it cannot be read as one."""
    if path.name.lower().endswith((".jsonl", ".jsonl.gz")):
        return read_jsonl(path)
    try:
        return [_from_session_file(path)]
    except ReplayError:
        raise
    except CtxwardenError as exc:  # name the file among hundreds (once)
        message = str(exc)
        if not message.startswith(f"{path}: "):
            message = f"{path}: {message}"
        raise ReplayError(message) from exc


def iter_sessions(files: Sequence[Path]) -> Iterator[tuple[int, ReplaySession]]:
    """``(file index, session)`` for every session of every file, in order (a file is
    read when its turn comes; one that cannot be read raises, see
    :func:`read_sessions`)."""
    for index, path in enumerate(files):
        for session in read_sessions(path):
            yield index, session
