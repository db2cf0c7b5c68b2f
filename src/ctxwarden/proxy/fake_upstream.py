"""A scriptable fake of the OpenAI and Anthropic APIs, for tests, demos and users.

It speaks Chat Completions, Responses and Messages, streaming (SSE, the providers'
event sequences) and not, plus ``/v1/messages/count_tokens`` and ``GET /v1/models``.
Every request is recorded (method, path, headers, raw body bytes) so tests can
check exactly what arrived; a long-running fake (``ctxwarden fake-upstream``,
``serve --fake-upstream``) keeps only the newest ``keep_received`` of them. Answers are
:class:`Reply` values taken from a queue (:meth:`FakeUpstream.script`), else the default reply::

    async with FakeUpstream() as fake:
        fake.script(Reply(tool_calls=[ToolCall("ctxwarden_recall", {"ref": ref})]),
                    Reply(text="done"))
        ...  # point a client (or the proxy) at fake.url
        assert fake.received[-1].json()["messages"][-1]["role"] == "tool"

A reply can also be a function of the request (its parsed JSON body, ``None`` when it
is not JSON) returning the :class:`Reply`, a stand-in for a model that reads what it
is offered (``tools``, ``tool_choice``)::

    fake.default = lambda body: Reply(text="", tool_calls=[ToolCall(first_tool(body))])

Faults: ``status``/``error`` (an error in the API's own shape), ``delay`` (before
headers, for timeouts), ``chunk_delay`` (slow streams, for disconnects). A body of a
shape every provider refuses is answered 400 as they do (:mod:`.fake_checks`).

Thinking (Messages only): ``Reply(thinking="...")`` starts the answer with a thinking
block signed over its text and its prefix (``system``, ``tools``, the messages); a
request sending a block the fake signed back is refused 400 as Anthropic refuses it
when the text changed, or, for a model that binds thinking, when its prefix did
(unless ``drop_block``): see :mod:`.fake_thinking`.

Reasoning (Responses only): ``Reply(reasoning="...")`` starts the output with a
reasoning item; a stored one sent back must come with the item that followed it, right
after it, and that item with it, as OpenAI requires (else a 400 "Item 'rs_...' of type
'reasoning' was provided without its required following item").

Responses are stored as OpenAI stores them (unless ``store`` is false): a request
continuing one of them with ``previous_response_id`` is checked as OpenAI checks it,
every function call of the conversation answered and every output paired with a
call, else a 400 ("No tool output found for function call ..."): bodies sent with
``gzip`` or ``deflate`` (its server decodes them) and JSON only Python's ``json``
reads (lone surrogate escapes) included. An id the fake never gave is not checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import orjson
from aiohttp import web

from ctxwarden.proxy import fake_events, fake_thinking
from ctxwarden.proxy.fake_checks import shape_error
from ctxwarden.proxy.listen import MAX_HEADER_BYTES, start_site
from ctxwarden.proxy.shapes import Family, error_body

__all__ = ["FakeUpstream", "Received", "Reply", "Responder", "ToolCall"]


_STORED_RESPONSES = 1000
"""Responses the fake keeps for ``previous_response_id`` (the oldest go first)."""

LONG_RUNNING_RECEIVED = 1000
"""Requests a long-running fake keeps in ``received`` (the oldest go first)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the fake model makes (``call_id`` is generated when empty)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer (see module docstring)."""

    text: str = "Hello from the fake upstream."
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    status: int = 200
    error: str = "scripted error"
    delay: float = 0.0
    chunk_delay: float = 0.0
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    completion_tokens: int = 7
    thinking: str | None = None
    """Messages only: the answer starts with a thinking block of this text."""
    reasoning: str | None = None
    """Responses only: the output starts with a reasoning item summarized so, tied to
    the item after it (see :meth:`FakeUpstream._links_refusal`)."""
    items: tuple[dict[str, Any], ...] | None = None
    """Responses only: the output items as given (each with its ``id``; reasoning,
    message and function call items), instead of those made of the fields above."""


Responder = Callable[[Any], Reply]
"""A reply decided per request: called with its parsed JSON body (``None``: not JSON)."""


@dataclass(slots=True)
class Received:
    """One request as it arrived; ``finished`` is false when the client went away."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    finished: bool = False
    cancelled: bool = False

    def json(self) -> Any:
        return orjson.loads(self.body)


