"""Reading requests and sessions from files (plain or gzip JSON, or ``-`` for stdin)."""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import math
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.errors import MalformedRequest, ReplayError

__all__ = [
    "Session",
    "anthropic_evidence",
    "bundled_sessions",
    "check_api",
    "dump_json",
    "fast_loads",
    "guess_api",
    "json_kind",
    "load_json",
    "load_request",
    "load_session",
    "may_hold_wide_integer",
    "output_plan",
    "parse_json",
    "session_api",
    "session_requests",
    "write_atomically",
]


def write_atomically(path: str | Path, data: bytes) -> None:
    """Write ``data`` into what ``path`` names, the way :func:`output_plan` decides:

    - ``"replace"``: a regular file (or a new one), the final target of any symlinks
      (the link stays a link), whole or not at all: into a temporary file beside it,
      then renamed onto it, so a write that fails midway (a full disk) leaves an
      existing file as it was; it keeps its mode, and its owner where the user may
      give it (root; a new file gets what ``open()`` would give it);
    - ``"in place"``: a writable regular file in a folder that takes no new file is
      opened and written (not atomically);
    - ``"direct"``: anything else that exists (a device such as ``/dev/null``, a FIFO
      such as ``>(jq .)``, what ``/dev/stdout`` names) is opened to append and
      written, never replaced (a file a shell opened with ``>>`` keeps what it had).

    Raises :class:`OSError` (``IsADirectoryError`` for a folder, or a path ending
    with ``/``)."""
    how, target = output_plan(path)
    own = _own_descriptor(str(target)) if how == "direct" else None
    if own is not None:  # this process's descriptor: written through it, at its offset
        _write_descriptor(own, data)
        return
    if how != "replace":  # direct: appended, so a shell's ``>>`` keeps what was there
        with open(target, "ab" if how == "direct" else "wb") as out:
            out.write(data)
        return
    try:
        found: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        found = None
    if found is not None:
        mode = stat.S_IMODE(found.st_mode)  # an existing file keeps its mode
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new one gets what open() would give it
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        if found is not None and (found.st_uid, found.st_gid) != (os.geteuid(), os.getegid()):
            with contextlib.suppress(OSError):  # and its owner, where we may give it (root)
                os.chown(temporary, found.st_uid, found.st_gid)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def output_plan(path: str | Path) -> tuple[str, Path]:
    """How :func:`write_atomically` writes ``path``, decided without writing anything:
    ``("direct", path)`` for what exists and is no regular file (checked with
    :func:`os.access`, not opened: a FIFO with no reader would block), or a regular
    file reached through an open descriptor (``/dev/stdout``, ``/dev/fd/N``: the
    shell's redirect keeps writing to that very file); ``("replace", target)`` for a regular
    file or a new one (``target``: ``path`` with its symlinks resolved) in a folder
    that takes a new file (tried with a probe file, removed at once: permission bits
    say nothing for root or on a read-only file system); ``("in place", target)``
    for an existing regular file whose folder does not (the file itself is opened to
    append, nothing written, to check it is writable).

    Raises :class:`OSError`: ``IsADirectoryError`` for a folder or a path ending with
    ``/`` (a folder meant), ``FileNotFoundError`` (its ``filename`` the folder) when
    the folder is missing, or the error of the file or folder that cannot be
    written."""
    text = os.fspath(path)
    if text.endswith(("/", os.sep)):
        raise IsADirectoryError(errno.EISDIR, "names a directory (it ends with /)", text)
    try:
        found: os.stat_result | None = os.stat(text)
    except FileNotFoundError:
        found = None
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), text)
    if found is not None and not stat.S_ISREG(found.st_mode):
        if not os.access(text, os.W_OK):  # not opened: a FIFO with no reader would block
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), text)
        return "direct", Path(text)
    if found is not None and _through_descriptor(text):
        with open(text, "ab"):  # opened to append, nothing written
            pass
        return "direct", Path(text)
    target = Path(os.path.realpath(text))
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(target.parent))
    try:
        handle, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except PermissionError:
        if found is None:  # a new file cannot be made there at all
            raise
        with open(target, "ab"):  # the file itself may still be written
            pass
        return "in place", target
    os.close(handle)
    os.unlink(probe)
    return "replace", target


_DESCRIPTORS = re.compile(r"/proc/[^/]+/fd")


def _through_descriptor(path: str) -> bool:
    """Whether ``path`` or a symlink on its way is an entry of a ``/proc/<pid>/fd``
    folder (``/dev/stdout`` and ``/dev/fd/N`` lead there): it names a descriptor a
    process holds open, not just a file."""
    return _descriptor_entry(path) is not None


