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
their tenant as owing (:func:`owing`, written after the items, so it outlives them);
for a tenant without the mark such a body streams through untouched, as before. With
it the body is read whole, up to ``max_owed_body_bytes``, and searched for
``previous_response_id`` without parsing (:func:`previous_ids`: every string key of
that name, nested ones too, so the top-level one is among them); it is parsed only
when one of those names a response that owes items, then settled as an exact-mode
request is. Past ``max_owed_body_bytes`` it streams through as sent. A body in a
``Content-Encoding`` the proxy does not decode (``br``, ``zstd``, a corrupt stream)
cannot tell which response it continues: it goes as sent, since refusing it would
fail requests that owe nothing. In both cases, when its tenant is owing, a warning
(no contents) and the ``ctxwarden_owed_unsettled_total`` counter say what is owed may
be missing: the upstream then refuses the continuation if it was.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import orjson

from ctxwarden.errors import StoreError
from ctxwarden.proxy.recall import RecallAnswer
from ctxwarden.proxy.state import ProxyState

__all__ = [
    "names_owing", "outputs", "owed_for", "owed_key", "owing", "previous_ids", "remember",
    "settle", "stored",
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
    client's continuation will then be refused upstream)."""
    if not items or not isinstance(response_id, str) or not response_id:
        return True
    data = orjson.dumps(items)
    key = owed_key(response_id)
    store = state.engine.store

    def put() -> None:  # the mark after the items: written last, it expires last
        store.put_state(tenant, key, data)
        store.put_state(tenant, _OWING, b"1")

    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(state.executor, put)
    except StoreError as exc:
        _log.error("could not keep the recall answers a response owes: %s", exc)
        return False
    return True


async def owing(state: ProxyState, tenant: str) -> bool:
    """Whether a response of ``tenant``'s may owe items (within the store's TTL of the
    last write of owed items); False when the store cannot say (then nothing owed
    could be read either)."""
    loop = asyncio.get_running_loop()
    try:
        mark = await loop.run_in_executor(
            state.executor, state.engine.store.get_state, tenant, _OWING
        )
    except StoreError as exc:
        _log.error("could not read whether responses owe recall answers: %s", exc)
        return False
    return bool(mark)


async def owed_for(state: ProxyState, tenant: str, request: dict[str, Any]) -> list[Any]:
    """What the response ``request`` continues owes (empty when nothing, or when the
    store cannot say)."""
    return await _owed_by(state, tenant, request.get("previous_response_id"))


async def _owed_by(state: ProxyState, tenant: str, previous: Any) -> list[Any]:
    """What response ``previous`` owes (see :func:`owed_for`)."""
    if not isinstance(previous, str) or not previous:
        return []
    loop = asyncio.get_running_loop()
    try:
        data = await loop.run_in_executor(
            state.executor, state.engine.store.get_state, tenant, owed_key(previous)
        )
    except StoreError as exc:
        _log.error("could not read the recall answers a response owes: %s", exc)
        return []
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


def previous_ids(body: bytes) -> list[str] | None:
    """Every string value of a ``"previous_response_id"`` key in the JSON ``body``,
    found without parsing it: the top-level one, when there is one, is among them
    (a quote inside a JSON string is escaped, so the key is found only as a key or as
    the end of one, which adds a candidate, never hides one). In order of appearance,
    each once; ``None`` past :data:`MAX_PREVIOUS_IDS` distinct values (only a parse
    can tell which is the top-level one)."""
    found: list[str] = []
    at = body.find(_PREVIOUS_KEY)
    while at >= 0:
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
    return found


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
    if len(body) <= _INLINE_SEARCH_BYTES:
        ids = previous_ids(body)
    else:
        ids = await asyncio.to_thread(previous_ids, body)
    if ids is None:
        return True
    for previous in ids:
        if await _owed_by(state, tenant, previous):
            return True
    return False


_INLINE_SEARCH_BYTES = 1024 * 1024


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