class FakeUpstream:
    """The fake server; ``async with FakeUpstream() as fake`` binds a free port.

    ``received`` holds every request in arrival order, or only the newest
    ``keep_received`` when that is given (a fake serving for hours stays bounded)."""

    def __init__(
        self, *replies: Reply | Responder, default: Reply | Responder | None = None,
        keep_received: int | None = None,
    ) -> None:  # fmt: skip
        if keep_received is not None and keep_received < 0:
            raise ValueError(f"keep_received must be >= 0, not {keep_received}")
        self.queue: deque[Reply | Responder] = deque(replies)
        self.default: Reply | Responder = default or Reply()
        self.keep_received = keep_received
        self.received: list[Received] = []
        self.stored: dict[str, list[Any]] = {}
        """Responses by id: the whole conversation they end (input items, then output)."""
        self.followed_by: dict[str, str] = {}
        """Stored reasoning items by id: the id of the output item after each."""
        self.reasoned_by: dict[str, str] = {}
        """Stored output items that came right after a reasoning item: its id."""
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.host = "127.0.0.1"
        self.port = 0

    def script(self, *replies: Reply | Responder) -> None:
        """Queue replies (or responders); each request takes the next one (then the
        default), except one the fake refuses for its shape or its thinking blocks."""
        self.queue.extend(replies)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        for path, api in (
            ("/v1/chat/completions", "chat"),
            ("/v1/responses", "responses"),
            ("/v1/messages", "messages"),
        ):
            app.router.add_post(path, self._generate(api))
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> FakeUpstream:
        self.host = host
        # a stand-in stops at once (Ctrl-C, a test's teardown): in-flight answers get
        # two seconds, not aiohttp's graceful minute. No lingering: every handler reads
        # its body whole (:meth:`_record`), so aiohttp reads on after an answer only
        # for a body that failed (one not in its coding, refused 400), meets the error
        # again and logs it as an "Unhandled exception"; that connection is closed after
        # the answer instead
        self._runner = web.AppRunner(
            self.app(),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=2.0,
            lingering_time=0,
            max_line_size=MAX_HEADER_BYTES,
            max_field_size=MAX_HEADER_BYTES,
        )  # fmt: skip  (header limits as the proxy's: a provider takes large tokens)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await start_site(site, host, port)  # a ListenError names the address
        except BaseException:
            await self.stop()
            raise
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeUpstream:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _record(self, request: web.Request) -> Received:
        """Read and keep ``request``; a body that cannot be read (cut off, or not in
        its ``Content-Encoding``) is refused 400, as a provider does, not a crash."""
        try:
            body = await request.read()
        except web.RequestPayloadError as exc:
            message = f"could not read the request body: {exc}"
            raise web.HTTPBadRequest(
                text=error_body("openai", 400, message).decode(), content_type="application/json"
            ) from None
        item = Received(request.method, request.path, request.query_string,
                        dict(request.headers), body)  # fmt: skip
        self.received.append(item)
        if self.keep_received is not None and len(self.received) > self.keep_received:
            del self.received[: len(self.received) - self.keep_received]
        return item

    def _generate(self, api: str) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            item = await self._record(request)
            scripted = bool(self.queue)
            given = self.queue.popleft() if scripted else self.default
            reply = given if isinstance(given, Reply) else given(_loads(item.body))
            try:
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                family: Family = "anthropic" if api == "messages" else "openai"
                if reply.status != 200:
                    item.finished = True
                    return web.Response(
                        body=error_body(family, reply.status, reply.error),
                        status=reply.status,
                        content_type="application/json",
                        headers={"x-fake-upstream": "error"},
                    )
                checked = payload = _loads(item.body)
                if payload is None:  # JSON only the stdlib reads is checked too
                    payload, checked = {}, _stdlib_loads(item.body)
                shape = shape_error(api, checked)
                if shape is None and api == "messages":
                    refused = fake_thinking.beta_error(checked, item.headers)
                    refused = refused or fake_thinking.thinking_error(checked)
                    shape = None if refused is None else (refused, "messages")
                if shape is not None:
                    item.finished = True
                    if scripted:  # a refused request takes no scripted answer
                        self.queue.appendleft(given)
                    return web.Response(
                        body=error_body(family, 400, shape[0], param=shape[1]),
                        status=400, content_type="application/json",
                    )  # fmt: skip
                context: list[Any] = []
                if api == "responses" and isinstance(checked, dict):
                    context, refused = self._responses_context(checked)
                    if refused:
                        item.finished = True
                        return web.Response(
                            body=error_body(family, 400, refused, param="input"),
                            status=400, content_type="application/json",
                        )  # fmt: skip
                n = next(self._ids)
                prompt = reply.prompt_tokens or max(1, len(item.body) // 4)
                signature = ""
                if api == "messages" and reply.thinking is not None:
                    signature = fake_thinking.sign(checked, reply.thinking)
                answer = fake_events.Answer(reply, payload if isinstance(payload, dict) else {},
                                            n, prompt, signature)  # fmt: skip
                if api == "responses" and answer.request.get("store") is not False:
                    output = fake_events.responses_body(answer)["output"]
                    self.stored[f"resp_fake{n}"] = [*context, *output]
                    if len(self.stored) > _STORED_RESPONSES:  # a long-running fake
                        del self.stored[next(iter(self.stored))]
                    self._link(output)
                if isinstance(payload, dict) and payload.get("stream"):
                    response = await self._stream(request, fake_events.EVENTS[api](answer), reply)
                else:
                    response = web.json_response(
                        fake_events.BODIES[api](answer), dumps=lambda o: orjson.dumps(o).decode()
                    )
                item.finished = True
                return response
            except asyncio.CancelledError:
                item.cancelled = True
                raise

        return handler

    def _link(self, output: list[dict[str, Any]]) -> None:
        """Keep which stored output item followed each reasoning item."""
        for item, after in itertools.pairwise(output):
            if item["type"] == "reasoning":
                self.followed_by[item["id"]] = after["id"]
                self.reasoned_by[after["id"]] = item["id"]
        for links in (self.followed_by, self.reasoned_by):
            while len(links) > _STORED_RESPONSES:  # a long-running fake
                del links[next(iter(links))]

    def _links_refusal(self, items: list[Any]) -> str | None:
        """OpenAI's refusal of stored items sent back apart: a reasoning item without
        the item that followed it in its response right after it, or that item without
        its reasoning item right before it (``None``: none)."""
        ids = [x.get("id") if isinstance(x, dict) and isinstance(x.get("id"), str) else None
               for x in items]  # fmt: skip
        for position, item_id in enumerate(ids):
            if item_id is None:
                continue
            following = self.followed_by.get(item_id)
            after = ids[position + 1] if position + 1 < len(ids) else None
            if following is not None and after != following:
                return (f"Item '{item_id}' of type 'reasoning' was provided without its"
                        " required following item.")  # fmt: skip
            reasoning = self.reasoned_by.get(item_id)
            if reasoning is not None and (position == 0 or ids[position - 1] != reasoning):
                kind = items[position].get("type")
                return (f"Item '{item_id}' of type '{kind}' was provided without its"
                        f" required 'reasoning' item: '{reasoning}'.")  # fmt: skip
        return None

    def _responses_context(self, payload: dict[str, Any]) -> tuple[list[Any], str | None]:
        """The conversation a Responses request ends (stored items, then its input) and
        the refusal OpenAI would answer it with (``None``: accepted)."""
        given = payload.get("input")
        items = [{"role": "user", "content": given}] if isinstance(given, str) else given
        items = list(items) if isinstance(items, list) else []
        apart = self._links_refusal(items) if payload.get("store") is not False else None
        previous = payload.get("previous_response_id")
        if apart is not None or not isinstance(previous, str) or previous not in self.stored:
            return items, apart
        context = [*self.stored[previous], *items]
        calls, outputs = [], set()
        for entry in context:
            kind = entry.get("type") if isinstance(entry, dict) else None
            if kind in ("function_call", "custom_tool_call"):
                calls.append(entry.get("call_id"))
            elif kind in ("function_call_output", "custom_tool_call_output"):
                outputs.add(entry.get("call_id"))
        for call_id in calls:
            if call_id not in outputs:
                return context, f"No tool output found for function call {call_id}."
        for call_id in sorted(outputs - set(calls), key=str):
            return context, f"No tool call found for function call output with call_id {call_id}."
        return context, None

    async def _stream(
        self, request: web.Request, events: list[bytes], reply: Reply
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})  # fmt: skip
        await response.prepare(request)
        for event in events:
            await response.write(event)
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        await response.write_eof()
        return response

    async def _count_tokens(self, request: web.Request) -> web.Response:
        """A token count (a quarter of the body's bytes); thinking blocks are checked
        as for a turn (:mod:`.fake_thinking`), as Anthropic checks them."""
        item = await self._record(request)
        item.finished = True
        payload = _loads(item.body)
        refused = fake_thinking.beta_error(payload, item.headers)
        refused = refused or fake_thinking.thinking_error(payload)
        if refused is not None:
            return web.Response(
                body=error_body("anthropic", 400, refused), status=400,
                content_type="application/json",
            )  # fmt: skip
        return web.json_response({"input_tokens": max(1, len(item.body) // 4)})

    async def _models(self, request: web.Request) -> web.Response:
        item = await self._record(request)
        item.finished = True
        if "anthropic-version" in request.headers:
            data = [{"type": "model", "id": "claude-fake", "display_name": "Fake",
                     "created_at": "2025-01-01T00:00:00Z"}]  # fmt: skip
            return web.json_response({"data": data, "has_more": False, "first_id": "claude-fake",
                                      "last_id": "claude-fake"})  # fmt: skip
        model: dict[str, Any] = {"id": "gpt-fake", "object": "model", "created": 1700000000,
                                 "owned_by": "fake"}  # fmt: skip
        return web.json_response({"object": "list", "data": [model]})

    async def _not_found(self, request: web.Request) -> web.Response:
        item = await self._record(request)
        item.finished = True
        return web.Response(body=error_body("openai", 404, f"no route {request.path}"),
                            status=404, content_type="application/json")  # fmt: skip


def _loads(body: bytes) -> Any:
    """``body`` read by orjson; ``None`` when it refuses it."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _stdlib_loads(body: bytes) -> Any:
    """``body`` read by Python's ``json`` (lone surrogate escapes, which OpenAI takes);
    ``None`` when it is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


async def run_fake_upstream(host: str, port: int, text: str | None = None) -> None:
    """Serve a fake until cancelled, or until SIGINT or SIGTERM (``ctxwarden
    fake-upstream``)."""
    fake = FakeUpstream(
        default=Reply(text=text) if text else None, keep_received=LONG_RUNNING_RECEIVED
    )
    await fake.start(host, port)
    print(f"fake upstream listening on {fake.url}", flush=True)
    # SIGINT and SIGTERM stop it, also where they were ignored when it started (a
    # shell's background job ignores SIGINT, and so would a child inheriting it)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await fake.stop()
