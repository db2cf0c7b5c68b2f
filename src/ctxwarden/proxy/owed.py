"""What a stored Responses response still owes: recall answers the client never saw.

The recall loop ends with recall calls unanswered in two cases: the model called
recall next to a call of the client's own (the client must answer that one, so the
loop hands it back), or the round limit was reached. The client sees neither recall
call. Chat Completions and Messages clients resend their whole history, which then
has no recall call: every call in it is answered, nothing is owed.

A Responses response is stored upstream (``store`` is not false), and a client that
continues it with ``previous_response_id`` answers only the calls it saw; OpenAI
refuses a continuation that leaves any function call of the conversation unanswered
("No tool output found for function call ..."). So the proxy answers those recall
calls itself, keeps the answers in the tenant's store (as session state under
:func:`owed_key`, expiring with the store's TTL) and puts them at the start of the
``input`` of every request that continues that response (:func:`settle`; never
deleted, so a retried or forked continuation gets them too).

A streamed response keeps the id of the first round that showed the client anything
(see :class:`~ctxwarden.proxy.stream_filters.ResponsesFilter`); the response stored
under that id ends in that round's recall calls and lacks the later rounds. Then what
is owed is the rest of the turn as the continuations sent it: that round's recall
answers, then each later round's output items and recall answers, the last round's
items included, so the model sees what the client saw. It is kept as soon as it is
known, after each round's recall answers (the whole list so far; a later round's
write overwrites it with the fuller one), and the write runs to its end when the
client goes away meanwhile: a stream the client stops, or a continuation that
fails, leaves the stored response owing the answers up to where it stopped.

A ``store: false`` response owes nothing (nothing was stored; the client replays what
it saw). Every request the proxy can read gets what is owed, condensed or not: in
shadow mode (and after a fallback) the original gets it, and so do the requests
otherwise forwarded as sent - exact mode (kill switch, ``x-ctxwarden-mode: exact``),
JSON only the stdlib parser reads, integers past 64 bits (those two read and written
back by Python's ``json``, nothing else changed). The store is read only for a
request naming a ``previous_response_id``; one that owes nothing goes out as its
client sent it.

A body over ``max_body_bytes`` (as sent, or once its ``gzip``/``deflate`` is undone)
is never condensed, but still gets what is owed. Each write of owed items also marks
their tenant as owing (:func:`owing`: written before the items and again after them,
so it exists whenever they do and outlives them); for a tenant without the mark such
a body streams through untouched, as before. The mark is read without waiting for the
engine thread, and not at all for a tenant this process wrote owed items for within
the store's TTL (other replicas read the store, which stays the source of truth).
With it the body is read whole, up to ``max_owed_body_bytes`` and within the
process's ``max_owed_held_bytes`` (:class:`~ctxwarden.proxy.state.HeldBytes`),
inflated off the event loop, and searched for ``previous_response_id`` without
parsing (:func:`previous_ids`: every string key of that name, nested ones too, so the
top-level one is among them; a body escaping a letter or ``_`` with ``\\u``, which
could spell the key with other bytes, or repeating the key too often, is parsed
instead); it is parsed only when one of those names a response that owes items, then
settled as an exact-mode request is. Past ``max_owed_body_bytes``, or when other
requests hold ``max_owed_held_bytes``, it streams through as sent. A body in a
``Content-Encoding`` the proxy does not decode (``br``, ``zstd``, a corrupt stream)
cannot tell which response it continues: it goes as sent, since refusing it would
fail requests that owe nothing. In these cases, when its tenant is owing, a warning
(no contents) and the ``ctxwarden_owed_unsettled_total`` counter (``reason``:
``over_limit``, ``busy``, ``coding``) say what is owed may be missing: the upstream
then refuses the continuation if it was.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import orjson

from ctxwarden.errors import StoreError, store_failure
from ctxwarden.proxy.bodies import off_loop_if_large
from ctxwarden.proxy.recall import RecallAnswer
from ctxwarden.proxy.state import OWING_TENANTS, ProxyState, keep_newest

__all__ = [
    "may_name_previous", "names_owing", "outputs", "owed_for", "owed_key", "owing",
    "previous_ids", "remember", "settle", "stored", "unsettled",
]  # fmt: skip

_log = logging.getLogger("ctxwarden.proxy")

_KEY_PREFIX = "\x00ctxwarden-owed:"
"""Session names of owed items start with NUL, which no session header can hold."""


_OWING = "\x00ctxwarden-owing"
"""Session name of the tenant's mark: some response of theirs may owe items."""


