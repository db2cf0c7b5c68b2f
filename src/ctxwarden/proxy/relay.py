"""Relaying upstream responses to the client: plain, and with the recall loop.

Contract:

- Plain relay: a JSON answer (up to :data:`WHOLE_JSON_BYTES`) is read whole and
  returned with the upstream status and headers, 4xx/5xx unchanged (a ``HEAD`` answer
  keeps the upstream ``Content-Length``), and its usage read; every other body (an
  SSE stream, audio, a file download) is written to the client chunk by chunk as it
  arrives, never buffered, and an upstream failure mid-body cuts the client
  connection. Usage is sniffed from SSE events on the side, without delaying them.
- Recall loop: see :mod:`ctxwarden.proxy.recall`. Non-streamed answers are read,
  recall calls answered and continuations sent until the model answers without the
  tool; the answer then holds what the rounds that called recall showed besides
  their calls, before its own output, as a stream of those rounds shows it. The
  last round the limit allows asks for no tool call (``tool_choice`` none) when the
  client left the choice to the model, so the model answers; when the client
  forced some tool call (``required``, Anthropic's ``any``) it goes without the recall
  tool, so the model calls one of the client's own and a forced request never ends
  with neither content nor a call (:meth:`~.dialects.Dialect.last_round`); a recall
  call made anyway is stripped. Streams
  go through a :class:`~ctxwarden.proxy.stream_filters.StreamFilter`. Usage is
  summed over the rounds (each round is billed).
- A failure nobody has seen yet passes through: a continuation the upstream refuses
  (429, 529, ...) before anything was sent answers with that status and body, as the
  first round would. Once a response has started, it cannot be turned into an error:
  a stream the upstream cuts off, stalls past the read timeout or refuses to
  continue ends with an error event in the API's shape where the stream is at an
  event boundary (recall streams), and then the client connection is ABORTED, never
  ended cleanly, so no client takes a truncated answer for a complete one. An
  upstream error event in any round of a recall stream, the first included, ends the
  turn after it: no further round is asked, and the response ends as the upstream's
  did, since the event already told the client (:func:`_stream_round`).
- A client that disconnects raises :class:`ClientGone` out of a write (or cancels
  the handler); the upstream response is then closed, which aborts the upstream
  request. Once a stream's final event was written (``[DONE]``, ``message_stop``,
  ``response.completed``: :func:`~ctxwarden.proxy.sse.ends_stream`) the client has
  the whole answer, and one that leaves before the upstream's body ends (the openai
  SDK closes the connection right after ``[DONE]``) aborted nothing
  (:meth:`RequestRecord.final_event_sent`). The time of an upstream exchange, for
  the overhead, runs until it ends however it ends, a client leaving included.
- Recall calls next to the client's own calls (or past the round limit) are stripped
  and never answered in this turn: the client answers its calls, and its next
  request continues the turn. Chat and Messages histories then simply lack the
  recall calls; a stored Responses response still holds them, so the proxy answers
  them and adds the answers to the request that continues it
  (:mod:`ctxwarden.proxy.owed`). A stream keeps them as soon as each round's answers
  are known, shielded from the handler's cancellation, so a client that leaves or a
  continuation that fails does not leave a shown response owing an unkept answer.
- With a canary split, the Responses id the client is shown keeps the canary key the
  request was bucketed by (:meth:`Exchange.answered`, :mod:`ctxwarden.proxy.rollout`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from ctxwarden.errors import StoreError, store_failure
from ctxwarden.proxy import owed
from ctxwarden.proxy.block_binding import with_beta
from ctxwarden.proxy.bodies import decoded_by_server
from ctxwarden.proxy.dialects import DIALECTS, Dialect, without_recall_tool
from ctxwarden.proxy.reasoning_links import one_call_at_a_time
from ctxwarden.proxy.recall import (
    RECALL_TOOL_NAME,
    TURN_ANSWERS,
    RecallAnswer,
    RoundResult,
    TurnBudget,
    answer_call,
)
from ctxwarden.proxy.rollout import canary_name
from ctxwarden.proxy.sse import SSESplitter, Usage, ends_stream, is_error_event
from ctxwarden.proxy.state import ProxyState, RequestRecord
from ctxwarden.proxy.stream_filters import FILTERS, ResponsesFilter, StreamFilter
from ctxwarden.proxy.upstream import (
    Body,
    UpstreamError,
    UpstreamTimeout,
    response_headers,
    translate_read_error,
)

__all__ = ["ClientGone", "Exchange", "relay", "relay_with_recall"]

_T = TypeVar("_T")
_log = logging.getLogger("ctxwarden.proxy")


class ClientGone(Exception):
    """The client disconnected while we were writing ``response`` to it. The handler
    returns ``response`` (aiohttp then finds the connection closed and ends quietly;
    an exception raised out of a handler is logged as an error)."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__("the client disconnected")
        self.response = response


