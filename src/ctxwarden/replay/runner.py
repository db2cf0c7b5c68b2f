"""The replay loop: every session, request by request, through every subject.

Contract of :func:`run_replay`:

- each subject (engine configuration or baseline) is created once and sees the
  requests of one session in order, sessions one after another, exactly as a proxy
  would; subjects are independent, so their calls are interleaved per request;
- the original request is analysed once per request and shared by all subjects;
- nothing of the message contents is logged; contents only reach the result in the
  side-by-side views of the worst sessions (for the HTML report);
- an input that cannot be used is skipped and listed in ``ReplayResult.skipped``,
  never silently: a file that cannot be read as sessions, or a session the engine
  refuses a request of (:class:`~ctxwarden.errors.MalformedRequest`, as a provider
  would). A skipped session counts in no figure: its metrics and memory peak join the
  result only once its last request is measured (the process's peak RSS is the
  process's). Any other error (the store, the configuration) stops the replay.
"""

from __future__ import annotations

import resource
import secrets
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwarden.config import EngineConfig
from ctxwarden.errors import CtxwardenError, MalformedRequest, ReplayError
from ctxwarden.replay.cache import cache_expired, effective_cached, request_cost
from ctxwarden.replay.inputs import ReplaySession, expand_paths, read_sessions
from ctxwarden.replay.integrity import check_integrity
from ctxwarden.replay.metrics import SessionMetrics, aggregate
from ctxwarden.replay.signals import distinctive_tokens
from ctxwarden.replay.subjects import EngineSubject, MaskSubject, Subject, make_subject
from ctxwarden.replay.view import MessageInfo, RequestView, Step
from ctxwarden.replay.views import Featured, WorstViews
from ctxwarden.replay.wire import action_text, decoded_strings
from ctxwarden.tokens.counter import TokenCounter
from ctxwarden.tokens.registry import load_registry

__all__ = [
    "DEFAULT_BASELINES",
    "Progress",
    "ReplayOptions",
    "ReplayResult",
    "SkippedInput",
    "SubjectResult",
    "run_replay",
]

DEFAULT_BASELINES = ("exact", "mask:10")
Progress = Callable[[int, int, str], None]
"""``progress(files_done, files_total, session_id)``, called after each session."""


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """Knobs of one replay run."""

    idle_gap: float | None = None
    """Seconds after which the provider cache has expired between two turns."""
    turn_seconds: float | None = None
    """Assumed seconds between turns for inputs without timestamps."""
    worst_views: int = 8
    """Side-by-side views kept per configuration (the worst sessions)."""
    trace_memory: bool = False
    """Measure the peak allocation of each condense call with tracemalloc (slower)."""
    max_sessions: int | None = None
    mention_credit: bool = True
    """Count a string listed in a placeholder's ``[mentions: ...]`` line as seen by
    support (false: only strings shown in their own context count)."""


@dataclass(slots=True)
class SubjectResult:
    """One subject's sessions, views of its worst sessions, and its memory peak."""

    name: str
    kind: str
    sessions: list[SessionMetrics] = field(default_factory=list)
    views: WorstViews = field(default_factory=WorstViews)
    peak_condense_bytes: int | None = None

    def aggregate(self) -> dict[str, Any]:
        return aggregate(self.sessions)


@dataclass(frozen=True, slots=True)
class SkippedInput:
    """An input the replay skipped: a file it could not read (``session`` is
    ``None``) or a session with a request the engine refused. ``error`` names the
    file, the session and the place (line or JSON path); never message contents."""

    file: str
    session: str | None
    error: str


@dataclass(slots=True)
class ReplayResult:
    """Everything a replay measured (see :mod:`ctxwarden.replay.report_json`)."""

    subjects: list[SubjectResult]
    files: list[str]
    """The input files read (``max_sessions`` stops before the rest)."""
    duration_s: float
    peak_rss_bytes: int
    options: ReplayOptions
    skipped: list[SkippedInput] = field(default_factory=list)
    """Inputs left out of every figure, in the order met (see the module docstring)."""
    duplicates: list[str] = field(default_factory=list)
    """Paths named again (the same file resolved), replayed once (see
    :func:`~ctxwarden.replay.inputs.expand_paths`)."""
    timestamped: int = 0
    """Requests replayed with a recorded timestamp (``ts``): without them and without
    ``turn_seconds``, ``idle_gap`` expires nothing."""

    def subject(self, name: str) -> SubjectResult:
        for s in self.subjects:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(slots=True)
class _State:
    subject: Subject
    result: SubjectResult
    view: RequestView
    metrics: SessionMetrics
    featured: Featured | None = None
    peak_condense_bytes: int | None = None
    """This session's peak allocation per condense (``trace_memory``), merged into the
    result's when the session ends."""
    recover_memo: dict[tuple[bytes, bytes], bool] = field(default_factory=dict)
    validated: set[bytes] = field(default_factory=set)


