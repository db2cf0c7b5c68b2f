"""Request handlers: the three condensed routes and the pass-through for the rest.

The pass-through streams the request body upstream as it arrives: no size cap, never
held whole (file uploads can be far larger than anything worth condensing).

The path of a condensed request: read the body up to ``max_body_bytes`` (past it,
the bytes read so far and the rest of the stream are forwarded untouched; a Responses
body whose tenant has recall answers owed is read on, see :mod:`.owed`) -> decide
the mode (:mod:`ctxwarden.proxy.rollout`) -> exact: forward the original bytes ->
otherwise read it through its ``Content-Encoding`` (:mod:`ctxwarden.proxy.request_bodies`;
a body it cannot read is forwarded as sent) and parse (400 only for a body that is no
JSON object, in active mode; a malformed object is relayed as sent for the upstream to
judge; JSON that only the stdlib parser accepts, such as a lone surrogate escape, is
forwarded as sent), condense on
the engine thread (a request it has not started within ``max_engine_wait`` goes out as
it came: :mod:`.engine_wait`), send the rewrite in active mode or the original bytes in shadow /
canary-out / fallback -> offer the recall tool when the outgoing request holds
references or offers tools of its own (an agent: from its first turn, so its tool list
never changes; :func:`_offers_recall` for each ``tool_choice``) -> relay. Any failure
of ctxwarden itself sends the original bytes; only
the upstream decides whether a request fails. The one exception to "the original
bytes": a Responses request continuing a stored response that still owes recall
answers gets them before its input on every path that can read its body, exact mode
and bodies over ``max_body_bytes`` included (:mod:`ctxwarden.proxy.owed`).

Shadow work never delays the client: when the mode is shadow before condensing (the
server mode, or an ``x-ctxwarden-mode: shadow`` header), the original is relayed at
once while a tracked background task (:meth:`ProxyState.spawn`) condenses it for the
event, which is emitted once both are done. So is a session outside the canary: its
side is told before its condense and off the engine thread, by the session the client
names (``x-ctxwarden-session``), else by a key derived from the head of its history in
a worker thread, or, for a Responses continuation, the key remembered for the response
it continues (in this process's memory by the time the answer carrying that id ends,
else in the store). Only a request whose key cannot be derived there (one the engine cannot
read) is bucketed on the engine thread. A session outside the canary is condensed in
the engine thread's background lane, only while no request whose client waits is
queued; a request that may share a session with one of those queues behind them
(:func:`ctxwarden.proxy.sides.lane`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from ctxwarden.breakpoints import with_step_breakpoint
from ctxwarden.config import Mode
from ctxwarden.engine import CondenseResult
from ctxwarden.errors import MalformedRequest, StoreError, store_failure
from ctxwarden.proxy.block_binding import dropping_blocks, is_prefix_mismatch
from ctxwarden.proxy.bodies import DecodedBody
from ctxwarden.proxy.dialects import (
    DIALECTS,
    bound_thinking,
    carries_thinking,
    choice_kind,
    own_tools,
)
from ctxwarden.proxy.engine_wait import run_within
from ctxwarden.proxy.owed import (
    may_name_previous,
    names_owing,
    owed_for,
    owing,
    settle,
    stored,
    unsettled,
)
from ctxwarden.proxy.recall import REF_BYTES
from ctxwarden.proxy.relay import ClientGone, Exchange, Refused, relay, relay_with_recall
from ctxwarden.proxy.request_bodies import (
    BodyStream,
    coding_to_undo,
    decode_held,
    decode_request,
    has_wide_integer,
    may_hold_wide,
    off_loop_if_large,
    orjson_dump,
    orjson_load,
    read_capped,
    read_held,
    read_responses,
    stdlib_dump,
    stdlib_load,
    stdlib_parses_object,
)
from ctxwarden.proxy.rollout import (
    Decision,
    header_mode,
)
from ctxwarden.proxy.shapes import (
    CONDENSED_ROUTES,
    Family,
    error_body,
    family_for,
    is_own_path,
    route_label,
)
from ctxwarden.proxy.sides import (
    bucketed,
    canary_decision,
    lane,
    quick_decision,
    splits,
    unsplit,
)
from ctxwarden.proxy.state import REFUSED_SECONDS, STATE, Hold, ProxyState, RequestRecord
from ctxwarden.proxy.tenant import TenantKeys
from ctxwarden.proxy.upstream import UpstreamError, UpstreamTimeout, UpstreamUnavailable
from ctxwarden.proxy.websocket import forward_websocket, is_websocket_upgrade
from ctxwarden.telemetry.events import model_label

__all__ = ["handle_condensed", "handle_forward"]

_log = logging.getLogger("ctxwarden.proxy")


def _error(family: Family, status: int, message: str, param: str | None = None) -> web.Response:
    return web.Response(
        body=error_body(family, status, message, param=param),
        status=status,
        content_type="application/json",
    )


def _upstream_url(state: ProxyState, family: Family, request: web.Request) -> str:
    origin = state.settings.anthropic_upstream if family == "anthropic" else (
        state.settings.openai_upstream
    )  # fmt: skip
    return origin.rstrip("/") + request.raw_path


_UNREADABLE = "request body could not be read (cut off or badly framed)"


async def _stream_through(
    ex: Exchange, record: RequestRecord, family: Family, head: bytes = b""
) -> web.StreamResponse:
    """Forward the client's body untouched and streamed (``head`` was read already);
    400 when the client's body itself fails, not the upstream."""
    request = ex.request
    if not head and not request.can_read_body:
        record.set(bytes_before=0, bytes_after=0)
        return await relay(ex, None, record)
    stream = BodyStream(request, head)
    length = None if ex.server_decoded else request.content_length
    try:
        return await relay(ex, stream, record, length)
    except UpstreamError:
        if not stream.unreadable:
            raise
        return await _unreadable(family)
    finally:
        record.set(bytes_before=stream.sent, bytes_after=stream.sent)


async def _run(
    request: web.Request, record: RequestRecord, family: Family, work: Any
) -> web.StreamResponse:
    """Run ``work`` translating upstream errors; emit the event exactly once.

    A client that goes away (the handler cancelled, or a write finding the connection
    closed: :class:`ClientGone`, whose response is returned so that aiohttp ends it
    quietly) is a 499 with ``client_disconnected``, unless the final event of its
    streamed answer had reached it: then the answer's own status
    (:meth:`RequestRecord.client_left`). Anything else escaping ``work`` is a failure
    of ctxwarden's own: logged as a 500 at error (aiohttp answers it so), never with
    no status."""
    state = request.app[STATE]
    status = 500
    try:
        response: web.StreamResponse = await work
        status = record.cut_status or response.status
        return response
    except UpstreamTimeout as exc:
        status = 504
        record.upstream_failed(type(exc).__name__)
        _log.warning("%s", exc)  # names the upstream (host and port); the client is not told
        return _error(family, 504, exc.public)
    except UpstreamUnavailable as exc:
        status = 502
        record.upstream_failed(type(exc).__name__)
        _log.warning("%s", exc)
        return _error(family, 502, exc.public)
    except ClientGone as exc:  # the connection is closing: never end the answer cleanly
        status = record.client_left()
        if request.transport is not None:
            request.transport.abort()
        return exc.response
    except asyncio.CancelledError:
        status = record.client_left()
        raise
    except Exception as exc:
        record.level = "error"
        record.set(error_type=type(exc).__name__)
        raise
    finally:
        record.ended = time.perf_counter()
        _emit(state, record, status)