def _descriptor_entry(path: str) -> tuple[str, str] | None:
    """The ``/proc/<pid>/fd`` folder and the entry in it that ``path`` or a symlink on
    its way is, else ``None``."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        folder = os.path.realpath(os.path.dirname(current))
        if _DESCRIPTORS.fullmatch(folder):
            return folder, os.path.basename(current)
        entry = os.path.join(folder, os.path.basename(current))
        if not os.path.islink(entry):
            return None
        current = os.path.normpath(os.path.join(folder, os.readlink(entry)))
    return None


def _own_descriptor(path: str) -> int | None:
    """The descriptor number when ``path`` names one this process holds open
    (``/dev/stdout`` is 1): written through it, a report shares the descriptor's
    offset with what the process prints there (opened anew, a regular file behind
    ``> out`` got a second offset, and the table printed later overwrote the report)."""
    found = _descriptor_entry(path)
    if found is None:
        return None
    folder, entry = found
    if folder != f"/proc/{os.getpid()}/fd" or not entry.isdigit():
        return None
    return int(entry)


def _write_descriptor(fd: int, data: bytes) -> None:
    """Write all of ``data`` to descriptor ``fd``, after what Python's own standard
    streams hold (flushed first, so the order on the descriptor is the order of the
    calls)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_bytes(source: str | Path) -> bytes:
    """A file's bytes (``-``: standard input), gunzipped when they are gzip data, without
    a leading UTF-8 byte-order mark (editors on Windows write one; JSON has none); a
    missing, unreadable or broken file is a :class:`ReplayError` naming it."""
    if str(source) == "-":
        return _without_bom(_gunzipped(sys.stdin.buffer.read(), "<stdin>"))
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except OSError as exc:
        raise ReplayError(f"{path}: {exc.strerror}") from exc
    return _without_bom(_gunzipped(data, str(path)))


def _gunzipped(data: bytes, name: str) -> bytes:
    """``data`` decompressed when it starts with the gzip magic (a file or a pipe: the
    same bytes whatever their name); a :class:`ReplayError` naming ``name`` when the
    gzip data is broken."""
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise ReplayError(f"{name}: broken gzip data ({exc})") from exc


def _without_bom(data: bytes) -> bytes:
    return data[3:] if data.startswith(b"\xef\xbb\xbf") else data


_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
_LONG_DIGITS = b"0" * 19


def may_hold_wide_integer(data: bytes) -> bool:
    """Whether JSON ``data`` has 19 digits in a row: the only way an integer past 64
    bits, which orjson reads as a float, can appear. Found with every digit made
    ``0`` (a tenth of a millisecond for 165 KB, where a regex takes 1.6 ms); only then
    need ``data`` be read again by the stdlib, which keeps integers exact."""
    return _LONG_DIGITS in data.translate(_DIGITS_AS_ZERO)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _stdlib_loads(data: bytes) -> Any:
    """``data`` read by Python's ``json`` (exact integers, lone surrogate escapes);
    NaN, Infinity and numbers past the double range are refused as orjson does."""
    return json.loads(
        data.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_finite_float
    )


def _fallback_loads(data: bytes, error: orjson.JSONDecodeError) -> Any:
    """``data`` that orjson refused (``error``), read by Python's ``json`` when it is
    valid JSON after all; else ``error``, or for bytes that are not UTF-8 a
    ``ValueError`` naming the offset of the first invalid one (orjson reports those
    at char 0 as "surrogates not allowed")."""
    try:
        return _stdlib_loads(data)
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid UTF-8 at byte {exc.start}") from None
    except (ValueError, RecursionError):
        raise error from None


def parse_json(data: bytes) -> Any:
    """JSON bytes as sent: orjson reads them, unless it would change a value (an
    integer past 64 bits becomes a float) or refuses valid JSON (a lone surrogate
    escape); then Python's ``json`` does. Raises ``ValueError`` for invalid JSON
    (orjson's message; ``invalid UTF-8 at byte N`` for bytes that are not UTF-8).
    Write the value back with :func:`dump_json`."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _fallback_loads(data, exc)
    if may_hold_wide_integer(data):
        try:
            return _stdlib_loads(data)
        except (ValueError, RecursionError):  # deeper than the stdlib reads
            return value
    return value


def dump_json(obj: Any, *, indent: bool = False) -> bytes:
    """``obj`` as JSON bytes (UTF-8), exact for whatever :func:`parse_json` read:
    orjson writes it, or Python's ``json`` where orjson cannot (an integer past 64
    bits, a lone surrogate, which is then written as a ``\\u`` escape)."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else 0)
    except orjson.JSONEncodeError:
        pass
    options: dict[str, Any] = {
        "indent": 2 if indent else None,
        "separators": (",", ": ") if indent else (",", ":"),
        "allow_nan": False,
    }
    try:
        return json.dumps(obj, ensure_ascii=False, **options).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only an escape can carry it
        return json.dumps(obj, ensure_ascii=True, **options).encode("ascii")