class Exchange:
    """Where one request goes: method, URL, headers; the body varies per round."""

    def __init__(self, state: ProxyState, request: web.Request, url: str) -> None:
        self.state = state
        self.request = request
        self.url = url
        self.server_decoded = decoded_by_server(request, bodies_as_sent=state.bodies_as_sent)
        """The server read the body through its coding (see ``decoded_by_server``)."""
        self.decoded = self.server_decoded
        """Whether the body sent is one that was decoded or that ctxwarden wrote: the
        client's ``Content-Encoding`` then no longer describes it and is not sent."""
        self.canary: tuple[str, str] | None = None
        """``(tenant, canary key)`` to keep under the Responses id the client gets, for
        the requests that continue it (:mod:`ctxwarden.proxy.rollout`)."""
        self.beta = False
        """Whether the body sent sets ``thinking.block_binding``: its ``anthropic-beta``
        value is added to the client's (:mod:`ctxwarden.proxy.block_binding`)."""
        self.opened = 0
        """Upstream requests sent so far. Only the first carries the client's
        ``Idempotency-Key``: a recall round, or the request sent again after a refused
        rewrite, is another body, and a server that honours the key would answer it with
        the first one's answer (or refuse a key reused with a different body)."""

    def answered(self, response_id: Any) -> None:
        """The client was shown ``response_id``: keep the canary key under it (once; in
        this process's memory at once, and in the store in a tracked background task,
        so the answer waits for no store and a client that leaves does not stop the
        write)."""
        if self.canary is None or not isinstance(response_id, str) or not response_id:
            return
        tenant, key = self.canary
        self.canary = None
        self.state.remember_canary_key(tenant, response_id, key)
        self.state.spawn(_remember_canary(self.state, tenant, response_id, key))

    def open(self, body: Body, length: int | None = None) -> Any:
        """The upstream request (an async context manager, see ``Upstream.open``)."""
        headers: Mapping[str, str] = self.request.headers
        if self.beta or (self.opened and "Idempotency-Key" in headers):
            headers = CIMultiDict(headers)
            if self.beta:
                with_beta(headers)
            if self.opened:
                headers.popall("Idempotency-Key", None)
        self.opened += 1
        return self.state.client.open(
            self.request.method, self.url, headers, body, decoded=self.decoded, length=length
        )


async def _remember_canary(state: ProxyState, tenant: str, response_id: str, key: str) -> None:
    loop = asyncio.get_running_loop()
    name = canary_name(response_id)
    try:
        await loop.run_in_executor(  # in the store pool: not behind a condense
            state.store_reads, state.engine.store.put_state, tenant, name, key.encode()
        )
    except StoreError as exc:  # the continuation is bucketed by its own text then
        _log.error("could not keep the canary key of a response: %s", store_failure(exc))


def _is_sse(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError)
"""What aiohttp raises writing to a connection the client closed."""


async def _prepare(out: web.StreamResponse, request: web.Request) -> None:
    """Send ``out``'s status and headers; :class:`ClientGone` when the client left."""
    try:
        await out.prepare(request)
    except _GONE as exc:
        raise ClientGone(out) from exc


async def _write(out: web.StreamResponse, data: bytes) -> None:
    """Write ``data`` to the client; :class:`ClientGone` when it left."""
    if not data:
        return
    try:
        await out.write(data)
    except _GONE as exc:
        raise ClientGone(out) from exc