def owed_key(response_id: str) -> str:
    """The session-state name of what response ``response_id`` owes."""
    return _KEY_PREFIX + response_id


def outputs(answers: list[RecallAnswer]) -> list[dict[str, Any]]:
    """Recall answers as Responses ``function_call_output`` items."""
    return [
        {"type": "function_call_output", "call_id": a.call_id, "output": a.text} for a in answers
    ]


def stored(request: dict[str, Any]) -> bool:
    """Whether the upstream stores the responses to ``request`` (its default)."""
    return request.get("store") is not False


async def remember(state: ProxyState, tenant: str, response_id: Any, items: list[Any]) -> bool:
    """Keep ``items`` as what ``response_id`` owes; False when the store failed (the
    client's continuation will then be refused upstream).

    The tenant's mark (:func:`owing`) is written first, then the items, then the mark
    again: a failed first write leaves nothing, a failed later one leaves the mark
    written before the items, so items never exist without a mark, and the last write
    of the mark (after the items) makes it outlive them. The writes run in the store
    pool (``state.store_reads``), so the answer that waits for them never waits behind
    a condense on the engine thread."""
    if not items or not isinstance(response_id, str) or not response_id:
        return True
    data = orjson.dumps(items)
    key = owed_key(response_id)
    store = state.engine.store

    def put() -> None:
        store.put_state(tenant, _OWING, b"1")
        store.put_state(tenant, key, data)
        store.put_state(tenant, _OWING, b"1")

    began = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(state.store_reads, put)  # never behind a condense
    except StoreError as exc:
        _log.error("could not keep the recall answers a response owes: %s", store_failure(exc))
        return False
    _note_owing(state, tenant, began)
    return True


def _note_owing(state: ProxyState, tenant: str, began: float) -> None:
    """Remember that ``tenant``'s mark was written after ``began`` (a monotonic time,
    so the mark outlives the record); past :data:`~ctxwarden.proxy.state.OWING_TENANTS`
    the least recently written tenant is forgotten."""
    keep_newest(state.owing_since, tenant, began, OWING_TENANTS)


async def owing(state: ProxyState, tenant: str) -> bool:
    """Whether a response of ``tenant``'s may owe items (within the store's TTL of the
    last write of owed items); False when the store cannot say (then nothing owed
    could be read either).

    Never waits for the engine thread: a tenant this process wrote owed items for
    within the TTL is owing without a read (:attr:`ProxyState.owing_since`); otherwise
    the store, which other replicas write too, is read on ``state.store_reads``."""
    began = state.owing_since.get(tenant)
    if began is not None and time.monotonic() - began < _ttl(state):
        return True
    return bool(await _read_state(state, tenant, _OWING, "whether responses owe recall answers"))


def _ttl(state: ProxyState) -> float:
    """Seconds the store keeps session state after its last write."""
    ttl = getattr(state.engine.store, "ttl", None)
    if isinstance(ttl, int | float) and not isinstance(ttl, bool):
        return float(ttl)
    return float(state.engine.config.store.ttl_seconds)