def _emit(state: ProxyState, record: RequestRecord, status: int) -> None:
    """Emit the request's event now, or when its shadow condense ends (a done callback:
    it runs whether the task finished, failed or was cancelled, even before it began)."""
    shadow = record.shadow
    if shadow is None or shadow.done():
        state.telemetry.emit(record.event(status))
        return
    shadow.add_done_callback(lambda _task: state.telemetry.emit(record.event(status)))


async def handle_forward(request: web.Request) -> web.StreamResponse:
    """Every path that is not condensed: forwarded unchanged and streamed, any size
    (but for another spelling of a ``/_ctxwarden`` path: 404, as the path itself)."""
    state = request.app[STATE]
    if is_own_path(request.path):
        return web.json_response({"error": f"no ctxwarden endpoint {request.path}"}, status=404)
    family = family_for(request.path, request.headers)
    record = RequestRecord(route_label(request.path), request.method)
    url = _upstream_url(state, family, request)
    if request.method == "GET" and is_websocket_upgrade(request.headers):
        opened = functools.partial(record.final_event_sent, 101)
        socket = forward_websocket(request, state.client.session, url, opened)
        return await _run(request, record, family, socket)
    ex = Exchange(state, request, url)
    return await _run(request, record, family, _forward_body(ex, record, family))


_WHOLE_BODY_BYTES = 1024 * 1024
"""Forwarded bodies up to this size are read whole and sent as bytes, so the upstream
client can send them again on a fresh connection when a reused one was just closed
(it retries idempotent methods; a consumed stream cannot be replayed)."""


async def _forward_body(ex: Exchange, record: RequestRecord, family: Family) -> web.StreamResponse:
    """A forwarded route's body: whole when small, streamed past :data:`_WHOLE_BODY_BYTES`."""
    request = ex.request
    if not request.can_read_body:
        return await _stream_through(ex, record, family)
    try:
        head, whole = await read_capped(request, _WHOLE_BODY_BYTES)
    except web.RequestPayloadError:
        return await _unreadable(family)
    if not whole:
        return await _stream_through(ex, record, family, head)
    record.set(bytes_before=len(head), bytes_after=len(head))
    return await relay(ex, head or None, record)


