"""The public engine: ``Engine().condense(request, api=...)``.

Contract (kept stable; other tools drive it):

- ``api`` names the request's API (``openai.chat``, ``openai.responses``,
  ``anthropic.messages``); left out, it is read off the request's shape
  (:func:`ctxwarden.io.guess_api`: ``input`` is Responses, a top-level ``system`` or
  an Anthropic content block is Messages, else Chat) and the report's ``api`` says
  which was taken.
- ``condense`` never mutates its input and never raises for a request it can
  forward: a malformed request raises :class:`~ctxwarden.errors.MalformedRequest`
  (the caller decides), anything else that goes wrong returns the original request
  with ``report["fallback_reason"]`` set.
- ``result.request`` is a new dict; values that were not rewritten are shared with
  the input, so treat both as read-only.
- ``result.report`` holds counters and decisions, never message contents unless
  ``include_contents_in_report`` is set.

The path of one request: parse -> classify -> count -> budget -> condense (passes,
planned per session) -> validate -> render.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.adapters import get_adapter
from ctxwarden.config import EngineConfig, Mode, load_config
from ctxwarden.errors import (
    ConfigError,
    EngineClosed,
    MalformedRequest,
    StoreError,
    ValidationFailed,
    json_pointer,
    reraise_fatal,
    store_failure,
)
from ctxwarden.io import guess_api
from ctxwarden.model.classify import classify, signed_reasoning_end
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.hashing import element_hashes, wire_size
from ctxwarden.model.parts import TextPart, ToolCallPart
from ctxwarden.model.session import derive_session_key
from ctxwarden.pipeline.condenser import CondenseOutcome, Condenser
from ctxwarden.pipeline.presets import resolve_pipeline, unmatched_tool_policies
from ctxwarden.pipeline.segments import text_result_match
from ctxwarden.pipeline.state import SessionState
from ctxwarden.pipeline.thinking import drop_thinking, droppable_from, opens_user_turn
from ctxwarden.pipeline.validate import validate_rewrite
from ctxwarden.store import Store, open_store
from ctxwarden.store.recall import Recalled
from ctxwarden.tokens.budget import Budget, make_budget
from ctxwarden.tokens.counter import TokenCounter
from ctxwarden.tokens.registry import ModelInfo, load_registry

__all__ = ["CondenseResult", "Engine"]

DEFAULT_TENANT = "local"

_MAX_AS_SENT_SECONDS = 30 * 24 * 3600.0
"""The longest :meth:`Engine.forget_session` holds a session as sent (a longer or
infinite hold is this)."""


@dataclass(frozen=True, slots=True)
class _ThinkingBound:
    """Where a request's new replacements may go (``Condenser.run``'s arguments of the
    same names): from message ``new_edits_from`` on; adopted ones before
    ``held_before`` stay whatever became of their artifacts; ``thinking_turn``: a
    step before ``held_before`` leaves out the thinking after it."""

    new_edits_from: int
    held_before: int
    thinking_turn: bool

    @staticmethod
    def nothing_new(conversation: Conversation) -> _ThinkingBound:
        """Past every message: the adopted replacements alone, all held."""
        end = len(conversation.messages) + 1
        return _ThinkingBound(end, end, False)


@dataclass(frozen=True, slots=True)
class CondenseResult:
    """What :meth:`Engine.condense` returns: the request to send and the report."""

    request: dict[str, Any]
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether :attr:`request` differs from the request given: never in shadow mode,
        whose report still says what a rewrite would have been (``rewritten``)."""
        return bool(self.report.get("rewritten")) and not self.report.get("shadow")


