"""Which side of the rollout a request is on, told before its condense, and where
its condense queues on the engine thread.

The mode comes from :mod:`ctxwarden.proxy.rollout` (kill switch, header, server mode,
canary split). A request without an ``x-ctxwarden-session`` header is split by its
canary key: the key of the stored Responses conversation it is in, else the key
remembered for the Responses answer it continues (in memory, else in the store), else
one derived from the head of its history in a worker thread, so
a request outside the canary never waits for the engine thread. A request whose key
cannot be derived there is split on the engine thread (:func:`bucketed`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import Executor
from typing import Any

from ctxwarden.config import Mode
from ctxwarden.errors import StoreError, store_failure
from ctxwarden.proxy.rollout import (
    Decision,
    canary_name,
    conversation_canary_key,
    decide,
    head_canary_key,
)
from ctxwarden.proxy.state import ProxyState

__all__ = [
    "bucketed",
    "canary_decision",
    "keyed",
    "lane",
    "quick_decision",
    "request_canary_key",
    "split_by",
    "splits",
    "unsplit",
]

_log = logging.getLogger("ctxwarden.proxy")


def quick_decision(
    state: ProxyState, wanted: Mode | None, server_mode: Mode, session: str | None
) -> Decision:
    """The mode as far as it is known before reading the body: the kill switch, the
    mode header, the server mode, and the canary side of a session the client named
    (bucketed by its name, as on the engine thread). A session without a name stays
    ``active`` here (its side is told by :func:`canary_decision`, off the engine
    thread), except under a 0% canary, which every request is outside: even one whose
    body cannot be read is then relayed as sent."""
    quick = unsplit(state, wanted, server_mode)
    if quick.mode != "active" or quick.reason != "server":
        return quick
    if session is None:
        return _all_out(state) or quick
    return split_by(state, wanted, server_mode, session)


def splits(state: ProxyState, session: str | None, wanted: Mode | None, server_mode: Mode) -> bool:
    """Whether a request without a session header is split by the canary (by a key
    :func:`request_canary_key` derives)."""
    return (
        session is None and wanted is None and server_mode == "active"
        and state.settings.canary_percent < 100 and not state.kill_switch.engaged
    )  # fmt: skip


async def canary_decision(
    state: ProxyState, parsed: dict[str, Any], api: str, wanted: Mode | None,
    server_mode: Mode, tenant: str, quick: Decision,
) -> Decision:  # fmt: skip
    """The canary side of a request without a session header, told before its condense
    and off the engine thread, so a request outside the canary never waits for that
    thread: its key is the one known at once (:func:`_known_key`), or read from the
    store for the response it continues, or derived from the head of its history in a
    worker thread
    (:func:`~ctxwarden.proxy.rollout.canary_head`). ``quick`` when the key cannot be
    derived here (a request the engine cannot read): the engine thread then decides,
    as before, and reports what it could not read."""
    previous = _previous_id(parsed, api)
    key = _known_key(state, parsed, api, tenant)
    loop = asyncio.get_running_loop()
    try:
        if key is None and previous:  # a store read, in the store pool
            key = await loop.run_in_executor(
                state.store_reads, _stored_key, state, tenant, previous
            )
        if key is None:
            key = await asyncio.to_thread(_derived_key, state, parsed, api)
    except Exception:  # malformed, or anything else: the engine thread's to judge
        return _all_out(state) or quick
    return keyed(split_by(state, wanted, server_mode, key), key)


def bucketed(
    state: ProxyState, parsed: dict[str, Any], api: str, session: str | None,
    wanted: Mode | None, server_mode: Mode, tenant: str,
) -> Decision:  # fmt: skip
    """The request's decision with its canary side, on the engine thread
    (:func:`ctxwarden.proxy.handlers._condense_sync`)."""
    if not splits(state, session, wanted, server_mode):
        return split_by(state, wanted, server_mode, session)
    try:
        key = request_canary_key(state, parsed, api, tenant)
    except Exception:
        if (outside := _all_out(state)) is not None:
            return outside
        raise
    return keyed(split_by(state, wanted, server_mode, key), key)


def _all_out(state: ProxyState) -> Decision | None:
    """Outside the canary, when a canary of 0% leaves every session outside and a
    request's key cannot be read (it is then relayed as sent, for the upstream to
    judge, as any request outside); ``None`` when the key would decide."""
    if state.settings.canary_percent > 0:
        return None
    return Decision("shadow", "canary_out")


def unsplit(state: ProxyState, wanted: Mode | None, server_mode: Mode) -> Decision:
    """The decision before any canary split: kill switch, mode header, server mode."""
    return decide(kill_switch=state.kill_switch, header=wanted, server_mode=server_mode,
                  canary_percent=100, session=None)  # fmt: skip


def split_by(
    state: ProxyState, wanted: Mode | None, server_mode: Mode, key: str | None
) -> Decision:
    """The decision with the canary split applied to the session ``key``."""
    return decide(kill_switch=state.kill_switch, header=wanted, server_mode=server_mode,
                  canary_percent=state.settings.canary_percent, session=key)  # fmt: skip


def keyed(decision: Decision, key: str) -> Decision:
    """``decision`` carrying the derived canary ``key`` it was bucketed by (kept under
    the Responses id of its answer), when the split bucketed it at all."""
    return dataclasses.replace(decision, key=key) if decision.bucket is not None else decision


def request_canary_key(state: ProxyState, parsed: dict[str, Any], api: str, tenant: str) -> str:
    """On the engine thread: the key a request without a session header is bucketed by
    (:func:`_known_key`, else the one kept in the store for the response it continues,
    a blocking read, else :func:`_derived_key`). Raises what the parse raises."""
    known = _known_key(state, parsed, api, tenant)
    if known:
        return known
    previous = _previous_id(parsed, api)
    stored = _stored_key(state, tenant, previous) if previous else None
    return stored or _derived_key(state, parsed, api)


def _known_key(state: ProxyState, parsed: dict[str, Any], api: str, tenant: str) -> str | None:
    """The key known without reading anything (:mod:`.rollout`): a stored Responses
    conversation's, else the one this process remembers for the response the request
    continues; ``None`` otherwise."""
    key = conversation_canary_key(parsed, api)
    previous = _previous_id(parsed, api)
    if key is None and previous:
        key = state.canary_keys.get((tenant, previous))
    return key


def _previous_id(parsed: dict[str, Any], api: str) -> str | None:
    """The ``previous_response_id`` a Responses request continues, if it names one."""
    previous = parsed.get("previous_response_id") if api == "openai.responses" else None
    return previous if isinstance(previous, str) and previous else None


def _stored_key(state: ProxyState, tenant: str, previous: str) -> str | None:
    """The canary key kept in the store for response ``previous`` (a blocking read);
    ``None`` when there is none or the store fails (logged)."""
    try:
        known = state.engine.store.get_state(tenant, canary_name(previous))
    except StoreError as exc:
        _log.error("could not read the canary key of a response: %s", store_failure(exc))
        return None
    try:
        return known.decode() if known else None
    except UnicodeDecodeError:
        return None


def _derived_key(state: ProxyState, parsed: dict[str, Any], api: str) -> str:
    """The canary key of a request's own text, from the head of its history
    (:func:`~ctxwarden.proxy.rollout.head_canary_key`); raises what the parse raises."""
    return head_canary_key(state.engine.parse, parsed, api)


def lane(state: ProxyState, decision: Decision) -> Executor:
    """Where a request's condense queues on the engine thread (:mod:`.engine_thread`),
    by the decision told before it:

    - outside the canary: the background lane, behind every request whose client waits
      for its condense;
    - inside the canary: the foreground lane, ahead of those background jobs (the split
      puts a session wholly on one side: none of them is of its session);
    - any other (the server mode or a header decided it, or the split is left to the
      engine thread): the foreground lane behind every background job queued so far,
      since its session may have some (a header can send one request of a session
      outside the canary as active), and a session's requests never overtake one
      another."""
    if decision.reason == "canary_out":
        return state.executor.background
    if decision.reason == "canary_in":
        return state.executor
    return state.executor.in_order