async def handle_count_tokens(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``: forwarded as sent, except for a model that
    binds thinking blocks to their prefix (Anthropic checks them when it counts too) in a
    session inside the canary: then with the session's adopted replacements
    (:meth:`Engine.as_adopted`), as its turns are sent. A session outside the canary is
    counted as its turns go, as sent, without waiting for the engine thread. Anything
    doubtful goes as sent; the upstream's answer is relayed."""
    state = request.app[STATE]
    record = RequestRecord("count_tokens", request.method)
    ex = Exchange(state, request, _upstream_url(state, "anthropic", request))
    return await _run(request, record, "anthropic", _count_tokens(ex, record))


async def _count_tokens(ex: Exchange, record: RequestRecord) -> web.StreamResponse:
    state = ex.state
    cap = state.settings.max_body_bytes
    try:
        raw, whole = await read_capped(ex.request, cap)
    except web.RequestPayloadError:
        return await _unreadable("anthropic")
    if not whole:
        return await _stream_through(ex, record, "anthropic", raw)
    record.set(api="anthropic.messages", bytes_before=len(raw), bytes_after=len(raw))
    wanted = header_mode(ex.request.headers.get("x-ctxwarden-mode"))
    server_mode: Mode = state.settings.mode or state.engine.config.mode
    session = ex.request.headers.get("x-ctxwarden-session") or None
    tenant = state.tenants.for_headers(ex.request.headers)
    quick = quick_decision(state, wanted, server_mode, session)

    async def as_its_turns_go() -> web.StreamResponse:  # exact, shadow, canary-out
        rescue = await _exact_rescue(ex, record, raw, session, tenant, drop=False)
        return await relay(ex, raw, record, on_refused=rescue)

    if quick.mode != "active":
        return await as_its_turns_go()
    decoded = await decode_request(ex, raw, cap)
    parsed = await _json_object(decoded.data) if decoded.data else None
    if parsed is None or not bound_thinking("anthropic.messages", parsed):
        return await relay(ex, raw, record)
    if splits(state, session, wanted, server_mode):  # the session's canary side, as a turn's
        api = "anthropic.messages"
        quick = await canary_decision(state, parsed, api, wanted, server_mode, tenant, quick)
        if quick.mode != "active":  # outside the canary: its turns go as sent, and so does it
            return await as_its_turns_go()
    result = await _adopted(state, parsed, session, tenant)
    out = None if result is None else await _written(result.request, len(raw))
    if out is None:
        return await relay(ex, raw, record)
    record.set(bytes_after=len(out))
    record.mode = "active"
    coded = ex.server_decoded or decoded.coded

    async def as_sent(_: web.Response | None) -> web.StreamResponse:  # counting twice is harmless
        record.set(bytes_after=len(raw), fallback_reason=_REFUSED_NOW, fallbacks=1)
        ex.decoded = ex.server_decoded
        return await relay(ex, raw, record)

    ex.decoded = coded
    return await relay(ex, out, record, on_refused=as_sent)


async def _adopted(
    state: ProxyState, parsed: dict[str, Any], session: str | None, tenant: str
) -> CondenseResult | None:
    """``parsed`` (a Messages request) with its session's adopted replacements
    (:meth:`Engine.as_adopted`, on the engine thread within ``max_bound_wait``), or
    ``None``: there are none, the session goes as sent lately (refused), the engine
    thread is behind, or the engine failed (logged by type, no contents)."""

    def adopted() -> CondenseResult | None:
        try:
            return state.engine.as_adopted(parsed, session=session, tenant=tenant)
        except Exception as exc:  # as sent, whatever went wrong
            _log.error("the session's adopted replacements failed: %s", type(exc).__name__)
            return None

    _, result = await run_within(state.executor, state.settings.max_bound_wait, adopted)
    if (
        result is None
        or not result.report.get("rewritten")
        or state.refuses(tenant, result.report.get("session"))
    ):
        return None
    return result


async def _exact_rescue(
    ex: Exchange, record: RequestRecord, raw: bytes, session: str | None, tenant: str,
    *, drop: bool = True,
) -> Refused | None:  # fmt: skip
    """For a Messages request (or token count: ``drop`` false) sent as the client sent
    it without the engine (exact mode, the kill switch, shadow): :func:`_adopted_on_refusal`.
    The body is read only when its bytes name a thinking block's ``signature`` or a
    redacted one."""
    decoded = await decode_request(ex, raw, ex.state.settings.max_body_bytes)
    data = decoded.data
    if data is None or (b'"signature"' not in data and b'"redacted_thinking"' not in data):
        return None
    parsed = await _json_object(data)
    if parsed is None:
        return None
    return _adopted_on_refusal(
        ex, record, raw, parsed, session, tenant, decoded.coded, len(data), drop=drop
    )


def _adopted_on_refusal(
    ex: Exchange, record: RequestRecord, raw: bytes, parsed: dict[str, Any],
    session: str | None, tenant: str, coded: bool, size: int, *, drop: bool = True,
) -> Refused | None:  # fmt: skip
    """What to do when the upstream refuses a Messages request sent as the client sent
    it (``raw``; read: ``parsed``, ``size`` bytes; ``coded``: its body came
    content-encoded) that carries thinking
    blocks of a model binding them to their prefix: those blocks were produced after
    the session's rewrite when it was condensed before its thinking began, so send it
    with the session's adopted replacements (:func:`_adopted`), nothing new; with none,
    the refusal is the answer (sent again when it could not be read). ``None`` for any
    other request (its 400 is relayed). With no replacement to send, the last rescue is
    :func:`_dropping_on_refusal` (``drop``: never for a token count)."""
    if not (bound_thinking("anthropic.messages", parsed) and carries_thinking(parsed)):
        return None
    last = None
    if drop:
        last = _dropping_on_refusal(ex, record, raw, parsed, coded, size, tenant, session)

    async def rescue(refusal: web.Response | None) -> web.StreamResponse:
        result = await _adopted(ex.state, parsed, session, tenant)
        out = None if result is None else await _written(result.request, size)
        if out is None:
            if last is not None:  # the state is lost (or this is the client's own change)
                return await last(refusal)
            if refusal is not None:
                return refusal
            ex.decoded = ex.server_decoded  # it could not be read: asked again, as sent
            return await relay(ex, raw, record)
        record.set(
            bytes_before=size, bytes_after=len(out), fallback_reason=_ADOPTED_NOW, fallbacks=1
        )
        record.at_least("warning")
        ex.decoded = ex.server_decoded or coded
        return await relay(ex, out, record)

    return rescue


def _dropping_on_refusal(
    ex: Exchange, record: RequestRecord, raw: bytes, parsed: dict[str, Any], coded: bool,
    size: int, tenant: str, session: str | None,
) -> Refused | None:  # fmt: skip
    """The last rescue of a Messages request sent as the client sent it (``raw``; read:
    ``parsed``, ``size`` bytes; ``coded``: its body came content-encoded) that carries
    thinking blocks of a model binding them to their prefix: when the upstream refuses
    them as bound to a different conversation, it goes once more asking the API to drop
    the failing blocks (:mod:`.block_binding`); another refusal is the answer (sent
    again when it could not be read). Accepted so, ``session`` (its key, when known)
    goes so at once for a while (:meth:`ProxyState.remember_drop`). ``None`` for any
    other request, or one whose ``thinking`` cannot take the setting."""
    if not (bound_thinking("anthropic.messages", parsed) and carries_thinking(parsed)):
        return None
    dropping = dropping_blocks(parsed)
    if dropping is None:
        return None

    async def drop(refusal: web.Response | None) -> web.StreamResponse:
        if refusal is None:  # it could not be read: asked again, as sent
            ex.decoded = ex.server_decoded
            return await relay(ex, raw, record)
        body = refusal.body if isinstance(refusal.body, bytes) else None
        if not is_prefix_mismatch(body):
            return refusal
        written = await _written(dropping, size)
        if written is None:  # nested deeper than orjson writes: the refusal is the answer
            return refusal
        record.set(bytes_before=size, fallback_reason=_DROPPED_NOW, fallbacks=1)
        record.at_least("warning")

        async def refused_too(_: web.Response | None) -> web.StreamResponse:
            # (a gateway that passes no unknown beta): the client gets its own request's
            # answer, not one about a setting it never sent
            record.set(fallback_reason=_DROP_REFUSED)
            return refusal

        response = await _send_dropping(ex, record, written, coded, refused_too)
        if response.status < 400:
            ex.state.remember_drop(tenant, session)
        return response

    return drop


async def _send_dropping(
    ex: Exchange, record: RequestRecord, out: bytes, coded: bool,
    on_refused: Refused | None = None,
) -> web.StreamResponse:  # fmt: skip
    """Send ``out`` (a request asking the API to drop thinking blocks bound to a
    different conversation, written plain: :func:`_written`; ``coded``: the client's
    body came content-encoded) with the beta value the setting needs."""
    record.set(bytes_after=len(out))
    ex.decoded = ex.server_decoded or coded
    ex.beta = True
    return await relay(ex, out, record, on_refused=on_refused)


async def _json_object(data: bytes) -> dict[str, Any] | None:
    """``data`` as a JSON object (off-loop when large), or ``None``."""
    try:
        value = await orjson_load(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def _written(value: Any, size: int) -> bytes | None:
    """``value`` (a request, about ``size`` bytes) as orjson writes it, off the event
    loop when large (:func:`orjson_dump`), or ``None`` when orjson cannot write it: it
    reads JSON nested up to 1024 levels but writes at most 255, so a client's request
    nested deeper (a tool's schema, a tool call's input) can be read, not written. Such
    a request then goes as the client sent it (:func:`_unwritable`): ctxwarden never
    fails a request the upstream would take."""
    try:
        return await orjson_dump(value, size)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None


def _unread(report: dict[str, Any]) -> bool:
    """Whether the engine could not read the request (:func:`Engine.condense` returned it
    unchanged, fallback reason ``unreadable: ...``): it goes as the client sent it,
    without the recall tool, since a request ctxwarden adds to may not be written
    either. JSON nested deeper than orjson writes is the client's input (the reason
    becomes :data:`_UNWRITABLE`, at warning); anything else the proxy parsed and the
    engine could not read is ctxwarden's failure (at error)."""
    reason = report.get("fallback_reason")
    return isinstance(reason, str) and reason.startswith("unreadable")


async def _whose_unread(report: dict[str, Any], parsed: Any, size: int) -> dict[str, Any]:
    """``report``, its fallback reason :data:`_UNWRITABLE` (the client's input) when the
    engine could not read the request (:func:`_unread`) because orjson cannot write it
    (``parsed``, about ``size`` bytes: :func:`_written`)."""
    if _unread(report) and await _written(parsed, size) is None:
        return {**report, "fallback_reason": _UNWRITABLE}
    return report


async def _unwritable(as_sent: _AsSent, on_refused: Refused | None) -> web.StreamResponse:
    """A request whose rewrite (or recall tool) cannot be written (:func:`_written`),
    sent as the client sent it. When the client's own request cannot be written
    either, that is the client's input (JSON nested deeper than orjson writes: at
    warning, fallback kind ``client``); else ctxwarden made something it cannot write,
    its own failure (at error), never hidden as the client's."""
    as_sent.undone()
    if await _written(as_sent.parsed, len(as_sent.raw)) is None:
        _note_unwritable(as_sent.record)
    else:
        as_sent.record.set(fallback_reason=_UNWRITABLE_REWRITE, fallbacks=1)
        as_sent.record.at_least("error")
        _log.error("a rewrite could not be written; the request goes as sent")
    return await as_sent.relay(on_refused=on_refused)


def _note_unwritable(record: RequestRecord) -> None:
    """A request sent as the client sent it because orjson cannot write it (nested
    deeper than 255 levels): the client's input, a fallback at warning."""
    record.set(fallback_reason=_UNWRITABLE, fallbacks=1)
    record.at_least("warning")


async def _unreadable(family: Family) -> web.Response:
    """400 for a body the client sent broken; the connection is not reused (the
    rest of that body is still in it)."""
    response = _error(family, 400, _UNREADABLE)
    response.force_close()
    return response


async def handle_condensed(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``."""
    state = request.app[STATE]
    api, route = CONDENSED_ROUTES[request.path]
    family = family_for(request.path, request.headers)
    record = RequestRecord(route, request.method)
    return await _run(request, record, family, _read_body(request, state, api, family, record))


async def _read_body(
    request: web.Request, state: ProxyState, api: str, family: Family, record: RequestRecord
) -> web.StreamResponse:
    """Read a condensed route's body up to ``max_body_bytes`` (inside :func:`_run`, so a
    client that leaves while sending it still has its event), then condense it, or
    stream a body over the cap through as sent."""
    cap = state.settings.max_body_bytes
    try:
        raw, complete = await read_capped(request, cap)
    except web.RequestPayloadError:
        return await _unreadable(family)
    if not complete:
        ex = Exchange(state, request, _upstream_url(state, family, request))
        record.set(api=api, fallback_reason=f"limit: body over {cap} bytes", fallbacks=1)
        if api == "openai.responses":  # it may owe recall answers (see owed.py)
            return await _over_cap(ex, record, family, raw)
        return await _stream_through(ex, record, family, raw)
    return await _condensed(request, state, api, family, raw, record)


async def _condensed(
    request: web.Request, state: ProxyState, api: str, family: Family, raw: bytes,
    record: RequestRecord,
) -> web.StreamResponse:  # fmt: skip
    """Condense and relay one request; ``raw`` is the body as the client sent it, and
    every path that does not rewrite it forwards exactly those bytes. A Responses body
    that inflates past ``max_body_bytes`` and is read on for what its tenant is owed
    counts in ``state.owed_held`` until its exchange ends."""
    with state.owed_held.hold() as hold:
        return await _condense_one(request, state, api, family, raw, record, hold)


async def _condense_one(
    request: web.Request, state: ProxyState, api: str, family: Family, raw: bytes,
    record: RequestRecord, hold: Hold,
) -> web.StreamResponse:  # fmt: skip
    """:func:`_condensed`, with the ``hold`` a Responses body read on counts in."""
    ex = Exchange(state, request, _upstream_url(state, family, request))
    record.set(api=api, bytes_before=len(raw), bytes_after=len(raw))
    wanted = header_mode(request.headers.get("x-ctxwarden-mode"))
    server_mode: Mode = state.settings.mode or state.engine.config.mode
    session = request.headers.get("x-ctxwarden-session") or None
    quick = quick_decision(state, wanted, server_mode, session)
    tenant = state.tenants.for_headers(request.headers)
    responses = api == "openai.responses"
    cap = state.settings.max_body_bytes
    if quick.mode == "exact":
        record.mode = "exact"
        record.set(rollout_reason=quick.reason)
        if api == "anthropic.messages":
            rescue = await _exact_rescue(ex, record, raw, session, tenant)
            return await relay(ex, raw, record, on_refused=rescue)
        if not responses:
            return await relay(ex, raw, record)
        # a Responses continuation still gets what the response it continues owes
        decoded = await read_responses(ex, tenant, raw, hold)
        if decoded.data is None:
            return await relay(ex, raw, record)
        if len(decoded.data) > cap:
            return await _settle_held(ex, record, tenant, raw, decoded)
        return await _as_sent(ex, record, tenant, raw, decoded, stdlib=False)
    if responses:
        decoded = await read_responses(ex, tenant, raw, hold)
    else:
        decoded = await decode_request(ex, raw, cap)
    if decoded.data is None:  # forwarded as sent
        reason = f"limit: body over {cap} bytes" if decoded.over_limit else decoded.reason
        record.set(fallback_reason=f"proxy: {reason}", fallbacks=1)
        return await relay(ex, raw, record)
    if len(decoded.data) > cap:  # read on: its tenant is owed recall answers
        record.set(fallback_reason=f"proxy: limit: body over {cap} bytes", fallbacks=1)
        return await _settle_held(ex, record, tenant, raw, decoded)
    body = decoded.data
    record.set(bytes_before=len(body), bytes_after=len(body))
    try:
        parsed = await orjson_load(body)  # off the event loop when large (bodies.py)
    except orjson.JSONDecodeError as exc:
        if not await stdlib_parses_object(body):
            if quick.mode == "shadow":  # transparent: the upstream judges it
                return await _unread_shadow(ex, record, quick, raw, "invalid_json")
            _refused(record, quick, "invalid_json", "")
            return _error(family, 400, f"request body is not valid JSON: {exc}", param="")
        record.set(fallback_reason=_STDLIB_ONLY, fallbacks=1)
        if responses:
            return await _as_sent(ex, record, tenant, raw, decoded, stdlib=True)
        return await relay(ex, raw, record)
    if not isinstance(parsed, dict):
        if quick.mode == "shadow":
            return await _unread_shadow(ex, record, quick, raw, "not_an_object")
        _refused(record, quick, "not_an_object", "")
        return _error(family, 400, "request body must be a JSON object at /", param="")
    if await may_hold_wide(body) and await has_wide_integer(body):
        # orjson reads an integer past 64 bits as a float: a rewrite would change it
        record.set(fallback_reason=_WIDE_INTEGER, fallbacks=1)
        if responses:
            return await _as_sent(ex, record, tenant, raw, decoded, stdlib=True)
        return await relay(ex, raw, record)
    # recall answers a stored response the client continues still owes (see owed.py)
    owed = await owed_for(state, tenant, parsed) if responses else []
    if splits(state, session, wanted, server_mode):  # its canary side, off the engine thread
        quick = await canary_decision(state, parsed, api, wanted, server_mode, tenant, quick)
    if quick.key is not None and responses and stored(parsed):
        ex.canary = (tenant, quick.key)  # kept under the id of the answer (rollout.py)
    if quick.mode == "shadow":  # known before condensing: the client does not wait for it
        job = _ShadowJob(parsed, api, session, wanted, server_mode, tenant, quick, len(body))
        return await _shadow_first(ex, record, job, quick, raw, decoded.coded, owed, len(body))
    decided = quick if quick.reason == "canary_in" else None
    # a request to a model that binds thinking to its prefix waits for its condense:
    # sent without its session's adopted replacements, the provider would refuse the
    # thinking it carries, or the request that brings back the thinking it answers with
    bound = bound_thinking(api, parsed)
    wait = state.settings.max_bound_wait if bound else state.settings.max_engine_wait
    try:
        ran, outcome = await run_within(
            lane(state, quick), wait,
            _condense_sync, state, parsed, api, session, wanted, server_mode, tenant, decided,
        )  # fmt: skip
    except _Malformed as exc:
        # relayed as sent in any mode: the upstream judges it (an API may accept what
        # the adapters read strictly, a null optional field; refusing it here would
        # fail a request that succeeds without ctxwarden)
        ran, outcome = True, (exc.decision, None, _malformed_at(exc))
    if ran and outcome is not None:
        decision, result, failure = outcome  # a result, or a failure that says why not
    else:  # the engine thread is behind: sent uncondensed
        # (the kill switch may have come on meanwhile: then exact, without the recall tool)
        decision = unsplit(state, wanted, server_mode) if state.kill_switch.engaged else quick
        result, failure = None, None
        _note_load_limit(record, f"engine thread busy for over {wait:g} s")
        record.set(model=model_label(parsed.get("model")))
    _note_decision(record, state, decision, parsed)
    if decision.key is not None and responses and stored(parsed):
        ex.canary = (tenant, decision.key)  # kept under the id of the answer (rollout.py)
    as_sent = _AsSent(ex, record, raw, parsed, owed, decoded.coded, len(body))
    # sent as the client sent it without the engine's word (a failed condense, an engine
    # thread behind, or a decision that is no longer active: the kill switch came on
    # while it was queued, or the engine thread put it outside the canary): with the
    # session's adopted replacements if the upstream refuses thinking produced after them
    rescue = None
    if bound and (failure is not None or result is None or decision.mode != "active"):
        rescue = _adopted_on_refusal(
            ex, record, raw, parsed, session, tenant, decoded.coded, len(body)
        )
    if failure is not None:
        _note_failure(record, failure)
        return await as_sent.relay(on_refused=rescue)
    # a dropped request goes on as one the engine left unchanged: an agent still gets
    # the recall tool, so its tool list (the start of its cached prompt) never changes
    report: dict[str, Any] = result.report if result is not None else {}
    unread = _unread(report)
    report = await _whose_unread(report, parsed, len(body))
    if result is not None:
        _report_fields(record, report, state.tenants)
    session_key = report.get("session")
    if unread:  # as sent, without the recall tool (a request added to cannot be written)
        return await as_sent.relay(on_refused=rescue or as_sent.dropping(tenant, session_key))
    if decision.mode == "active" and bound and state.drops_blocks(tenant, session_key):
        dropping = dropping_blocks(parsed)
        written = None if dropping is None else await _written(dropping, len(body))
        if written is not None:  # accepted only so lately: asked so at once
            as_sent.undone()
            record.set(fallback_reason=_DROPPING_BEFORE)
            return await _send_dropping(ex, record, written, decoded.coded)
    if decision.mode == "active" and (report.get("as_sent") or state.refuses(tenant, session_key)):
        # refused lately (here, or on a replica: the session's state says so)
        as_sent.undone()
        record.set(fallback_reason=_REFUSED_BEFORE)
        if not report.get("as_sent"):  # the state lacks the hold (its write failed)
            await _forget(state, tenant, session_key)
        return await as_sent.relay(on_refused=as_sent.dropping(tenant, session_key))
    # sent without the engine's word (a cache breakpoint added at most): rescued as above
    refused = rescue or as_sent.on_refused(state, tenant, session_key)
    out: bytes | None = body
    outgoing = parsed
    if decision.mode == "active" and result is not None and report.get("rewritten"):
        outgoing = result.request
        out = await _written(outgoing, len(body))
    if out is not None and decision.mode == "active" and api == "anthropic.messages":
        marked = with_step_breakpoint(outgoing, report.get("step_start"))
        if marked is not None:  # the next step's rewrite then starts after a cache entry
            outgoing = marked
            out = await _written(outgoing, len(body))
            record.set(cache_breakpoint=True)
    if out is not None and owed:
        settled = settle(outgoing, owed)
        if settled is not outgoing:
            outgoing = settled
            out = await _written(outgoing, len(body))
    if out is None:  # JSON nested deeper than orjson writes: the client's, as sent
        return await _unwritable(as_sent, rescue or as_sent.dropping(tenant, session_key))
    record.set(bytes_after=len(out))
    # from here on a body ctxwarden wrote goes out plain: the client's coding is dropped
    ex.decoded = ex.server_decoded or decoded.coded
    if (
        decision.mode == "active"
        and state.settings.max_recall_rounds
        and _offers_recall(outgoing, REF_BYTES.search(out) is not None)
    ):
        injected = DIALECTS[api].inject(outgoing)
        if injected is not None:
            data = await _written(injected, len(out))
            if data is None:  # the tool's nesting passed orjson's limit: as sent
                return await _unwritable(as_sent, rescue or as_sent.dropping(tenant, session_key))
            record.set(recall_injected=True, recall_rounds=0)
            stream = bool(parsed.get("stream"))
            return await relay_with_recall(
                ex, api, injected, data, tenant, record, stream, on_refused=refused
            )
    if out is body:
        ex.decoded = ex.server_decoded
        return await relay(
            ex, raw, record, on_refused=rescue or as_sent.dropping(tenant, session_key)
        )
    return await relay(ex, out, record, on_refused=refused)


async def _as_sent(
    ex: Exchange, record: RequestRecord, tenant: str, raw: bytes, decoded: DecodedBody,
    *, stdlib: bool, searched: bool = False,
) -> web.StreamResponse:  # fmt: skip
    """Forward ``raw`` as the client sent it (a Responses request ctxwarden does not
    condense: exact mode, JSON only the stdlib reads, an integer past 64 bits, a body
    past ``max_body_bytes``) - unless it continues a stored response that still owes
    recall answers (:mod:`.owed`): then its body (``decoded``, read) with them before
    its input, nothing else changed (``stdlib``: read and written by Python's
    ``json``, which keeps wide integers and lone surrogates). The store is read only
    for a body that may name a ``previous_response_id`` (escaped or not; ``searched``:
    the caller found one already)."""
    body = decoded.data
    assert body is not None
    if not searched and not await off_loop_if_large(may_name_previous, body):
        return await relay(ex, raw, record)
    parsed: Any = None
    if not stdlib:
        try:
            parsed = await orjson_load(body)
        except orjson.JSONDecodeError:
            stdlib = True
    if stdlib:
        parsed = await stdlib_load(body)
    if not isinstance(parsed, dict):  # the upstream judges it
        return await relay(ex, raw, record)
    owed = await owed_for(ex.state, tenant, parsed)
    if not owed:
        return await relay(ex, raw, record)
    if not stdlib and await may_hold_wide(body) and await has_wide_integer(body):
        parsed, stdlib = await stdlib_load(body), True
        if not isinstance(parsed, dict):
            return await relay(ex, raw, record)
    settled = settle(parsed, owed)
    if settled is parsed:
        return await relay(ex, raw, record)
    try:
        out = await (stdlib_dump(settled) if stdlib else orjson_dump(settled, len(body)))
    except (TypeError, ValueError, RecursionError):  # nested too deep to write: as sent
        _note_unwritable(record)
        return await relay(ex, raw, record)
    record.set(bytes_after=len(out))
    # a body ctxwarden wrote goes out plain: the client's coding is dropped
    ex.decoded = ex.server_decoded or decoded.coded
    return await relay(ex, out, record)


async def _over_cap(
    ex: Exchange, record: RequestRecord, family: Family, head: bytes
) -> web.StreamResponse:
    """A Responses body over ``max_body_bytes`` (``head`` read so far; never condensed):
    streamed through as sent, unless its tenant has recall answers owed (:mod:`.owed`):
    then read whole, up to ``max_owed_body_bytes`` and within ``max_owed_held_bytes``
    (held in ``state.owed_held`` until its exchange ends), and given what the response
    it continues owes (:func:`_settle_held`)."""
    state = ex.state
    tenant = state.tenants.for_headers(ex.request.headers)
    if not await owing(state, tenant):
        return await _stream_through(ex, record, family, head)
    with state.owed_held.hold() as hold:
        try:
            raw, stopped = await read_held(ex.request, state.settings.owed_cap, head, hold)
        except web.RequestPayloadError:
            return await _unreadable(family)
        if stopped is not None:
            unsettled(state, stopped)
            return await _stream_through(ex, record, family, raw)
        record.set(bytes_before=len(raw), bytes_after=len(raw))
        coding = coding_to_undo(ex)
        decoded = DecodedBody(raw, coded=False)
        if coding:
            decoded = await decode_held(state, raw, coding, hold)
        if decoded.data is None:
            return await relay(ex, raw, record)
        return await _settle_held(ex, record, tenant, raw, decoded)


async def _settle_held(
    ex: Exchange, record: RequestRecord, tenant: str, raw: bytes, decoded: DecodedBody
) -> web.StreamResponse:
    """A Responses body read past ``max_body_bytes`` (``decoded``; never condensed):
    parsed only when a ``previous_response_id`` found in it without parsing names a
    response that owes recall answers (:func:`~.owed.names_owing`), then sent with
    them as an exact-mode request is (:func:`_as_sent`); otherwise forwarded as sent."""
    body = decoded.data
    assert body is not None
    record.set(bytes_before=len(body), bytes_after=len(body))
    if not await names_owing(ex.state, tenant, body):
        return await relay(ex, raw, record)
    return await _as_sent(ex, record, tenant, raw, decoded, stdlib=False, searched=True)


def _note_decision(
    record: RequestRecord, state: ProxyState, decision: Decision, parsed: dict[str, Any]
) -> None:
    record.mode = decision.mode
    record.set(
        rollout_reason=decision.reason,
        canary_bucket=decision.bucket,
        canary_percent=state.settings.canary_percent,
        stream=bool(parsed.get("stream")),
    )


async def _unread_shadow(
    ex: Exchange, record: RequestRecord, decision: Decision, raw: bytes, kind: str
) -> web.StreamResponse:
    """A shadow request whose body is no JSON object: forwarded as sent, as a shadow
    request always is (the upstream judges it); its event says what it was."""
    _note_unreadable(record, decision, kind, "")
    return await relay(ex, raw, record)


def _refused(record: RequestRecord, decision: Decision, kind: str, pointer: str) -> None:
    """The event of a request the proxy answers 400 itself, at warning."""
    _note_unreadable(record, decision, kind, pointer)
    record.level = "warning"


def _note_unreadable(record: RequestRecord, decision: Decision, kind: str, pointer: str) -> None:
    """The mode a request the proxy could not read was handled in, what was wrong
    (``kind``) and where (a JSON pointer; no contents)."""
    record.mode = decision.mode
    record.set(rollout_reason=decision.reason, error_type=kind, error_at=pointer or "/")


def _note_load_limit(record: RequestRecord, limit: str) -> None:
    """A request relayed without (part of) its condense because the engine thread is
    behind: a load signal at warning, counted as a limit fallback."""
    record.level = "warning"
    record.set(fallback_reason=f"proxy: limit: {limit}", fallbacks=1)


def _note_failure(record: RequestRecord, failure: str | None) -> None:
    """A request sent without its condense: at error when ctxwarden failed; at warning
    when the request was malformed (:func:`_malformed_at`; the client's fault, relayed
    for the upstream to judge) or over a limit (``limit: ...``, ``ProxySettings.max_messages``: a
    client or load signal, as :func:`_note_load_limit`'s)."""
    if failure is not None and failure.startswith((_MALFORMED, "limit:")):
        record.at_least("warning")
    else:
        record.level = "error"
    record.set(fallback_reason=f"proxy: {failure}", fallbacks=1)


_MALFORMED = "malformed request at "


def _malformed_at(exc: _Malformed) -> str:
    """The failure a malformed request relayed as sent is noted with (where, no contents)."""
    return f"{_MALFORMED}{exc.error.pointer or '/'}"


SHADOW_BACKLOG = 64
"""Shadow condenses pending at most: past it a shadow request is relayed without one.
The client no longer waits for them (the back-pressure it gave); those of sessions
outside the canary queue behind every active request (see :func:`.sides.lane`)."""


@dataclass(frozen=True, slots=True)
class _ShadowJob:
    """What a shadow request's condense needs (the arguments of :func:`_condense_sync`),
    and the decision it was relayed under, which its condense and its event keep (the
    kill switch may flip meanwhile)."""

    parsed: dict[str, Any]
    api: str
    session: str | None
    wanted: Mode | None
    server_mode: Mode
    tenant: str
    decision: Decision
    size: int = 0
    """The bytes of the body as read (how :func:`_written` writes it: off-loop past
    :data:`~.bodies.INLINE_PARSE_BYTES`)."""


async def _shadow_first(
    ex: Exchange, record: RequestRecord, job: _ShadowJob, quick: Decision, raw: bytes,
    coded: bool, owed: list[Any], size: int,
) -> web.StreamResponse:  # fmt: skip
    """Relay what a shadow request sends (the original bytes; a Responses continuation
    with what its stored response owes before its input) at once, and condense on the
    engine thread meanwhile, for the event only (:func:`_shadow_condense`, tracked on
    the state: it outlives the handler when the answer comes first, a client that goes
    away included). ``_run`` emits the event when both are done; its times end with
    the client's exchange."""
    state = ex.state
    _note_decision(record, state, quick, job.parsed)
    if len(state.background) < SHADOW_BACKLOG:
        record.shadow = state.spawn(_shadow_condense(state, record, job))
    else:  # the engine thread is behind: this request's shadow fields are skipped
        _note_load_limit(record, f"{SHADOW_BACKLOG} shadow condenses pending")
    outgoing = settle(job.parsed, owed) if owed else job.parsed
    if outgoing is job.parsed:  # a session condensed while active is rescued as in exact
        rescue = _adopted_on_refusal(ex, record, raw, job.parsed, job.session, job.tenant,
                                     coded, size)  # fmt: skip
        return await relay(ex, raw, record, on_refused=rescue)
    out = await _written(outgoing, size)
    if out is None:  # nested deeper than orjson writes: as sent, without what is owed
        _note_unwritable(record)
        return await relay(ex, raw, record)
    record.set(bytes_after=len(out))
    # a body ctxwarden wrote goes out plain: the client's coding is dropped
    ex.decoded = ex.server_decoded or coded
    return await relay(ex, out, record)


async def _shadow_condense(state: ProxyState, record: RequestRecord, job: _ShadowJob) -> None:
    """A shadow request's condense: fills in ``record`` (the rollout decision and the
    engine's report) and nothing else; never raises except when cancelled, so what
    the engine does, fails or returns never reaches the client. One that has not
    started within ``max_engine_wait`` is skipped: stale work that would only delay
    the requests queued behind it (its event says so, without token figures).

    What the request's own exchange recorded by the time the condense ends - a rescue
    of the request as sent after a refusal (adopted replacements, ``drop_block``) - is
    what was sent: its ``fallback_reason`` and ``fallbacks`` are kept over the
    condense's (:func:`_relay_fallback`)."""
    wait = state.settings.max_engine_wait
    kept: dict[str, Any] = {}
    try:
        try:
            ran, outcome = await run_within(
                lane(state, job.decision), wait, _condense_sync, state, job.parsed, job.api,
                job.session, job.wanted, job.server_mode, job.tenant, job.decision,
            )  # fmt: skip
        except _Malformed as exc:  # forwarded as sent: the upstream judges it
            ran, outcome = True, (exc.decision, None, _malformed_at(exc))
        report = getattr(outcome[1], "report", None) if ran and outcome is not None else None
        if isinstance(report, dict):
            report = await _whose_unread(report, job.parsed, job.size)
        kept = _relay_fallback(record)  # after the last await: nothing records it since
        if not ran or outcome is None:
            _note_load_limit(record, f"engine thread busy for over {wait:g} s")
            return
        decision, result, failure = outcome
        _note_decision(record, state, decision, job.parsed)
        if failure is not None or result is None:
            _note_failure(record, failure)
            return
        if not isinstance(report, dict):
            raise TypeError(f"report is a {type(report).__name__}")
        _report_fields(record, report, state.tenants)
    except Exception as exc:  # a broken shadow result costs its event fields, no more
        _log.error("shadow condense failed: %s", type(exc).__name__)
        kept = _relay_fallback(record)  # no fallback of the condense recorded yet
        _note_failure(record, type(exc).__name__)
    finally:
        record.set(**kept)


def _relay_fallback(record: RequestRecord) -> dict[str, Any]:
    """The fallback a shadow request's exchange recorded (only its relay records one
    while the condense runs: a refusal's rescue), to keep over the condense's."""
    if not record.fields.get("fallback_reason"):
        return {}
    return {key: record.fields.get(key) for key in ("fallback_reason", "fallbacks")}


def _offers_recall(request: dict[str, Any], references: bool) -> bool:
    """Whether the recall tool goes with ``request`` (``references``: it holds some).

    An agent's request (it offers tools of its own) gets it from its first turn on,
    references or not, so its tool list (the start of the cached prompt) never changes
    mid-session; a step then re-sends only what it rewrote, not the whole prompt. So
    does one whose ``tool_choice`` leaves our tool out (``none``, or one or more of the
    client's tools named: the model cannot call it there, and the list stays), and one
    that forces some tool call (``required``, Anthropic's ``any``), references or not:
    agents force a call on one turn and leave it to the model on the next (the OpenAI
    Agents SDK does by default), and a list that changed with the choice re-sent the
    whole prompt. A forced request without references may spend a round on a recall
    that finds nothing; the last round the limit allows goes without the tool, so the
    model calls one of the client's own (:meth:`~.dialects.Dialect.last_round`); one
    without a tool of its own never gets it (that round would have none). Other
    requests get it once they hold references. A choice naming the recall tool itself
    never gets it (the upstream judges)."""
    kind = choice_kind(request.get("tool_choice"))
    if kind == "ours":
        return False
    if kind == "any":
        return own_tools(request)
    return references or own_tools(request)


_REFUSED_BEFORE = "proxy: refused: the upstream refused a rewrite of this session lately"
_REFUSED_NOW = "refused: the upstream answered 400 to the rewrite; sent as the client sent it"
_DROPPED_NOW = (
    "refused: the upstream answered 400 to the request as sent, whose thinking is bound to"
    " a different conversation (a rewrite the session's state no longer holds, or the"
    " client's own change) and no adopted replacement fits; sent asking it to drop those"
    " blocks"
)
_DROPPING_BEFORE = (
    "proxy: refused: the session's thinking was accepted lately only asking the upstream"
    " to drop blocks bound to a different conversation; asked so at once"
)
_DROP_REFUSED = (
    "refused: the upstream answered 400 to the request as sent (thinking bound to a"
    " different conversation) and to it asking to drop those blocks; its first answer relayed"
)
_ADOPTED_NOW = (
    "refused: the upstream answered 400 to the request as sent, whose thinking followed"
    " the session's rewrite; sent with the session's adopted replacements"
)


@dataclass(slots=True)
class _AsSent:
    """The request as the client sent it (with the recall answers its tenant owes, for a
    Responses continuation: :mod:`.owed`), to send instead of a rewrite."""

    ex: Exchange
    record: RequestRecord
    raw: bytes
    parsed: dict[str, Any]
    owed: list[Any]
    coded: bool
    size: int
    """The bytes of the body as read (decoded), as ``bytes_before`` counts them."""

    def undone(self) -> None:
        """The record of a request whose rewrite is not sent: nothing saved or added."""
        before = self.record.fields.get("tokens_before")
        self.record.set(
            fallbacks=1, bytes_after=self.size, tokens_after=before, tokens_saved=0,
            saving_percent=0.0, transforms={}, references=0, cache_breakpoint=None,
            recall_injected=None, recall_rounds=None, thinking_dropped=None,
        )  # fmt: skip

    def dropping(self, tenant: str, session: Any) -> Refused | None:
        """The last rescue of this request sent as the client sent it (see
        :func:`_dropping_on_refusal`; ``session``: its key)."""
        key = session if isinstance(session, str) else None
        return _dropping_on_refusal(
            self.ex, self.record, self.raw, self.parsed, self.coded, self.size, tenant, key
        )

    async def relay(self, on_refused: Refused | None = None) -> web.StreamResponse:
        """Send it: the client's bytes, or its body with what it is owed, written plain
        (the client's bytes after all when that cannot be written: :func:`_written`)."""
        out = await _written(settle(self.parsed, self.owed), self.size) if self.owed else None
        if out is not None:
            self.ex.decoded = self.ex.server_decoded or self.coded
            return await relay(self.ex, out, self.record, on_refused=on_refused)
        if self.owed:  # nested deeper than orjson writes: as sent, without what is owed
            _note_unwritable(self.record)
        self.ex.decoded = self.ex.server_decoded
        return await relay(self.ex, self.raw, self.record, on_refused=on_refused)

    def on_refused(self, state: ProxyState, tenant: str, session: Any) -> Refused:
        """What :func:`relay` does when the upstream refuses the rewrite: send the
        request as the client sent it, and when that one is accepted, send the
        session's requests so for a while (``ProxyState.refused_sessions``) and let the
        engine forget the session: the refusal was the rewrite's, and what the provider
        answers from now on follows the request as sent."""

        async def resend(_: web.Response | None) -> web.StreamResponse:
            self.undone()
            self.record.set(fallback_reason=_REFUSED_NOW)
            self.record.at_least("warning")
            response = await self.relay(on_refused=self.dropping(tenant, session))
            if response.status < 400:
                state.remember_refusal(tenant, session)
                await _forget(state, tenant, session)
            return response

        return resend


async def _forget(state: ProxyState, tenant: str, session: Any) -> None:
    """The engine forgets ``session`` and holds it as sent for the refused hour, on
    every replica (:meth:`Engine.forget_session`), in the store pool; a store that
    fails is logged, never the request's failure."""
    if not isinstance(session, str):
        return
    loop = asyncio.get_running_loop()
    forget = functools.partial(
        state.engine.forget_session, session, tenant, as_sent_for=REFUSED_SECONDS
    )
    try:
        await loop.run_in_executor(state.store_reads, forget)
    except StoreError as exc:
        _log.error("could not reset a refused session's state: %s", store_failure(exc))


_STDLIB_ONLY = "proxy: JSON only the stdlib parser reads (e.g. a lone surrogate escape)"
_UNWRITABLE = "proxy: JSON nested deeper than ctxwarden writes (255 levels; forwarded as sent)"
_UNWRITABLE_REWRITE = "error: the rewrite could not be written as JSON (sent as the client sent it)"
_WIDE_INTEGER = "proxy: an integer past 64 bits (forwarded as sent)"


class _Malformed(Exception):
    """A :class:`MalformedRequest` with the rollout decision it was found under."""

    def __init__(self, error: MalformedRequest, decision: Decision) -> None:
        super().__init__(str(error))
        self.error = error
        self.decision = decision


def _condense_sync(
    state: ProxyState, parsed: dict[str, Any], api: str, session: str | None,
    wanted: Mode | None, server_mode: Mode, tenant: str, decided: Decision | None = None,
) -> tuple[Decision, Any, str | None]:  # fmt: skip
    """On the engine thread: decide the canary bucket, then condense (never raises
    except :class:`_Malformed`). ``decided``: the decision made before the condense (a
    shadow request's, relayed under it, which stands whatever the kill switch says by
    now; or a canary-in request's, unless the kill switch came on since).

    A session without an ``x-ctxwarden-session`` header is bucketed by
    :func:`~ctxwarden.proxy.rollout.canary_key`, which its first turn shares with the
    later ones (the engine's own session key also covers the agent's first reply), so
    a session never changes side, nor its tool list with it."""
    settings = state.settings
    engine = state.engine

    if decided is not None and decided.mode == "active" and state.kill_switch.engaged:
        decided = None  # the kill switch came on since the side was told: it decides
    decision: Decision | None = decided
    try:
        if decision is None:
            decision = bucketed(state, parsed, api, session, wanted, server_mode, tenant)
        items = parsed.get("messages", parsed.get("input"))
        if isinstance(items, list) and len(items) > settings.max_messages:
            return decision, None, f"limit: {len(items)} messages > {settings.max_messages}"
        result = engine.condense(parsed, api=api, session=session, mode=decision.mode,
                                 tenant=tenant)  # fmt: skip
        return decision, result, None
    except MalformedRequest as exc:
        raise _Malformed(exc, decision or unsplit(state, wanted, server_mode)) from exc
    except Exception as exc:  # ctxwarden must never fail a forwardable request
        _log.error("condense failed, sending the original: %s", type(exc).__name__)
        return decision or unsplit(state, wanted, server_mode), None, type(exc).__name__


def _report_fields(record: RequestRecord, report: dict[str, Any], keys: TenantKeys) -> None:
    """The engine's report on ``record``; its fallback sets the level
    (:func:`_fallback_level`)."""
    before = int(report.get("tokens_before") or 0)
    after = int(report.get("tokens_after") or before)
    transforms = report.get("transforms") or {}
    reason = report.get("fallback_reason")
    if reason:
        record.at_least(_fallback_level(str(reason)))
    record.set(
        session=keys.session_label(report.get("session")),
        model=model_label(report.get("model")),  # a plain model name, else "other"
        tokens_before=before, tokens_after=after, tokens_saved=before - after,
        saving_percent=round(100 * (before - after) / before, 2) if before else 0.0,
        transforms={k: v for k, v in transforms.items() if isinstance(v, dict)},
        rollbacks=report.get("rollbacks", 0), fallbacks=report.get("fallbacks", 0),
        fallback_reason=reason, band=report.get("band"), pressure=report.get("pressure"),
        references=len(report.get("references") or ()), condense_ms=report.get("duration_ms"),
        compaction_step=bool(report.get("compaction_step")),
        thinking_dropped=report.get("thinking_dropped"),
        window_source=report.get("window_source"),  # "fallback": a model the registry lacks
    )  # fmt: skip


def _fallback_level(reason: str) -> str:
    """The log level of a request the engine sent as it came (its ``fallback_reason``),
    by docs/proxy.md's contract: ``warning`` for what is not ctxwarden's fault but
    needs a look - a rewrite its own validation refused (``validation: ...``, the
    safety net working) or a request nested deeper than orjson writes
    (:data:`_UNWRITABLE`, the client's input); ``error`` for ctxwarden's own failures -
    the store, a condense that raised (the reason is the exception's class: a bug), a
    request the proxy parsed and the engine could not read (``unreadable: ...``)."""
    if reason.startswith(("validation", _UNWRITABLE)):
        return "warning"
    return "error"