class Engine:
    """Condenses requests for one configuration; one instance serves many sessions."""

    def __init__(self, config: EngineConfig | None = None, *, store: Store | None = None) -> None:
        """Raises :class:`~ctxwarden.errors.ConfigError` naming the key of an invalid
        preset, pipeline override or store table (a server backend without its url;
        checked here, not on the first request, where it would only show as a
        fallback). The store itself opens on first use. Usable as a context manager
        (:meth:`close` at the end)."""
        if config is not None and not isinstance(config, EngineConfig):
            raise TypeError(
                f"config must be an EngineConfig, got {type(config).__name__} (a dict: "
                "EngineConfig(**data), or EngineConfig.model_validate(data))"
            )
        self.config = config or EngineConfig()
        self._tool_policies = resolve_pipeline(self.config.preset, self.config.pipeline)
        """The resolved pipeline, for its tool policies (the condenser, which holds it
        too, opens the store when made)."""
        if store is None:
            _check_store_config(self.config)
        self.registry = load_registry()
        self._counters: dict[str, TokenCounter] = {}
        self._observed: dict[str, int] = {}
        self._store = store
        self._condenser: Condenser | None = None
        self._lock = threading.Lock()
        """Held by a condense: one at a time per engine."""
        self._parts_lock = threading.RLock()
        """Held while a part is made on first use (the store, the condenser, a token
        counter, the acondense thread) and around the observed usage: never while
        waiting for a condense."""
        self._async_thread: ThreadPoolExecutor | None = None
        self._closed = False
        """Set by :meth:`close`: new calls are refused (calls made before still run)."""
        self._store_closed = False
        """Set, under the engine lock, when close closes the store: nothing runs after."""
        self._close_lock = threading.Lock()
        """Held through a whole close: a second close waits for the first to end."""
        self.background_gc = True
        """Whether condensing starts the store's collection every
        ``store.gc_interval_seconds`` (a server that collects on a schedule of its own,
        the proxy, turns it off)."""
        self._gc_due = time.monotonic() + self.config.store.gc_interval_seconds
        self._gc_thread: threading.Thread | None = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def from_file(cls, path: str | Path) -> Engine:
        """An engine configured from a TOML file."""
        return cls(load_config(path))

    @property
    def store(self) -> Store:
        """The artifact store (opened on first use, once, whichever thread asks; never
        again once :meth:`close` closed it)."""
        if self._store is None or self._store_closed:
            with self._parts_lock:
                if self._store_closed:
                    raise EngineClosed(_CLOSED)
                if self._store is None:
                    self._store = open_store(self.config.store, self.config.data_dir)
        return self._store

    @property
    def condenser(self) -> Condenser:
        if self._condenser is None:
            with self._parts_lock:
                if self._condenser is None:
                    self._condenser = Condenser(self.config, self.store)
        return self._condenser

    def counter_for(self, info: ModelInfo | None) -> TokenCounter:
        """The memoizing counter for a model's tokenizer (shared across sessions)."""
        spec = self.registry.tokenizer_for(info)
        key = f"{spec.encoding}:{spec.scale}:{spec.confidence}"
        counter = self._counters.get(key)
        if counter is None:
            with self._parts_lock:
                counter = self._counters.get(key)
                if counter is None:
                    counter = self._counters[key] = TokenCounter(spec)
        return counter

    def observe_usage(self, model: str, prompt_tokens: int) -> None:
        """Record provider-reported usage; the largest seen bounds an unknown window."""
        with self._parts_lock:
            if prompt_tokens > self._observed.get(model, 0):
                self._observed[model] = prompt_tokens

    def budget_for(self, model: str | None) -> Budget:
        """The budget for ``model`` by the documented window selection order."""
        return self._budget(model, self.registry.lookup(model))

    def _budget(self, model: str | None, info: ModelInfo | None) -> Budget:
        """:meth:`budget_for` with ``model``'s registry entry looked up already."""
        defaults = self.registry.defaults
        return make_budget(
            configured_window=self.config.budget.context_window,
            configured_reserve=self.config.budget.output_reserve,
            registry_window=info.context_window if info else None,
            registry_reserve=info.output_reserve if info else None,
            observed_tokens=self._observed.get(model or ""),
            fallback_window=defaults.fallback_context_window,
            fallback_reserve=defaults.fallback_output_reserve,
        )

    def parse(self, request: Any, api: str) -> Conversation:
        """Parse and classify a request (raises :class:`MalformedRequest`)."""
        return classify(get_adapter(api).parse(request))

    def condense(
        self,
        request: Mapping[str, Any],
        api: str | None = None,
        *,
        session: str | None = None,
        mode: Mode | None = None,
        tenant: str = DEFAULT_TENANT,
        one_shot: bool = False,
    ) -> CondenseResult:
        """Condense one request (see module contract). Safe to call from several
        threads: an engine condenses one request at a time. Calls made at once run in
        no set order, so a session's requests go one after another (each after the
        answer to the one before, as agents send them).

        ``one_shot``: condense the request on its own, as the first of a new session,
        reading and writing no session state (the originals are still stored, so its
        references recall): the same request then gives the same bytes on every call,
        which is what a command-line run over one file expects (``session`` then only
        names it in the report)."""
        _check_call(session, mode, tenant, one_shot)
        self._check_open()
        api = guess_api(request) if api is None else api
        result = self._locked(
            functools.partial(
                self._condense, request, api, session=session, mode=mode, tenant=tenant,
                one_shot=one_shot,
            )
        )  # fmt: skip
        self._collect_when_due()
        return result

    def as_adopted(
        self,
        request: Mapping[str, Any],
        api: str = "anthropic.messages",
        *,
        session: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> CondenseResult:
        """``request`` with the session's adopted replacements re-applied and nothing
        new, writing no state: what the session sends, for a request that is not a turn
        of it (a token count of its history, which a model binding thinking to its
        prefix checks as it checks the turn itself)."""
        _check_call(session, None, tenant, False)
        self._check_open()
        return self._locked(
            functools.partial(
                self._condense, request, api, session=session, mode=None, tenant=tenant,
                one_shot=False, adopted_only=True,
            )
        )  # fmt: skip

    def _collect_when_due(self) -> None:
        """Start the store's collection on a thread of its own when it is due (see
        :attr:`background_gc`); a failure is logged, and the next due time tries again."""
        interval = self.config.store.gc_interval_seconds
        if not (self.background_gc and interval) or time.monotonic() < self._gc_due:
            return
        with self._parts_lock:
            running = self._gc_thread is not None and self._gc_thread.is_alive()
            if self._closed or self._store is None or running or time.monotonic() < self._gc_due:
                return
            self._gc_due = time.monotonic() + interval
            self._gc_thread = threading.Thread(
                target=_collect, args=(self._store,), name="ctxwarden-gc", daemon=True
            )
            self._gc_thread.start()

    def _locked(self, condense: Callable[[], CondenseResult]) -> CondenseResult:
        """``condense()``, one at a time (the calls' checks done); none once the store
        is closed (a call that passed the open check while close ran)."""
        with self._lock:
            if self._store_closed:
                raise EngineClosed(_CLOSED)
            return condense()

    async def acondense(
        self,
        request: Mapping[str, Any],
        api: str = "openai.chat",
        *,
        session: str | None = None,
        mode: Mode | None = None,
        tenant: str = DEFAULT_TENANT,
        one_shot: bool = False,
    ) -> CondenseResult:
        """:meth:`condense` on the engine's own worker thread, for asyncio callers: the
        event loop runs on meanwhile, and calls run one at a time in the order they are
        made. Cancelling the caller does not stop a condense under way (it ends, and
        writes its session's state)."""
        _check_call(session, mode, tenant, one_shot)
        api = guess_api(request) if api is None else api
        with self._parts_lock:
            self._check_open()
            if self._async_thread is None:
                self._async_thread = ThreadPoolExecutor(1, "ctxwarden-acondense")
            thread = self._async_thread  # a call made before close runs (close waits)
        condense = functools.partial(
            self._condense, request, api, session=session, mode=mode, tenant=tenant,
            one_shot=one_shot,
        )  # fmt: skip
        call = functools.partial(self._locked, condense)
        try:
            future = asyncio.get_running_loop().run_in_executor(thread, call)
        except RuntimeError:  # close shut the thread down between the check and here
            if not self._closed:
                raise  # another cause (a closed loop, interpreter shutdown): as it is
            raise EngineClosed(_CLOSED) from None
        result = await future
        self._collect_when_due()
        return result

    def _condense(
        self,
        request: Mapping[str, Any],
        api: str,
        *,
        session: str | None,
        mode: Mode | None,
        tenant: str,
        one_shot: bool,
        adopted_only: bool = False,
    ) -> CondenseResult:
        started = time.perf_counter()
        if isinstance(request, Mapping) and not isinstance(request, dict):
            request = dict(request)  # any mapping at the top (a MappingProxyType)
        mode = mode or self.config.mode
        adapter = get_adapter(api)
        try:
            conversation = self.parse(request, api)
            info = self.registry.lookup(conversation.model)
            counter = self.counter_for(info)
            budget = self._budget(conversation.model, info)
            hashes = element_hashes(conversation)
            element_tokens = counter.element_tokens(conversation, hashes)
            session_key = session or derive_session_key(conversation)
            bytes_before = wire_size(conversation)
            if bytes_before is None:  # a top-level value JSON cannot encode (an integer
                # past 64 bits): no rewrite could be written, so none is tried
                orjson.dumps(conversation.wire)
        except MalformedRequest:
            raise
        except BaseException as exc:  # JSON-incompatible values, huge integers: as is
            reraise_fatal(exc)  # a native library's panic is no Exception, but is local
            return CondenseResult(dict(request), _unread_report(api, mode, exc, started))
        tokens_before = sum(element_tokens)
        report: dict[str, Any] = {
            "api": api,
            "mode": mode,
            "session": session_key,
            "model": conversation.model,
            "messages": len(conversation.messages),
            "bytes_before": bytes_before,
            "bytes_after": bytes_before,
            "tokens_before": tokens_before,
            "tokens_after": tokens_before,
            "context_window": budget.context_window,
            "window_source": budget.window_source,
            "output_reserve": budget.output_reserve,
            "pressure": round(budget.pressure(tokens_before), 4),
            "band": budget.band(tokens_before),
            "estimator_confidence": counter.confidence,
            **_zero_counters(),
        }
        if mode == "exact":
            report["duration_ms"] = _ms(started)
            return CondenseResult(dict(request), report)
        if self._tool_policies.tools:
            report["tool_policies_unmatched"] = unmatched_tool_policies(
                self._tool_policies,
                _called_tools(conversation, self._tool_policies.text_tool_results),
            )
        bound = (  # past every message: nothing new anywhere
            _ThinkingBound.nothing_new(conversation)
            if adopted_only
            else self._thinking_bound(conversation, info, one_shot)
        )
        report["new_edits_from"] = bound.new_edits_from
        try:
            outcome = self.condenser.run(
                conversation,
                budget=budget,
                counter=counter,
                session=session_key,
                tenant=tenant,
                pricing=self.registry.pricing_for(info, self.config.budget.style),
                element_tokens=element_tokens,
                element_hashes=hashes,
                one_shot=one_shot,
                new_edits_from=bound.new_edits_from,
                held_before=bound.held_before,
                thinking_turn=bound.thinking_turn,
            )
            try:
                rendered, rendered_size = self._render_checked(
                    conversation, outcome, adapter.render
                )
                if outcome.thinking_drops:
                    rendered, rendered_size = self._thinking_dropped(
                        conversation, outcome, rendered, rendered_size, adapter.render, counter
                    )
            except BaseException:
                with contextlib.suppress(Exception):  # best effort: the fallback stands
                    outcome.commit_original()
                raise
            if adopted_only:
                pass  # not a turn of the session: it keeps the state it had
            elif mode == "shadow" and self._binds(conversation, info):
                # what was sent is the original: a thinking block the model answers
                # with is bound to it, so nothing it never saw may come back later
                outcome.commit_original()
            else:
                outcome.commit()
        except MalformedRequest:
            raise
        except BaseException as exc:  # never fail a request that could be forwarded
            reraise_fatal(exc)
            reason = exc.__class__.__name__
            if isinstance(exc, ValidationFailed):
                reason = f"validation: {exc}"
            elif isinstance(exc, StoreError):  # what failed, not the driver's text (a URL)
                reason = store_failure(exc)
            elif isinstance(exc, ConfigError):  # the key at fault (a store's client library)
                reason = f"{reason}: {exc.key}"
            report.update(fallback_reason=reason, fallbacks=1)
            report["duration_ms"] = _ms(started)
            return CondenseResult(dict(request), report)
        report.update(outcome.report)
        if rendered is not None:
            report["rewritten"] = True
            report["bytes_after"] = rendered_size
            if self.config.include_contents_in_report:  # asked for: the texts sent instead
                report["contents"] = [
                    {"path": json_pointer(path), "text": text}
                    for path, text, _ in outcome.conversation.edits()
                ]
            result_request = rendered
        else:
            report["tokens_after"] = tokens_before
            result_request = dict(request)
        report["pressure_after"] = round(budget.pressure(report["tokens_after"]), 4)
        report["band_after"] = budget.band(report["tokens_after"])
        if mode == "shadow":
            report["shadow"] = True
            result_request = dict(request)
        report["duration_ms"] = _ms(started)
        return CondenseResult(result_request, report)

    def _binds(self, conversation: Conversation, info: ModelInfo | None) -> bool:
        """Whether ``conversation`` is a Messages request to a model that binds thinking
        blocks to their prefix (it refuses a block, 400, once anything before it
        differs from what it was produced for)."""
        return conversation.api == "anthropic.messages" and self.registry.binds_thinking(info)

    def _thinking_bound(
        self, conversation: Conversation, info: ModelInfo | None, one_shot: bool
    ) -> _ThinkingBound:
        """Where new replacements may start, for a request to a model binding thinking
        to its prefix (:meth:`_binds`): after its last signed thinking block; at the
        opening of a user turn of a session (its state kept), anywhere the thinking
        after it can be left out (:mod:`ctxwarden.pipeline.thinking`). Anywhere for
        other requests."""
        if not self._binds(conversation, info):
            return _ThinkingBound(0, 0, False)
        signed_end = signed_reasoning_end(conversation)
        if signed_end and not one_shot and opens_user_turn(conversation):
            return _ThinkingBound(droppable_from(conversation), signed_end, True)
        return _ThinkingBound(signed_end, signed_end, False)

    @staticmethod
    def _thinking_dropped(
        original: Conversation, outcome: CondenseOutcome, rendered: dict[str, Any] | None,
        size: int, render: Any, counter: TokenCounter,
    ) -> tuple[dict[str, Any] | None, int]:  # fmt: skip
        """``rendered`` (of ``size`` bytes; ``None``: nothing else was rewritten) without
        the thinking blocks the session no longer sends, and its size (as given when
        there were none); the outcome's ``tokens_after`` loses their tokens and
        ``thinking_dropped`` counts them."""
        base = rendered if rendered is not None else render(original)
        out, dropped = drop_thinking(base, outcome.thinking_drops, original.messages_key)
        if not dropped:
            return rendered, size
        tokens = sum(
            counter.count_text(str(block.get("thinking") or block.get("data") or ""))
            for block in dropped
        )
        outcome.report["thinking_dropped"] = len(dropped)
        outcome.report["tokens_after"] = max(0, outcome.report["tokens_after"] - tokens)
        return out, len(orjson.dumps(out))

    @staticmethod
    def _render_checked(
        original: Conversation, outcome: CondenseOutcome, render: Any
    ) -> tuple[dict[str, Any] | None, int]:
        """The rewritten request rendered and validated, with its size in bytes as
        compact JSON; ``(None, 0)`` when nothing was rewritten."""
        if outcome.conversation is original:
            return None, 0
        rendered: dict[str, Any] = render(outcome.conversation)
        return rendered, validate_rewrite(original, outcome.conversation, rendered)

    def forget_session(
        self, session: str, tenant: str = DEFAULT_TENANT, *, as_sent_for: float = 0.0
    ) -> None:
        """Start ``session`` over: its adopted replacements and cost ledger are dropped,
        and its next request is planned as a new session's first; for ``as_sent_for``
        seconds first, its requests are returned as given and change no state, on
        every engine sharing the store (the proxy does this for an hour when the
        provider refused the session's rewrite and took the request as the client sent
        it). Raises :class:`StoreError` when the store fails, and :class:`TypeError` /
        :class:`ValueError` naming an argument that cannot be right (as condense does;
        an empty ``session`` names no session)."""
        if not isinstance(session, str) or not session:
            raise TypeError(f"session must be a non-empty str, got {session!r}")
        _check_call(session, None, tenant, False)
        if isinstance(as_sent_for, bool) or not isinstance(as_sent_for, int | float):
            raise TypeError(f"as_sent_for must be a number, got {type(as_sent_for).__name__}")
        self._check_open()
        held = min(as_sent_for, _MAX_AS_SENT_SECONDS) if as_sent_for > 0 else 0.0  # NaN: 0
        until = time.time() + held if held else 0.0
        self.store.put_state(tenant, session, SessionState(as_sent_until=until).encode())

    def recall(self, ref: str, lines: str | None = None, *, tenant: str = DEFAULT_TENANT) -> str:
        """The original text behind a reference, or a line range ``A-B`` of it (at most
        5,000 lines: :meth:`recalled` says when it cut one)."""
        return self.recalled(ref, lines, tenant=tenant).text

    def recalled(
        self, ref: str, lines: str | None = None, *, tenant: str = DEFAULT_TENANT
    ) -> Recalled:
        """:meth:`recall` with what it found: the text, the original's line count and
        where the 5,000-line cap cut the range, if it did. A store that cannot be opened
        is a :class:`~ctxwarden.errors.StoreError` of this call."""
        from ctxwarden.store.recall import recall

        self._check_open()
        return recall(self.store, ref, lines, tenant=tenant)

    def close(self) -> None:
        """End the acondense thread once the calls made so far have run, then close the
        store once no condense is under way. A closed engine refuses further calls
        (:class:`~ctxwarden.errors.EngineClosed`); closing again does nothing."""
        with self._close_lock:
            with self._parts_lock:
                self._closed = True
                thread, self._async_thread = self._async_thread, None
            if thread is not None:  # outside the lock: its condense may still make a part
                thread.shutdown(wait=True)
            if self._gc_thread is not None:  # a collection under way ends first
                self._gc_thread.join()
            with self._lock, self._parts_lock:
                if not self._store_closed and self._store is not None:
                    self._store.close()
                self._store_closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosed(_CLOSED)

    def __getstate__(self) -> dict[str, Any]:
        """A fresh engine pickles (a process pool's initializer argument); its locks and
        its acondense thread are made anew on the other side. An engine with an open
        store does not (a connection does not travel)."""
        state = dict(self.__dict__)
        for name in ("_lock", "_parts_lock", "_close_lock", "_async_thread", "_gc_thread"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_closed": False, "_store_closed": False, **state})
        self._lock = threading.Lock()
        self._parts_lock = threading.RLock()
        self._close_lock = threading.Lock()
        self._async_thread = None
        self._gc_thread = None


_log = logging.getLogger("ctxwarden.engine")


def _collect(store: Store) -> None:
    """One background collection of ``store`` (its outcome logged, no contents)."""
    try:
        dropped = store.gc()
    except Exception as exc:
        _log.warning("store gc failed: %s", type(exc).__name__)
    else:
        _log.info("store gc dropped %d entries", dropped)


_MODES = frozenset(("active", "shadow", "exact"))
_CLOSED = "this engine is closed (make a new Engine to condense again)"


def _check_call(session: object, mode: object, tenant: object, one_shot: object) -> None:
    """A :class:`TypeError` or :class:`ValueError` naming the argument of a condense
    call that cannot be right (a misspelled mode would have condensed in active mode)."""
    if session is not None and not isinstance(session, str):
        raise TypeError(f"session must be a str or None, got {type(session).__name__}")
    if mode is not None and mode not in _MODES:
        raise ValueError(f"mode must be active, shadow or exact, got {mode!r}")
    if not isinstance(tenant, str) or not tenant:
        raise ValueError(f"tenant must be a non-empty str, got {tenant!r}")
    if not isinstance(one_shot, bool):
        raise TypeError(f"one_shot must be a bool, got {type(one_shot).__name__}")


def _check_store_config(config: EngineConfig) -> None:
    """The store table's own contradictions, found when the engine is made: a server
    backend needs its url (:class:`ConfigError` naming ``store.url``)."""
    store = config.store
    if store.backend in ("redis", "postgres") and not store.url:
        raise ConfigError(f"the {store.backend} store needs a url", "store.url")


def _called_tools(conversation: Conversation, text_results: tuple[str, ...]) -> Iterator[str]:
    """The names of the tools ``conversation``'s calls name, and those its user texts
    name as results (``text_results``: :func:`~.pipeline.segments.text_result_match`)."""
    for message in conversation.messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                yield part.name
            elif text_results and message.role == "user" and isinstance(part, TextPart):
                matched = text_result_match(part.text, text_results)
                if matched is not None:
                    yield matched[0]


def _zero_counters() -> dict[str, Any]:
    """The report's counters before anything is done (fresh containers each call)."""
    return {
        "rewritten": False,
        "compaction_step": False,
        "step_start": None,
        "fallback_reason": None,
        "transforms": {},
        "rollbacks": 0,
        "segment_failures": 0,
        "fallbacks": 0,
        "artifacts_stored": 0,
        "references": [],
        "tool_policies_unmatched": [],
    }


def _unread_report(api: str, mode: Mode, exc: BaseException, started: float) -> dict[str, Any]:
    """The report of a request the engine could not read (it is returned unchanged):
    the counters of a fallback; what was never measured is ``None``."""
    unknown = ("session", "model", "messages", "bytes_before", "bytes_after",
               "tokens_before", "tokens_after", "context_window", "window_source",
               "output_reserve", "pressure", "band", "estimator_confidence")  # fmt: skip
    return {
        "api": api,
        "mode": mode,
        **dict.fromkeys(unknown),
        **_zero_counters(),
        "fallback_reason": f"unreadable: {_unread_reason(exc)}",
        "fallbacks": 1,
        "duration_ms": _ms(started),
    }


def _unread_reason(exc: BaseException) -> str:
    """The class of ``exc``, and for a value JSON cannot encode the encoder's own words
    (a lone surrogate, a key that is no string, an integer past 64 bits: they name the
    kind of value, never the text)."""
    if isinstance(exc, orjson.JSONEncodeError):
        return f"{exc.__class__.__name__}: {str(exc)[:120]}"
    return exc.__class__.__name__


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