def load_json(source: str | Path, *, exact: bool = False) -> Any:
    """Parse a JSON file; invalid JSON is a :class:`MalformedRequest` at the root
    naming the file (``<stdin>`` for ``-``).

    ``exact``: read it with :func:`parse_json`, keeping every value as sent (a
    request that is printed back); otherwise with orjson (faster; an integer past 64
    bits becomes a float), or Python's ``json`` where orjson refuses valid JSON (a lone
    surrogate escape)."""
    data = read_bytes(source)
    try:
        return parse_json(data) if exact else fast_loads(data)
    except ValueError as exc:
        name = "<stdin>" if str(source) == "-" else source
        raise MalformedRequest(f"{name}: not JSON ({exc})", ()) from None


def fast_loads(data: bytes) -> Any:
    """JSON ``data`` read by orjson, or by Python's ``json`` where orjson refuses valid
    JSON (a lone surrogate escape); ``ValueError`` (orjson's, or ``invalid UTF-8 at
    byte N``) when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _fallback_loads(data, exc)


def guess_api(request: Any) -> str:
    """Best guess of a request's API from its shape (default ``openai.chat``): ``input``,
    ``instructions`` or ``previous_response_id`` is Responses; Anthropic evidence (see
    :func:`anthropic_evidence`) is Messages."""
    if not isinstance(request, Mapping):
        return "openai.chat"
    if "input" in request or "instructions" in request or "previous_response_id" in request:
        return "openai.responses"
    if anthropic_evidence(request) is not None:
        return "anthropic.messages"
    return "openai.chat"


_ANTHROPIC_BLOCKS = frozenset(("tool_use", "tool_result", "thinking", "redacted_thinking"))

_API_NAMES = {
    "openai.chat": "an OpenAI Chat",
    "openai.responses": "a Responses",
    "anthropic.messages": "an Anthropic Messages",
}


def anthropic_evidence(request: Mapping[str, Any]) -> tuple[str | int, ...] | None:
    """The JSON path of the first thing in ``request`` that only an Anthropic Messages
    body has: a top-level ``system``, or a content block typed ``tool_use``,
    ``tool_result``, ``thinking`` or ``redacted_thinking`` (its ``type``); ``None``
    when there is none."""
    if "system" in request:
        return ("system",)
    messages = request.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind in _ANTHROPIC_BLOCKS:
                return ("messages", i, "content", j, "type")
    return None


def check_api(request: Any, api: str) -> None:
    """Raise :class:`MalformedRequest` at the JSON path of the evidence when
    ``request`` plainly belongs to another API than ``api`` (a caller's explicit
    choice, e.g. ``--api``): a Responses body has ``input``, not ``messages``; a Chat
    or Responses body has no top-level ``system`` and no Anthropic content block
    (:func:`anthropic_evidence`); a Messages body has no ``tool``, ``developer`` or
    ``function`` role and no ``tool_calls`` (a ``system`` message is a Messages one
    too: anthropic's ``SystemMessageParam``). Any body the API's own SDK types allow
    passes. The engine itself reads what it can of any body."""
    if not isinstance(request, dict):
        return
    name = _API_NAMES.get(api, f"a {api}")
    has_messages, has_input = "messages" in request, "input" in request
    if api == "openai.responses" and has_messages and not has_input:
        raise MalformedRequest(
            "messages is not a Responses field (that is input): openai.chat or anthropic.messages?",
            ("messages",),
        )
    if api != "openai.responses" and has_input and not has_messages:
        raise MalformedRequest(
            f"input is not {name} field (that is messages): openai.responses?", ("input",)
        )
    if api != "anthropic.messages":
        where = anthropic_evidence(request)
        if where == ("system",):
            raise MalformedRequest(
                f"a top-level system is not {name} field (Anthropic Messages has one): "
                "anthropic.messages?",
                where,
            )
        if where is not None:
            kind = request["messages"][where[1]]["content"][where[3]]["type"]
            raise MalformedRequest(
                f"a {kind} block is not {name} content part (an Anthropic Messages "
                "block): anthropic.messages?",
                where,
            )
        return
    messages = request.get("messages")
    if not isinstance(messages, list):
        return
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") in ("tool", "developer", "function"):  # "system" is one
            raise MalformedRequest(
                f"role {message['role']!r} is not an Anthropic Messages role (openai.chat?)",
                ("messages", i, "role"),
            )
        if "tool_calls" in message:
            raise MalformedRequest(
                "tool_calls is not an Anthropic Messages field (openai.chat?)",
                ("messages", i, "tool_calls"),
            )


@dataclass(frozen=True, slots=True)
class Session:
    """A recorded agent session: a message list, the API it speaks and where it came
    from. ``api`` is ``openai.chat``, or ``anthropic.messages`` when the file shows
    Anthropic evidence (:func:`session_api`); ``header`` is then every request field of
    the file (``system``, ``tools``, ``max_tokens`` ...), the session's own keys
    (:data:`SESSION_KEYS`) left out."""

    id: str
    model: str | None
    messages: list[dict[str, Any]]
    tools: list[Any] | None = None
    source: str = ""
    api: str = "openai.chat"
    header: dict[str, Any] | None = None


SESSION_KEYS = frozenset(("id", "source", "agent", "license", "meta", "messages"))
"""Keys of a session file that describe the recording, not a request."""


def session_api(obj: Any) -> str:
    """The API a session file (an object, or a bare message list) speaks, judged by
    :func:`guess_api`, the evidence ``condense`` uses for a request: ``input``,
    ``instructions`` or ``previous_response_id`` is Responses, a top-level ``system``
    or an Anthropic content block is Anthropic Messages, anything else OpenAI Chat."""
    return guess_api({"messages": obj} if isinstance(obj, list) else obj)


_RESPONSES_SESSION = (
    "a Responses session must be given as a .jsonl request log, one request per line"
)


def _is_session(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("messages"), list)
        and ("source" in obj or "agent" in obj or "meta" in obj)
    )


def load_session(source: str | Path) -> Session:
    """A session file (``{id, model, messages, ...}`` or a bare message list: a
    non-empty list of message objects), OpenAI Chat or Anthropic Messages
    (:func:`session_api`). Anything else, a Responses-shaped file included, is a
    :class:`ReplayError` naming the file (:class:`MalformedRequest` when it is not
    JSON)."""
    return _session_of(load_json(source), source)


def _session_of(obj: Any, source: str | Path) -> Session:
    if isinstance(obj, list):
        if not obj:
            raise ReplayError(f"{source}: not a session (an empty list, no messages)")
        _check_messages(obj, source, "")
        return Session(id=Path(str(source)).name, model=None, messages=obj, api=session_api(obj))
    api = session_api(obj)
    if api == "openai.responses":  # its shape, whatever its messages
        field_ = next(k for k in ("input", "instructions", "previous_response_id") if k in obj)
        lacks = "no messages list, " if not isinstance(obj.get("messages"), list) else ""
        raise ReplayError(
            f"{source}: not a session ({lacks}{field_} is a Responses field: {_RESPONSES_SESSION})"
        )
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise ReplayError(f"{source}: not a session (no messages list)")
    _check_messages(obj["messages"], source, "/messages")
    for key, kinds, what in (
        ("model", (str,), "a string"),
        ("id", (str, int), "a string"),
        ("source", (str,), "a string"),
        ("tools", (list,), "an array"),
    ):
        value = obj.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise ReplayError(f"{source}: not a session ({key} is {json_kind(value)}, not {what})")
    header = None
    if api == "anthropic.messages":
        header = {k: v for k, v in obj.items() if k not in SESSION_KEYS}
    return Session(
        id=str(obj.get("id") or Path(str(source)).name),
        model=obj.get("model"),
        messages=obj["messages"],
        tools=obj.get("tools"),
        source=str(obj.get("source", "")),
        api=api,
        header=header,
    )


def _check_messages(items: list[Any], source: str | Path, pointer: str) -> None:
    """A :class:`ReplayError` naming (by its JSON pointer under ``pointer``) the first
    item of ``items`` that is no object."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ReplayError(
                f"{source}: not a session ({pointer}/{i} is {json_kind(item)}, "
                "not a message object)"
            )


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message (``a number``, ``an array`` ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def session_requests(session: Session) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One ``(request, next_action)`` per assistant message, in order, in the session's
    API: an OpenAI Chat request is its model, messages and tools; an Anthropic one
    carries the file's request fields (``session.header``: ``system``, ``tools`` ...)."""
    out = []
    for k, message in enumerate(session.messages):
        if isinstance(message, dict) and message.get("role") == "assistant" and k > 0:
            request: dict[str, Any] = {
                **(session.header or {}),
                "model": session.model or "unknown",
                "messages": session.messages[:k],
            }
            if session.tools and session.header is None:
                request["tools"] = session.tools
            out.append((request, message))
    return out


def load_request(source: str | Path, *, exact: bool = False) -> Any:
    """A request body; a session file gives its last real request. ``exact``: as
    :func:`load_json` (for a request that is printed back)."""
    obj = load_json(source, exact=exact)
    if _is_session(obj):
        session = _session_of(obj, source)  # not read again: ``-`` is read once
        pairs = session_requests(session)
        if pairs:
            return pairs[-1][0]
        return {"model": session.model or "unknown", "messages": session.messages}
    return obj


def bundled_sessions() -> list[Path]:
    """The real sessions shipped in the package (see ``data/sessions/README.md``)."""
    folder = resources.files("ctxwarden.data").joinpath("sessions")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".json.gz"))
