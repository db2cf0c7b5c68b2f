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
client sent it. A body the proxy cannot read is forwarded as sent, owed items or not
(the upstream then refuses the continuation): one over ``max_body_bytes`` (streamed
through) or in a ``Content-Encoding`` it does not decode.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from ctxwarden.errors import StoreError
from ctxwarden.proxy.recall import RecallAnswer
from ctxwarden.proxy.state import ProxyState

__all__ = ["outputs", "owed_for", "owed_key", "remember", "settle", "stored"]

_log = logging.getLogger("ctxwarden.proxy")

_KEY_PREFIX = "\x00ctxwarden-owed:"
"""Session names of owed items start with NUL, which no session header can hold."""


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
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(state.executor, state.engine.store.put_state, tenant, key, data)
    except StoreError as exc:
        _log.error("could not keep the recall answers a response owes: %s", exc)
        return False
    return True


async def owed_for(state: ProxyState, tenant: str, request: dict[str, Any]) -> list[Any]:
    """What the response ``request`` continues owes (empty when nothing, or when the
    store cannot say)."""
    previous = request.get("previous_response_id")
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