async def _read_state(state: ProxyState, tenant: str, name: str, what: str) -> bytes | None:
    """Session state ``name`` of ``tenant``, read on ``state.store_reads`` (not behind
    a condense); ``None`` when absent or when the store fails (logged: ``what``)."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(
            state.store_reads, state.engine.store.get_state, tenant, name
        )
    except StoreError as exc:
        _log.error("could not read %s: %s", what, store_failure(exc))
        return None


async def owed_for(state: ProxyState, tenant: str, request: dict[str, Any]) -> list[Any]:
    """What the response ``request`` continues owes (empty when nothing, or when the
    store cannot say)."""
    return await _owed_by(state, tenant, request.get("previous_response_id"))


async def _owed_by(state: ProxyState, tenant: str, previous: Any) -> list[Any]:
    """What response ``previous`` owes (see :func:`owed_for`)."""
    if not isinstance(previous, str) or not previous:
        return []
    data = await _read_state(state, tenant, owed_key(previous), "the recall answers owed")
    if not data:
        return []
    try:
        items = orjson.loads(data)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, dict)]


_PREVIOUS_KEY = b'"previous_response_id"'
_PREVIOUS_VALUE = re.compile(rb'\s*:\s*"((?:[^"\\]|\\.){1,1024})"')
"""After the key: a JSON string value (escapes included) up to 1,024 characters (an
upstream's response ids are far shorter; an id the store could hold owed items for is
one the upstream gave)."""

MAX_PREVIOUS_IDS = 16
"""Distinct ``previous_response_id`` values :func:`previous_ids` gives at most."""

MAX_PREVIOUS_KEYS = 1024
"""``previous_response_id`` keys :func:`previous_ids` looks at, at most."""

_ESCAPED_NAME_BYTE = re.compile(rb"\\u00(?:5[fF]|6[1-9a-fA-F]|7[0-9aA])")
"""A ``\\u`` escape of a byte of the key's name (a lowercase letter or ``_``): a key
spelled so is not found by its bytes. No JSON writer escapes these, so a body with
one is simply parsed."""


def _escapes_name_byte(body: bytes) -> bool:
    """Whether ``body`` holds a :data:`_ESCAPED_NAME_BYTE` (a fast search first)."""
    return b"\\u00" in body and _ESCAPED_NAME_BYTE.search(body) is not None


def may_name_previous(body: bytes) -> bool:
    """Whether the JSON ``body`` may hold a ``previous_response_id`` key (any key, at
    any depth, escapes included); False means it cannot."""
    return _PREVIOUS_KEY[1:-1] in body or _escapes_name_byte(body)


def previous_ids(body: bytes) -> list[str] | None:
    """Every string value of a ``"previous_response_id"`` key in the JSON ``body``,
    found without parsing it: the top-level one, when there is one, is among them
    (a quote inside a JSON string is escaped, so the key is found only as a key or as
    the end of one, which adds a candidate, never hides one). In order of appearance,
    each once. ``None`` when only a parse can tell which is the top-level one: past
    :data:`MAX_PREVIOUS_IDS` distinct values or :data:`MAX_PREVIOUS_KEYS` keys, or
    when the body escapes a letter or ``_`` (``"previous\\u005fresponse_id"`` is the
    same key, spelled with other bytes)."""
    if _escapes_name_byte(body):
        return None
    found: list[str] = []
    at = body.find(_PREVIOUS_KEY)
    for _ in range(MAX_PREVIOUS_KEYS):
        if at < 0:
            return found
        end = at + len(_PREVIOUS_KEY)
        match = _PREVIOUS_VALUE.match(body, end)
        if match is not None:
            value = _json_string(match.group(1))
            if value and value not in found:
                if len(found) == MAX_PREVIOUS_IDS:
                    return None
                found.append(value)
            end = match.end()
        at = body.find(_PREVIOUS_KEY, end)
    return found if at < 0 else None


def _json_string(escaped: bytes) -> str | None:
    """The text of the JSON string ``"<escaped>"``; ``None`` when it is not one."""
    quoted = b'"' + escaped + b'"'
    try:
        value = orjson.loads(quoted)
    except orjson.JSONDecodeError:  # a lone surrogate escape, or not JSON at all
        try:
            value = json.loads(quoted)
        except ValueError:
            return None
    return value if isinstance(value, str) else None


async def names_owing(state: ProxyState, tenant: str, body: bytes) -> bool:
    """Whether the JSON ``body`` may continue a response that owes items: one of its
    :func:`previous_ids` does (True too when it names more than those: a parse must
    tell). Large bodies are searched off-loop."""
    ids = await off_loop_if_large(previous_ids, body)
    if ids is None:
        return True
    for previous in ids:
        if await _owed_by(state, tenant, previous):
            return True
    return False


def settle(request: dict[str, Any], owed: list[Any]) -> dict[str, Any]:
    """``request`` with ``owed`` before its own input (an answer the input already
    gives is not repeated); the client's items stay as sent, after them."""
    given = request.get("input", [])
    if isinstance(given, str):
        items: list[Any] = [{"role": "user", "content": given}]
    elif isinstance(given, list):
        items = list(given)
    else:  # not an input OpenAI takes: the upstream says so
        return request
    answered = {
        i.get("call_id")
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }
    extra = [
        i for i in owed
        if not (i.get("type") == "function_call_output" and i.get("call_id") in answered)
    ]  # fmt: skip
    if not extra:
        return request
    return {**request, "input": [*extra, *items]}


def unsettled(state: ProxyState, reason: str) -> None:
    """A Responses request goes as sent although its tenant has recall answers owed,
    maybe to the response it continues: counted in ``ctxwarden_owed_unsettled_total``
    under ``reason`` (``over_limit``, ``coding`` or ``busy``) and logged as a warning,
    no contents."""
    state.owed_unsettled.labels(reason).inc()
    _log.warning(
        "a Responses request went upstream as sent: its body could not be read (%s), so "
        "recall answers the response it continues may owe were not added", _WHY[reason],
    )  # fmt: skip


_WHY = {
    "over_limit": "past max_owed_body_bytes",
    "coding": "in a content coding",
    "busy": "max_owed_held_bytes were held by other requests",
}