def _held(original: str, text: str) -> bool:
    """Whether a recalled ``original`` is in an item's ``text``: as it is, or (the
    arguments of an Anthropic call, recalled as the JSON of its ``input`` object, whose
    string values the item's text holds one by one) every string value of it."""
    if original in text:
        return True
    if not original.startswith("{"):
        return False
    leaves = list(decoded_strings(original))  # ``original`` itself when not JSON: not held
    return bool(leaves) and all(leaf in text for leaf in leaves)


def _recoverable(state: _State, a: MessageInfo, b: MessageInfo) -> bool:
    memo_key = (a.key, b.key)
    known = state.recover_memo.get(memo_key)
    if known is None:
        known = False
        for ref in b.refs:
            text = state.subject.recall(ref)
            if text and _held(text, a.text):
                known = True
                break
        state.recover_memo[memo_key] = known
    return known


def _measure(
    state: _State, o: Step, c: Step, strings: Sequence[str], errors: dict[str, int]
) -> tuple[list[str], list[str]]:
    """Support, critical and recoverable figures; returns the missed strings and lines."""
    m = state.metrics
    identical = len(o.messages) == len(c.messages) and all(
        a is b for a, b in zip(o.messages, c.messages, strict=True)
    )
    m.support_total += len(strings)
    m.critical_total += len(errors)
    if identical:
        m.support_visible += len(strings)
        m.critical_visible += len(errors)
        return [], []
    missed = [s for s in strings if not state.view.visible(s)]
    m.support_visible += len(strings) - len(missed)
    lost = [e for e in errors if e not in state.view.errors]
    m.critical_visible += len(errors) - len(lost)
    for a, b in zip(o.messages, c.messages, strict=False):
        if a is not b and a.key != b.key:
            m.condensed_tokens += a.tokens
            if _recoverable(state, a, b):
                m.recoverable_tokens += a.tokens
    return missed, lost


def _subjects(
    configs: Sequence[str | EngineConfig | Subject], baselines: Sequence[str]
) -> list[Subject]:
    subjects = [make_subject(b) for b in baselines]
    subjects += [make_subject(c) for c in configs]
    names = [s.name for s in subjects]
    for i, s in enumerate(subjects):
        if names.count(s.name) > 1:
            s.name = f"{s.name}#{i}"
    return subjects