async def _end(out: web.StreamResponse) -> None:
    """End ``out`` cleanly; :class:`ClientGone` when the client left (it may close the
    connection as soon as it read the final event, before the end is written)."""
    try:
        await out.write_eof()
    except _GONE as exc:
        raise ClientGone(out) from exc


def _abort(request: web.Request) -> None:
    """Cut the client connection of a started response without ending it.

    No final chunk is sent, so the client's HTTP library sees an incomplete body and
    raises; aiohttp's own attempt to end the response then meets a closed transport.
    """
    transport = request.transport
    if transport is not None:
        transport.abort()


def _plain_headers(request: web.Request, upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    """Headers for a whole (non-SSE) answer; ``HEAD`` keeps the upstream length."""
    headers = response_headers(upstream.headers)
    length = upstream.headers.get("Content-Length")
    if request.method == "HEAD" and length and "Content-Encoding" not in upstream.headers:
        headers["Content-Length"] = length
    return headers


WHOLE_JSON_BYTES = 8 * 1024 * 1024
"""A JSON answer up to this size (or of unknown size) is read whole, for its usage; any
other non-SSE answer (audio, a file, a large listing) streams to the client."""


def _read_whole(request: web.Request, upstream: aiohttp.ClientResponse) -> bool:
    if request.method == "HEAD":
        return True
    return upstream.content_type == "application/json" and _small(upstream)


async def _refusal(upstream: aiohttp.ClientResponse) -> web.Response | None:
    """A refused request's answer read whole, or ``None`` when it cannot be (an event
    stream, past :data:`WHOLE_JSON_BYTES`, cut off)."""
    if _is_sse(upstream) or not _small(upstream):
        return None
    data = bytearray()
    try:
        async for chunk in upstream.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > WHOLE_JSON_BYTES:
                return None
    except (aiohttp.ClientError, TimeoutError):
        return None
    headers = response_headers(upstream.headers)
    return web.Response(body=bytes(data), status=upstream.status, headers=headers)


def _small(upstream: aiohttp.ClientResponse) -> bool:
    """Whether an answer may be read whole: of unknown size or at most
    :data:`WHOLE_JSON_BYTES`."""
    length = upstream.content_length
    return length is None or length <= WHOLE_JSON_BYTES


Refused = Callable[[web.Response | None], Awaitable[web.StreamResponse]]
"""What to do instead when the upstream refuses a body (a 400 before anything reached
the client): send the request as the client sent it instead of ctxwarden's rewrite,
or the session's rewrite instead of the client's bytes (a model binding thinking to
its prefix refuses those once the session's thinking followed a rewrite). It is given
the refusal, to return when there is nothing better, or ``None`` when that could not
be read whole (an event stream, past :data:`WHOLE_JSON_BYTES`, cut off): then the
request is sent again instead."""

REFUSED_STATUS = 400


STREAM_ERROR = "UpstreamStreamError"
"""The ``error_type`` of a request whose upstream stream carried an error event: a plain
relay passes the stream on as sent, a recall turn ends after it (the status stays the
upstream's either way): the operator counts upstream errors by this name."""


async def relay(
    ex: Exchange, body: Body, record: RequestRecord, length: int | None = None,
    on_refused: Refused | None = None,
) -> web.StreamResponse:  # fmt: skip
    """Send ``body`` (``length``: see ``Upstream.open``) and relay the answer (see
    module contract); a 400 answer is not relayed when ``on_refused`` is given: it goes
    to ``on_refused`` (read whole when it can be), whose answer is."""
    started = time.perf_counter()
    try:
        async with ex.open(body, length) as upstream:
            record.headers_in(time.perf_counter() - started)
            record.set(upstream_status=upstream.status)
            refused = on_refused is not None and upstream.status == REFUSED_STATUS
            if refused:
                refusal = await _refusal(upstream)
            else:
                sse = _is_sse(upstream)
                if sse or not _read_whole(ex.request, upstream):
                    return await _relay_streamed(ex, upstream, record, sse)
                data = await _read(upstream)
                status, headers = upstream.status, _plain_headers(ex.request, upstream)
                json_answer = upstream.content_type == "application/json"
    finally:  # read, cut off, refused or left by the client: the upstream's time
        record.add_upstream(time.perf_counter() - started)
    if on_refused is not None and refused:
        return await on_refused(refusal)
    if json_answer and status == 200 and _retrieves_a_response(ex.request):
        data = _without_recall_tool(data)
    if json_answer and (b'"usage"' in data or ex.canary is not None):
        obj = _loads(data)
        record.usage.observe(obj)
        if status == 200 and isinstance(obj, dict):
            ex.answered(obj.get("id"))
    return web.Response(body=data, status=status, headers=headers)


_RESPONSE_PATH = re.compile(r"/responses/[^/]+\Z")


def _retrieves_a_response(request: web.Request) -> bool:
    """Whether ``request`` reads a stored Responses response back
    (``GET /v1/responses/{id}``)."""
    return request.method == "GET" and _RESPONSE_PATH.search(request.path) is not None


def _without_recall_tool(data: bytes) -> bytes:
    """A stored response's JSON as :func:`~.dialects.without_recall_tool` shows it;
    ``data`` itself when that changes nothing (or it is no JSON)."""
    if RECALL_TOOL_NAME.encode() not in data:
        return data
    shown = without_recall_tool(_loads(data))
    return data if shown is None else orjson.dumps(shown)


async def _relay_streamed(
    ex: Exchange, upstream: aiohttp.ClientResponse, record: RequestRecord, sse: bool
) -> web.StreamResponse:
    """Write the answer to the client chunk by chunk as it arrives (an SSE stream, or a
    body not read whole; see module contract). Once an SSE stream's final event is out
    (:func:`~.sse.ends_stream`) the client has the whole answer: one that leaves then,
    before the upstream's body ends, aborted nothing (:meth:`RequestRecord.final_event_sent`)."""
    headers = response_headers(upstream.headers)
    known = upstream.content_length
    if not sse and known is not None and "Content-Encoding" not in upstream.headers:
        headers["Content-Length"] = str(known)  # the bytes pass through unchanged
    out = web.StreamResponse(status=upstream.status, headers=headers)
    await _prepare(out, ex.request)
    splitter = SSESplitter()
    # a JSON answer too large to read whole: its id, when it is the first key
    json_answer = not sse and upstream.content_type == "application/json"
    head = b"" if json_answer and ex.canary is not None and upstream.status == 200 else None
    try:
        async for chunk in upstream.content.iter_any():
            final = False
            # events first: a response's id is remembered before the client sees it
            for event in splitter.feed(chunk) if sse else ():
                if '"usage"' in event.data:
                    record.usage.observe(event.json())
                if is_error_event(event):  # relayed as sent; named for the operator
                    record.set(error_type=STREAM_ERROR)
                    record.at_least("warning")
                if ex.canary is not None and '"response.created"' in event.data:
                    _created(ex, event.json())
                final = final or ends_stream(event)
            if head is not None:
                head, found = _leading_id(head + chunk)
                if found is not None:
                    ex.answered(found)
            await _write(out, chunk)
            if final:
                record.final_event_sent(out.status)
    except (aiohttp.ClientError, TimeoutError) as exc:
        error = translate_read_error(exc)
        record.set(error_type=type(error).__name__)
        record.cut(504 if isinstance(error, UpstreamTimeout) else 502)
        _abort(ex.request)  # mid-event bytes may be out: no error event, only the cut
        return out
    await _end(out)
    return out


_LEADING_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*"([A-Za-z0-9_.:-]{1,256})"')
_LEADING_ID_BYTES = 1024
"""How much of a streamed JSON answer :func:`_leading_id` looks at, at most."""


def _leading_id(head: bytes) -> tuple[bytes | None, str | None]:
    """``(head still to look at, id)`` for the first bytes of a JSON answer: the id
    when the top-level object's first key is ``"id"`` with a plain string value (as
    in OpenAI's Responses objects; found on these bytes alone, no parse of the rest),
    and ``None`` for the head once found, or once the first key cannot be it."""
    match = _LEADING_ID.match(head)
    if match is not None:
        return None, match.group(1).decode()
    if len(head) >= _LEADING_ID_BYTES:
        return None, None
    return head, None


def _created(ex: Exchange, obj: Any) -> None:
    """A relayed ``response.created`` event: the client now knows the response id."""
    if isinstance(obj, dict) and obj.get("type") == "response.created":
        response = obj.get("response")
        if isinstance(response, dict):
            ex.answered(response.get("id"))


async def _read(upstream: aiohttp.ClientResponse) -> bytes:
    try:
        return await upstream.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise translate_read_error(exc) from exc


def _loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


async def _answer(
    state: ProxyState, result: RoundResult, tenant: str, record: RequestRecord,
    budget: TurnBudget, *, owed_only: bool = False,
) -> list[RecallAnswer]:  # fmt: skip
    """Answer a round's recall calls within the turn's ``budget`` (counted per turn,
    not per round: :class:`~.recall.TurnBudget`); ``owed_only``: stripped calls,
    answered only for the request that continues the response (:mod:`.owed`), whose
    repeats get the text again."""
    loop = asyncio.get_running_loop()
    per_call = state.settings.max_recall_bytes
    answers = []
    for call in result.calls:
        screened = budget.screen(call, dedupe=not owed_only)
        if screened is not None:
            answers.append(screened)
            continue
        left = budget.left()
        work = functools.partial(
            answer_call,
            state.engine.recalled,
            call,
            tenant=tenant,
            max_bytes=min(per_call, left),
            turn_cap=budget.max_bytes if left < per_call else None,
        )  # a store read, run in the store pool: never behind a condense
        answer = await loop.run_in_executor(state.store_reads, work)
        budget.spend(call, answer)
        answers.append(answer)
    errors = [a.error for a in answers if not a.ok]
    fields = record.fields
    record.set(
        recall_calls=fields.get("recall_calls", 0) + len(answers),
        recall_errors=fields.get("recall_errors", 0) + len(errors),
    )
    if "store" in errors:
        record.level = "error"
    return answers


def _budget(state: ProxyState) -> TurnBudget:
    """A new turn's recall budget (see :mod:`ctxwarden.proxy.recall`): its calls, and
    :data:`~.recall.TURN_ANSWERS` answers' worth of recalled bytes (one answer cut at
    ``max_recall_bytes`` leaves room for the line range it asks for)."""
    settings = state.settings
    return TurnBudget(settings.max_recall_calls, TURN_ANSWERS * settings.max_recall_bytes)


async def relay_with_recall(
    ex: Exchange, api: str, request: dict[str, Any], body: bytes, tenant: str,
    record: RequestRecord, stream: bool, on_refused: Refused | None = None,
) -> web.StreamResponse:  # fmt: skip
    """Send ``request`` (tool injected) and run the recall loop (see module contract).

    Non-streamed, nothing reaches the client before the last round: an upstream
    error in any round (a status, or an :class:`UpstreamError` the handler turns
    into 502/504) is the answer. The answer holds what the rounds that called recall
    showed besides their calls (their text, before the last round's output), as a
    stream of the same rounds shows it (:meth:`~.dialects.Dialect.with_earlier`).
    A 400 to the first round is not the answer when ``on_refused`` is given: its
    answer is (see :func:`relay`).

    Streamed, an upstream that answers the first round with a whole JSON body
    instead of a stream (it ignored ``stream``) is answered as a non-streamed turn
    would be, and the client gets JSON as that upstream gave it.
    """
    if stream:
        return await _stream_loop(ex, api, request, body, tenant, record, on_refused)
    return await _whole_loop(ex, api, request, body, tenant, record, on_refused)


_Answer = tuple[int, CIMultiDict[str], bytes]
"""An upstream answer read whole: status, headers to relay, body."""


async def _whole_loop(
    ex: Exchange, api: str, request: dict[str, Any], body: bytes, tenant: str,
    record: RequestRecord, on_refused: Refused | None, first: _Answer | None = None,
) -> web.StreamResponse:  # fmt: skip
    """The non-streamed recall loop (see :func:`relay_with_recall`); ``first``: the
    first round's answer, read already (its upstream time counted by the caller)."""
    dialect = DIALECTS[api]
    state = ex.state
    budget = _budget(state)
    asked = request  # what the client sent (with our tool): answers must not show it
    rounds = 0
    earlier: list[dict[str, Any]] = []  # the rounds that called recall, stripped
    while True:
        if first is not None:
            (status, headers, data), first = first, None
        else:
            started = time.perf_counter()
            try:
                async with ex.open(body) as upstream:
                    record.headers_in(time.perf_counter() - started)
                    data = await _read(upstream)
                    status, headers = upstream.status, response_headers(upstream.headers)
            finally:  # a round the client left (the handler cancelled) counts too
                record.add_upstream(time.perf_counter() - started)
        record.set(upstream_status=status, recall_rounds=rounds)
        if on_refused is not None and not rounds and status == REFUSED_STATUS:
            return await on_refused(web.Response(body=data, status=status, headers=headers))
        obj = _loads(data) if status == 200 else None
        if not isinstance(obj, dict):
            return web.Response(body=data, status=status, headers=headers)
        _add_round_usage(record, obj)
        result = dialect.find_calls(obj)
        if result.tangled and rounds < state.settings.max_recall_rounds:  # never shown:
            # asked again (see reasoning_links); past the limit it is shown as it is
            request = _asked_again(dialect, request, rounds, state)
            body = orjson.dumps(request)
            rounds += 1
            record.set(recall_rounds=rounds)
            continue
        if not result.calls:
            ex.answered(obj.get("id"))
            shown = dialect.with_earlier(obj, earlier)
            hidden = dialect.hide(shown, asked)
            if hidden is None and shown is obj:  # nothing to change: the bytes as sent
                return web.Response(body=data, status=status, headers=headers)
            return web.Response(body=orjson.dumps(hidden or shown), status=status, headers=headers)
        if result.other_calls or rounds >= state.settings.max_recall_rounds:
            if api == "openai.responses" and owed.stored(asked):
                answers = await _answer(state, result, tenant, record, budget, owed_only=True)
                await _owe(state, tenant, obj.get("id"), owed.outputs(answers), record)
            ex.answered(obj.get("id"))
            stripped = dialect.with_earlier(dialect.strip(obj), earlier)
            return web.Response(
                body=orjson.dumps(dialect.hide(stripped, asked) or stripped), headers=headers
            )
        earlier.append(dialect.strip(obj))
        answers = await _answer(state, result, tenant, record, budget)
        request = _continuation(dialect, request, result, answers, rounds, state)
        body = orjson.dumps(request)
        rounds += 1
        record.set(recall_rounds=rounds)


def _continuation(
    dialect: Dialect, request: dict[str, Any], result: RoundResult,
    answers: list[RecallAnswer], rounds: int, state: ProxyState,
) -> dict[str, Any]:  # fmt: skip
    """The next round's request; the last round the limit allows offers no recall call
    (:meth:`~.dialects.Dialect.last_round`: one there could only be stripped, leaving
    the client an empty turn)."""
    request = dialect.continuation(request, result, answers)
    if rounds + 1 >= state.settings.max_recall_rounds:
        request = dialect.last_round(request)
    return request


def _asked_again(
    dialect: Dialect, request: dict[str, Any], rounds: int, state: ProxyState
) -> dict[str, Any]:
    """The request of a tangled round (:mod:`.reasoning_links`) asked again: one call
    at a time, or as the last round (no recall call) when it was that already or the
    limit is reached."""
    again = one_call_at_a_time(request)
    if again is None or rounds + 1 >= state.settings.max_recall_rounds:
        return dialect.last_round(request if again is None else again)
    return again


async def _owe(
    state: ProxyState, tenant: str, response_id: Any, items: list[Any], record: RequestRecord
) -> None:
    """Keep what the stored response the client sees owes (see :mod:`.owed`)."""
    if not items:
        return
    if not await owed.remember(state, tenant, response_id, items):
        record.level = "error"


def _add_round_usage(record: RequestRecord, obj: dict[str, Any]) -> None:
    """Add one round's reported usage to the request's totals."""
    usage = Usage()
    usage.observe(obj)
    usage.round_done(record.usage)


async def _stream_loop(
    ex: Exchange, api: str, request: dict[str, Any], body: bytes, tenant: str,
    record: RequestRecord, on_refused: Refused | None,
) -> web.StreamResponse:  # fmt: skip
    state = ex.state
    dialect = DIALECTS[api]
    flt: StreamFilter = FILTERS[api]()
    if isinstance(flt, ResponsesFilter):
        flt.asked = request
    out: web.StreamResponse | None = None
    rounds = 0
    owing = flt if isinstance(flt, ResponsesFilter) and owed.stored(request) else None
    debt: list[Any] = []  # what the stored response the client sees lacks (Responses)
    budget = _budget(state)
    while True:
        if isinstance(flt, ResponsesFilter):  # a tangled round is asked again within it
            flt.may_ask_again = rounds < state.settings.max_recall_rounds
        started = time.perf_counter()
        refused = False
        whole: _Answer | None = None
        try:
            async with ex.open(body) as upstream:
                record.headers_in(time.perf_counter() - started)
                record.set(upstream_status=upstream.status)
                refused = (
                    on_refused is not None and out is None and upstream.status == REFUSED_STATUS
                )
                if refused:
                    refusal = await _refusal(upstream)
                elif out is None and upstream.status == 200 and not _is_sse(upstream):
                    # it ignored ``stream``: a whole answer, whose recall calls must
                    # not reach the client either (see relay_with_recall)
                    headers = response_headers(upstream.headers)
                    whole = (upstream.status, headers, await _read(upstream))
                else:
                    if out is None and upstream.status == 200 and _is_sse(upstream):
                        out = web.StreamResponse(
                            status=200, headers=response_headers(upstream.headers)
                        )
                        await _prepare(out, ex.request)
                    ended = await _stream_round(ex, upstream, flt, out, record, rounds)
                    if ended is not None:
                        return ended
        except UpstreamError as exc:
            if out is None:
                raise
            record.set(error_type=type(exc).__name__)
            status = 504 if isinstance(exc, UpstreamTimeout) else 502
            return await _fail(ex.request, out, flt, status, b"", exc.public, record)
        finally:  # however the round ended, the client leaving included
            record.add_upstream(time.perf_counter() - started)
        if on_refused is not None and refused:
            return await on_refused(refusal)
        if whole is not None:
            return await _whole_loop(ex, api, request, body, tenant, record, on_refused, whole)
        result = flt.round_result()
        if isinstance(flt, ResponsesFilter) and flt.tangled:  # nothing of it was shown
            # (it tangles only while the round limit allows asking again)
            request = _asked_again(dialect, request, rounds, state)
            body = orjson.dumps(request)
            rounds += 1
            record.set(recall_rounds=rounds)
            flt.start_round()
            continue
        if owing is not None and owing.announced_before():
            debt += result.assistant or []  # a later round than the response the client sees
        if not result.calls or result.other_calls or rounds >= state.settings.max_recall_rounds:
            break
        answers = await _answer_owing(state, result, tenant, record, budget, owing, debt)
        request = _continuation(dialect, request, result, answers, rounds, state)
        body = orjson.dumps(request)
        rounds += 1
        record.set(recall_rounds=rounds)
        flt.start_round()
    assert out is not None
    if isinstance(flt, ResponsesFilter):  # nothing announced: the last round's id
        ex.answered(flt.client_response_id())
    if owing is not None:
        if result.calls:  # stripped: answered for the next request
            await _answer_owing(state, result, tenant, record, budget, owing, debt, last=True)
        elif debt:  # the last round's items (its id was announced earlier)
            await _shielded(state, _owe(state, tenant, owing.client_response_id(), debt, record))
    await _write(out, b"".join(flt.finish()))
    if flt.round_ended():  # the final events are out: the client has the whole answer
        record.final_event_sent(out.status)
    await _end(out)
    return out


async def _stream_round(
    ex: Exchange, upstream: aiohttp.ClientResponse, flt: StreamFilter,
    out: web.StreamResponse | None, record: RequestRecord, rounds: int,
) -> web.StreamResponse | None:  # fmt: skip
    """Relay one round of a streamed recall loop to ``out`` (prepared by the caller for
    a round that streams; ``None`` before the first): the response that ends the loop
    (an error answered, the stream cut), or ``None`` to go on (see module contract).

    An upstream error event ends the turn in any round, the first included: it went
    out as the upstream sent it, and nothing follows it (no recall call of the round
    answered, no continuation billed, no ending event that would pass the answer as
    complete); the response then ends cleanly, as the upstream's did (the error event
    tells the client; a cut connection would read as a network failure to it, with
    other retries), and the request is logged as a plain relay logs one: the
    upstream's status, ``error_type`` ``UpstreamStreamError``, at warning."""
    if out is None or upstream.status != 200 or not _is_sse(upstream):
        data = await _read(upstream)
        if out is None:
            headers = response_headers(upstream.headers)
            return web.Response(body=data, status=upstream.status, headers=headers)
        message = f"upstream answered {upstream.status} to a recall continuation"
        return await _fail(ex.request, out, flt, upstream.status, data, message, record)
    try:
        await _pump(upstream, flt, out, record)
    finally:  # the id the client was shown, if any, cut off or not
        if isinstance(flt, ResponsesFilter) and flt.announced():
            ex.answered(flt.response_id)
    if flt.errored or (rounds and not flt.round_ended()):
        # an error event, or a continuation that stopped short: never the previous
        # round's ending, which would pass a truncated answer as complete (a first
        # round that ends short with no error event passes as a plain relay would)
        if flt.errored:  # its error event went out already
            record.upstream_failed(STREAM_ERROR)
            await _end(out)
            return out
        record.set(error_type="UpstreamIncomplete")
        message = "upstream ended a recall continuation early"
        return await _fail(ex.request, out, flt, 502, b"", message, record)
    return None


async def _answer_owing(
    state: ProxyState, result: RoundResult, tenant: str, record: RequestRecord,
    budget: TurnBudget, owing: ResponsesFilter | None, debt: list[Any], *,
    last: bool = False,
) -> list[RecallAnswer]:  # fmt: skip
    """Answer a streamed round's recall calls; once the client was shown a response id
    (or in the ``last`` round, whose id the client then sees), add the answers to
    ``debt`` and keep it as what that response owes at once, not after the last round:
    a stream the client leaves or a continuation that fails must not leave the stored
    response with a recall call nobody answers. Each write holds the whole debt so far
    (a later one overwrites it with the fuller list), and it runs to its end when the
    client goes away meanwhile (shielded from the handler's cancellation)."""

    async def work() -> list[RecallAnswer]:
        answers = await _answer(state, result, tenant, record, budget, owed_only=last)
        if owing is not None and (last or owing.announced()):
            debt.extend(owed.outputs(answers))
            await _owe(state, tenant, owing.client_response_id(), debt, record)
        return answers

    if owing is None:
        return await _answer(state, result, tenant, record, budget)
    return await _shielded(state, work())


async def _shielded(state: ProxyState, work: Coroutine[Any, Any, _T]) -> _T:
    """``work``, run to its end even when the awaiting handler is cancelled (a tracked
    background task then finishes it, see :meth:`ProxyState.spawn`)."""
    box: list[_T] = []

    async def run() -> None:
        box.append(await work)

    await asyncio.shield(state.spawn(run()))
    return box[0]


async def _fail(
    request: web.Request, out: web.StreamResponse, flt: StreamFilter, status: int,
    body: bytes, message: str, record: RequestRecord,
) -> web.StreamResponse:  # fmt: skip
    """End a started recall stream on an upstream failure: the filter's error event
    (SDKs raise it), then the abort (see module contract)."""
    await _write(out, flt.error_event(status, body, message))
    record.cut(status)
    _abort(request)
    return out


async def _pump(
    upstream: aiohttp.ClientResponse, flt: StreamFilter, out: web.StreamResponse,
    record: RequestRecord,
) -> None:  # fmt: skip
    """Stream one round through ``flt``; raises :class:`UpstreamError` when the
    upstream body fails (the events written so far end at an event boundary)."""
    splitter = SSESplitter()
    usage = Usage()
    try:
        async for chunk in upstream.content.iter_any():
            pending = []
            for event in splitter.feed(chunk):
                if '"usage"' in event.data:
                    usage.observe(event.json())
                pending.extend(flt.process(event))
            await _write(out, b"".join(pending))
        for event in splitter.flush():
            await _write(out, b"".join(flt.process(event)))
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise translate_read_error(exc) from exc
    finally:
        usage.round_done(record.usage)