def run_replay(
    paths: Sequence[str | Path],
    configs: Sequence[str | EngineConfig | Subject] = ("default",),
    *,
    baselines: Sequence[str] = DEFAULT_BASELINES,
    options: ReplayOptions | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Replay sessions / request logs at ``paths`` through baselines and configurations."""
    options = options or ReplayOptions()
    started = time.perf_counter()
    duplicates: list[Path] = []
    files = expand_paths(paths, duplicates)
    read: list[str] = []
    timestamped = 0
    subjects = _subjects(configs, baselines)
    results = [
        SubjectResult(s.name, s.kind, views=WorstViews(options.worst_views)) for s in subjects
    ]
    registry = load_registry()
    counters: dict[str, TokenCounter] = {}
    engine = next((s.engine for s in subjects if isinstance(s, EngineSubject)), None)
    tracing = options.trace_memory and not tracemalloc.is_tracing()
    if tracing:
        tracemalloc.start()
    skipped: list[SkippedInput] = []
    try:
        run = secrets.token_hex(6)
        n = 0
        for index, path in enumerate(files):
            if options.max_sessions is not None and n >= options.max_sessions:
                break  # before the next file is read
            read.append(str(path))
            try:
                sessions = read_sessions(path)
            except ReplayError as exc:
                skipped.append(SkippedInput(str(path), None, str(exc)))
                continue
            for session in sessions:
                if options.max_sessions is not None and n >= options.max_sessions:
                    break
                info = registry.lookup(session.model or _first_model(session))
                if engine is not None:
                    counter = engine.counter_for(info)
                else:
                    spec = registry.tokenizer_for(info)
                    counter = counters.setdefault(str(spec), TokenCounter(spec))
                # every session of this run gets its own engine state, even when two
                # files share an id or the configured store kept states of an earlier run
                key = f"replay-{run}/{n}/{session.id}"
                n += 1
                timestamped += sum(r.ts is not None for r in session.requests)
                try:
                    _replay_session(
                        session, key, subjects, results, counter, info, registry, options,
                        str(path),
                    )  # fmt: skip
                except MalformedRequest as exc:  # this input's fault: the others go on
                    where = f"{path}: session {session.id}: {exc}"
                    skipped.append(SkippedInput(str(path), session.id, where))
                except CtxwardenError as exc:  # name the file and session among hundreds
                    raise ReplayError(f"{path}: session {session.id}: {exc}") from exc
                if progress is not None:
                    progress(index + 1, len(files), session.id)
    finally:
        if tracing:
            tracemalloc.stop()
        for s in subjects:
            s.close()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return ReplayResult(
        results,
        read,
        time.perf_counter() - started,
        rss,
        options,
        skipped,
        [str(d) for d in duplicates],
        timestamped,
    )


def _first_model(session: ReplaySession) -> str | None:
    for r in session.requests:
        model = r.request.get("model")
        if isinstance(model, str):
            return model
    return None


def _replay_session(
    session: ReplaySession,
    key: str,
    subjects: Sequence[Subject],
    results: Sequence[SubjectResult],
    counter: TokenCounter,
    info: Any,
    registry: Any,
    options: ReplayOptions,
    file: str,
) -> None:
    p_openai = registry.pricing_for(info, "openai")
    p_anthropic = registry.pricing_for(info, "anthropic")
    shared: dict[int, MessageInfo] = {}
    shared_by_key: dict[bytes, MessageInfo] = {}
    count = counter.count_text
    credit = options.mention_credit
    original = RequestView(count, shared, shared_by_key, mention_credit=credit)
    states = [
        _State(
            s,
            r,
            RequestView(count, shared, shared_by_key, mention_credit=credit),
            SessionMetrics(session.id, session.model, file=file, source=session.source),
        )
        for s, r in zip(subjects, results, strict=True)
    ]
    prev_ts: float | None = None
    tracing = tracemalloc.is_tracing()
    for turn, rr in enumerate(session.requests):
        ts = rr.ts
        if ts is None and options.turn_seconds is not None:
            ts = turn * options.turn_seconds
        expired = cache_expired(prev_ts, ts, options.idle_gap)
        prev_ts = ts
        o = original.advance(rr.request, rr.api)
        strings: list[str] = []
        if rr.next_action is not None:
            strings = sorted(
                t
                for t in distinctive_tokens(action_text(rr.next_action))
                if t in original.tool_tokens and t not in original.other_tokens
            )
        exact_o = request_cost(
            o.tokens,
            0 if expired else effective_cached(o.cached_tokens, p_openai),
            p_openai,
            writes=False,
        )
        exact_a = request_cost(
            o.tokens,
            0 if expired else effective_cached(o.cached_tokens, p_anthropic),
            p_anthropic,
            writes=True,
        )
        for st in states:
            m = st.metrics
            if tracing:
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            cond, report = st.subject.condense(rr.request, rr.api, key)
            m.ms.append((time.perf_counter() - t0) * 1000)
            if tracing:
                peak = tracemalloc.get_traced_memory()[1] - base
                st.peak_condense_bytes = max(st.peak_condense_bytes or 0, peak)
            prev = st.view.prev
            c = st.view.advance(cond, rr.api)
            if prev is not None and c.cached_tokens < prev.tokens:
                m.prefix_breaks += 1
            cached_o = 0 if expired else effective_cached(c.cached_tokens, p_openai)
            cached_a = 0 if expired else effective_cached(c.cached_tokens, p_anthropic)
            m.tokens.append(c.tokens)
            m.exact_tokens.append(o.tokens)
            m.cached_tokens.append(cached_o)
            m.cost_openai.append(request_cost(c.tokens, cached_o, p_openai, writes=False))
            m.cost_anthropic.append(request_cost(c.tokens, cached_a, p_anthropic, writes=True))
            m.exact_cost_openai += exact_o
            m.exact_cost_anthropic += exact_a
            missed, lost = _measure(st, o, c, strings, original.tool_errors)
            violations = check_integrity(rr.request, cond, rr.api, o, c, st.validated)
            m.violations.update(violations)
            if isinstance(st.subject, MaskSubject) and report.get("masked"):
                report = {
                    **report,
                    "transforms": {
                        "observation_mask": {
                            "count": report["masked"],
                            "tokens_saved": o.tokens - c.tokens,
                        }
                    },
                }
            m.add_report(report)
            if st.subject.name != "exact":
                candidate = Featured.of(turn, rr, cond, violations, missed, lost)
                if st.featured is None or candidate.rank >= st.featured.rank:
                    st.featured = candidate
    for st in states:  # the session ended: only now does it join the figures
        st.result.sessions.append(st.metrics)
        if st.peak_condense_bytes is not None:
            known = st.result.peak_condense_bytes or 0
            st.result.peak_condense_bytes = max(known, st.peak_condense_bytes)
        if st.featured is not None:
            st.result.views.offer(st.metrics, st.featured)
