"""Segments of a classified conversation, with recency and relevance sets."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from ctxwarden.commands import command_of
from ctxwarden.errors import json_pointer
from ctxwarden.memo import (
    OBJECT_BYTES,
    SESSION_MEMO_BYTES,
    SESSION_MEMO_LIMIT,
    BoundedMemo,
)
from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import Part, Path, TextPart, ToolCallPart, ToolResultPart
from ctxwarden.passes.base import Segment, SegmentKind
from ctxwarden.pipeline.presets import TEXT_MATCH_CHARS, PipelineConfig, ToolPolicy
from ctxwarden.signals import distinctive_set, paths_in
from ctxwarden.tokens.counter import TokenCounter

__all__ = [
    "SegmentCache",
    "SegmentView",
    "never_condensed",
    "segment_view",
    "text_result_match",
]


@dataclass(frozen=True, slots=True)
class SegmentView:
    """All segments in order, which are eligible, recent and relevant."""

    segments: list[Segment]
    eligible: frozenset[Path]
    recent: frozenset[Path]
    relevant: frozenset[Path]
    visible: frozenset[str] = frozenset()
    """Distinctive strings of the agent's own messages and tool calls that no pass of
    the pipeline will ever condense (see :func:`never_condensed`): a placeholder may
    leave those out of its mentions, since they stay shown."""
    by_path: dict[Path, Segment] = field(default_factory=dict, compare=False)
    """Every segment by its path (filled from ``segments``)."""
    by_pointer: dict[str, Segment] = field(default_factory=dict, compare=False)
    """Every segment by its path as a JSON pointer, the session state's key (filled
    from ``segments``)."""
    saved: dict[tuple[Path, str], int] = field(default_factory=dict, compare=False)
    """Tokens each candidate replacement saves, memoized for this request only."""

    def __post_init__(self) -> None:
        if not self.by_path:
            self.by_path.update((s.path, s) for s in self.segments)
        if not self.by_pointer:
            self.by_pointer.update((json_pointer(s.path), s) for s in self.segments)

    def segment(self, path: Path) -> Segment | None:
        return self.by_path.get(path)

    def text(self, path: Path) -> str:
        segment = self.by_path.get(path)
        return segment.text if segment else ""


@dataclass(slots=True)
class _Built:
    """What the segment walk knows after the first ``len(keys)`` messages."""

    keys: list[str]
    segments: list[Segment] = field(default_factory=list)
    calls: dict[str, ToolCallPart] = field(default_factory=dict)
    positions: dict[str, int] = field(
        default_factory=lambda: {
            "tool_output": 0,
            "tool_args": 0,
            "assistant_text": 0,
            "user_text": 0,
        }
    )
    commands: list[str] = field(default_factory=list)
    visible: set[str] = field(default_factory=set)
    by_path: dict[Path, Segment] = field(default_factory=dict)
    by_pointer: dict[str, Segment] = field(default_factory=dict)
    """The segments by path and by JSON pointer (:class:`SegmentView`), kept with the
    walk: a resent history's are not made again."""
    turn_starts: list[int] = field(default_factory=list)
    """Each message's turn (:func:`_turn_start`)."""
    weight: int = 0
    """Estimated bytes the walk keeps alive (see :func:`_walked_weight`)."""


class SegmentCache:
    """Per-session memory of the last walk, so a request that extends the previous one
    (the usual case: agents append) only walks its new messages. Keyed by session; at
    most ``max_sessions`` are kept and at most ``max_bytes`` estimated (an entry holds
    one conversation's segment texts, shared with the request they came from, and the
    strings derived from them), under the process's memo budget
    (:mod:`ctxwarden.memo`); the least recently used go first. Purely an optimisation:
    the result is the same as walking everything."""

    def __init__(
        self, max_sessions: int = SESSION_MEMO_LIMIT, max_bytes: int = SESSION_MEMO_BYTES
    ) -> None:
        self._built: BoundedMemo[str, _Built] = BoundedMemo(max_sessions, max_bytes)

    def take(self, session: str, keys: list[str]) -> _Built:
        """The state to extend for a conversation with message ``keys`` (fresh when the
        cached walk is not a prefix of it). The entry is removed, so two requests of a
        session at once never extend the same walk; :meth:`put` it back."""
        built = self._built.pop(session, None)
        if built is not None and keys[: len(built.keys)] == built.keys:
            return built
        return _Built(keys=[])

    def put(self, session: str, built: _Built) -> None:
        self._built.put(session, built, built.weight)

    def __len__(self) -> int:
        return len(self._built)

    @property
    def weight(self) -> int:
        """The estimated bytes the cached walks keep alive."""
        return self._built.weight


def segment_view(
    conversation: Conversation,
    counter: TokenCounter,
    config: PipelineConfig,
    *,
    cache: SegmentCache | None = None,
    session: str = "",
    message_keys: list[str] | None = None,
) -> SegmentView:
    """Collect segments: tool-output texts and assistant / user message texts.

    With a ``cache`` and the messages' content ``message_keys`` (one per message), only
    messages past the previous walk of ``session`` are walked again.
    """
    messages = conversation.messages
    keys = message_keys if message_keys is not None and len(message_keys) == len(messages) else None
    if keys is None:
        cache = None  # without per-message keys a cached walk cannot be matched
    built = _Built([]) if cache is None else cache.take(session, keys or [])
    for i in range(len(built.keys), len(messages)):
        before = (len(built.segments), len(built.commands), len(built.visible))
        _walk_message(built, i, messages[i].role, messages[i].parts, counter, config)
        built.turn_starts.append(_turn_start(built.turn_starts, messages, i))
        built.keys.append(keys[i] if keys is not None else "")
        built.weight += _walked_weight(built, *before)
    segments = list(built.segments)
    by_path = dict(built.by_path)  # copies: the walk goes on for the next request
    view = SegmentView(
        segments=segments,
        eligible=_eligible(conversation, segments, config),
        recent=_recent(segments, config, built.turn_starts),
        relevant=_relevant(segments, built.commands, config),
        visible=frozenset(built.visible),
        by_path=by_path,
        by_pointer=dict(built.by_pointer),
    )
    if cache is not None:  # only once this request is done reading it
        cache.put(session, built)
    return view


def _walked_weight(built: _Built, segments: int, commands: int, visible: int) -> int:
    """Estimated bytes one walked message added to ``built`` (it had ``segments``,
    ``commands`` and ``visible`` entries before): its key and turn, its segments (each text
    counted, though it is shared with the message, and its two index entries, the
    pointer by a typical length), its commands and the strings newly made visible (by
    count, at a typical identifier's length)."""
    added = 3 * OBJECT_BYTES  # the key, its turn and the call it may have registered
    added += sum(6 * OBJECT_BYTES + 24 + len(s.text) for s in built.segments[segments:])
    added += sum(OBJECT_BYTES + len(c) for c in built.commands[commands:])
    return added + (len(built.visible) - visible) * (OBJECT_BYTES + 24)


def never_condensed(segment: Segment, config: PipelineConfig) -> bool:
    """Whether no pass of ``config`` may ever rewrite ``segment`` (an agent's text or
    call), judged by its kind and size alone: what it shows stays shown on every later
    turn. User texts are never condensed; the agent's prose is while ``summarize`` runs
    and it is large enough; call arguments while ``trim_args`` runs, they hold a value
    long enough to trim and their tool is not excluded."""
    if segment.kind == "assistant_text":
        summarize = config.summarize
        on = summarize.enabled and "summarize" in config.order
        return not on or segment.tokens < summarize.min_tokens
    if segment.kind == "tool_args":
        if _excluded(segment, config.tools.get(segment.tool_name)):
            return True
        trim = config.trim_args
        on = trim.enabled and "trim_args" in config.order
        return (
            not on or segment.tokens < trim.min_tokens or len(segment.text) <= trim.max_value_chars
        )
    return segment.kind == "user_text"


def _walk_message(
    built: _Built,
    i: int,
    role: str,
    parts: tuple[Part, ...],
    counter: TokenCounter,
    config: PipelineConfig,
) -> None:
    pending: _TextResult | None = None  # the result a header block opened
    for part in parts:
        if isinstance(part, ToolCallPart):
            built.calls[part.call_id] = part
            built.commands.append(_command(part))
            if part.arguments_path is None:  # not a string: never rewritten
                built.visible |= distinctive_set(part.arguments)
            else:
                _add_segment(
                    built,
                    counter,
                    "tool_args",
                    part.arguments_path,
                    i,
                    part.arguments,
                    tool_name=part.name,
                    call_id=part.call_id,
                )
                if never_condensed(built.segments[-1], config):
                    built.visible |= distinctive_set(part.arguments)
        elif isinstance(part, ToolResultPart):
            call = built.calls.get(part.call_id)
            name = call.name if call else ""
            command = _command(call) if call else ""
            for sub in part.content:
                if isinstance(sub, TextPart):
                    _add_segment(
                        built,
                        counter,
                        "tool_output",
                        sub.path,
                        i,
                        sub.text,
                        tool_name=name,
                        command=command,
                        call_id=part.call_id,
                        is_error=part.is_error,
                    )
        elif isinstance(part, TextPart) and role in ("assistant", "user"):
            if role == "user" and config.text_tool_results:
                result, pending = _user_text_result(part, config.text_tool_results, pending)
                if result is not None:
                    tool, command, call_id = result
                    _add_segment(built, counter, "tool_output", part.path, i, part.text,
                                 tool_name=tool, command=command, call_id=call_id)  # fmt: skip
                    continue
            kind: SegmentKind = "assistant_text" if role == "assistant" else "user_text"
            _add_segment(built, counter, kind, part.path, i, part.text)
            if never_condensed(built.segments[-1], config):
                built.visible |= distinctive_set(part.text)


_TextResult = tuple[str, str, str]
"""The tool, command and (made-up) call id of a tool result sent as user text."""


def _user_text_result(
    part: TextPart, patterns: tuple[str, ...], pending: _TextResult | None
) -> tuple[_TextResult | None, _TextResult | None]:
    """The result a user message's text block is (``None``: a text of the user's), and
    the result the next block is.

    A block that a pattern of :attr:`PipelineConfig.text_tool_results` matches is a
    result of the tool it names, unless it is the match alone (a header, as Cline sends
    ``[read_file for 'a.py'] Result:`` in a block of its own): the header stays the
    user's text and the next text block is that result. Each result gets a call id of
    its own (``text:`` and its header's or its own JSON pointer)."""
    matched = text_result_match(part.text, patterns)
    if matched is None:
        return pending, None
    tool, command, alone = matched
    result = (tool, command, f"text:{json_pointer(part.path)}")
    return (None, result) if alone else (result, None)


def text_result_match(text: str, patterns: tuple[str, ...]) -> tuple[str, str, bool] | None:
    """The tool and command the first of ``patterns`` matching at the start of ``text``
    (its first :data:`~ctxwarden.pipeline.presets.TEXT_MATCH_CHARS` characters) names
    (a command in single quotes without them), and whether the match is all the text
    holds; ``None`` when none matches."""
    head = text[:TEXT_MATCH_CHARS]
    for pattern in _compiled(patterns):
        match = pattern.match(head)
        if match is None:
            continue
        command = match.groupdict().get("command") or ""
        if len(command) > 1 and command[0] == command[-1] == "'" and command.count("'") == 2:
            command = command[1:-1]
        return match.group("tool") or "", command, not text[match.end() :].strip()
    return None


@functools.lru_cache(maxsize=16)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def _add_segment(
    built: _Built,
    counter: TokenCounter,
    kind: SegmentKind,
    path: Path,
    message_index: int,
    text: str,
    *,
    tool_name: str = "",
    command: str = "",
    call_id: str = "",
    is_error: bool = False,
) -> None:
    """Append the next segment of ``kind`` (its position: how many came before)."""
    segment = Segment(
        path=path,
        message_index=message_index,
        position=built.positions[kind],
        kind=kind,
        text=text,
        tokens=counter.count_text(text),
        tool_name=tool_name,
        command=command,
        call_id=call_id,
        is_error=is_error,
    )
    built.segments.append(segment)
    built.by_path[path] = segment
    built.by_pointer[json_pointer(path)] = segment
    built.positions[kind] += 1


def _eligible(
    conversation: Conversation, segments: list[Segment], config: PipelineConfig
) -> frozenset[Path]:
    """Paths a pass may rewrite: outside protected messages, of an editable safety
    class, and not excluded by the tool's policy. Recomputed every request (protection
    moves with the newest messages), from the segments: the walk lists every text of a
    message that a pass could rewrite (tool outputs, tool-call arguments kept as text,
    assistant and user texts) and nothing else, and ``classify`` gives each of them an
    editable class exactly when its message is not protected."""
    protected = protected_message_indexes(conversation)
    tools = config.tools
    return frozenset(
        s.path
        for s in segments
        if s.message_index not in protected and not (tools and _excluded(s, tools.get(s.tool_name)))
    )


def _excluded(segment: Segment, policy: ToolPolicy | None) -> bool:
    """Whether its tool's ``policy`` keeps ``segment`` as it is: an excluded tool's
    outputs and call arguments, a small output under the tool's ``min_tokens``."""
    if policy is None or segment.kind not in ("tool_output", "tool_args"):
        return False
    if policy.exclude:
        return True
    small = policy.min_tokens is not None and segment.tokens < policy.min_tokens
    return segment.kind == "tool_output" and small


def _command(call: ToolCallPart) -> str:
    """The command ``call`` runs: the adapter's, else read from its arguments."""
    return command_of(call.arguments) if call.command is None else call.command


def _recent(segments: list[Segment], config: PipelineConfig, turn_of: list[int]) -> frozenset[Path]:
    """The segments the recency rules keep whole: the newest outputs (counted per tool
    result, all of whose texts stay together: a shell output's stdout and stderr, a
    result's text blocks), and the texts and calls of the newest turns (a turn's
    several text blocks, or parallel calls, together, even when each is an item of its
    own: ``turn_of`` maps a message to its turn, :func:`_turn_start`)."""
    recent: set[Path] = set()
    outputs = [s for s in segments if s.kind == "tool_output"]  # a result's are adjacent
    keep = config.keep_newest_outputs
    if config.keep_newest_percent:
        results = len({(s.message_index, s.call_id) for s in outputs})
        keep = max(keep, math.ceil(results * config.keep_newest_percent / 100))
    used = count = 0
    end = len(outputs)
    while end > 0:  # the newest result first
        start = end - 1
        key = (outputs[start].message_index, outputs[start].call_id)
        while start > 0 and (outputs[start - 1].message_index, outputs[start - 1].call_id) == key:
            start -= 1
        used += sum(s.tokens for s in outputs[start:end])
        if count >= keep and used > config.recency_tokens:
            break
        recent.update(s.path for s in outputs[start:end])
        count += 1
        end = start
    recent |= _newest_turns(segments, "assistant_text", config.keep_newest_texts, turn_of)
    recent |= _newest_turns(segments, "tool_args", config.keep_newest_calls, turn_of)
    return frozenset(recent)


def _turn_start(starts: list[int], messages: tuple[Message, ...], i: int) -> int:
    """The index of the first message of message ``i``'s turn (``starts`` holds those
    of the messages before it): a run of consecutive assistant items is one turn (a
    Responses turn's reasoning, text and parallel calls are items of their own); any
    other message is a turn alone."""
    continues = i > 0 and messages[i].role == "assistant" == messages[i - 1].role
    return starts[-1] if continues else i


def _newest_turns(segments: list[Segment], kind: str, turns: int, turn_of: list[int]) -> set[Path]:
    """The ``kind`` segments of the newest ``turns`` turns holding any (a message's
    several text blocks, or a turn's parallel calls, count as one turn)."""
    out: set[Path] = set()
    seen: set[int] = set()
    for segment in reversed(segments):  # in message order: a turn's are adjacent
        if segment.kind != kind:
            continue
        turn = turn_of[segment.message_index]
        if turn not in seen:
            if len(seen) == turns:
                break
            seen.add(turn)
        out.add(segment.path)
    return out


def _relevant(
    segments: list[Segment], commands: list[str], config: PipelineConfig
) -> frozenset[Path]:
    if config.relevance_turns <= 0 or not commands:
        return frozenset()
    focus: set[str] = set()
    for command in commands[-config.relevance_turns :]:
        focus |= paths_in(_command_line(command))
    if not focus:
        return frozenset()
    # a relative path in focus is the file of an absolute one ending with it (a read
    # of ``src/a.py`` and an edit of ``/repo/src/a.py``), and the other way round
    focus_forms = focus | _relative_forms(focus)
    relative_focus = any(not p.startswith("/") for p in focus)
    return frozenset(
        s.path
        for s in segments
        if s.kind == "tool_output"
        and s.command
        and _about(paths_in(_command_line(s.command)), focus, focus_forms, relative_focus)
    )


def _about(
    paths: frozenset[str], focus: set[str], focus_forms: set[str], relative_focus: bool
) -> bool:
    """Whether ``paths`` (an output's) and ``focus`` name a file in common: the same
    path, or a relative path of one and an absolute path of the other that ends with
    ``/`` and it (on whole path components: ``b.py`` is not ``/repo/ab.py``)."""
    if not paths.isdisjoint(focus_forms):
        return True
    return relative_focus and not _relative_forms(paths).isdisjoint(focus)


def _relative_forms(paths: Iterable[str]) -> set[str]:
    """The relative paths each absolute path of ``paths`` ends with, on whole path
    components (``/repo/src/a.py``: ``repo/src/a.py``, ``src/a.py`` and ``a.py``)."""
    out: set[str] = set()
    for path in paths:
        if path.startswith("/"):
            parts = path.split("/")
            out.update("/".join(parts[i:]) for i in range(1, len(parts)) if parts[i])
    return out


_WHERE_KEYS = frozenset({"workdir", "cwd", "dir", "directory", "working_directory"})


def _command_line(command: str) -> str:
    """The command and the call's other arguments (``command_of`` appends them as
    JSON) without the directory it ran in: a ``workdir`` path would put every output of
    that directory in focus, while an editor's ``path`` argument is the file itself."""
    head, sep, tail = command.partition(' {"')
    if not sep:
        return command
    try:
        args = orjson.loads('{"' + tail)
    except orjson.JSONDecodeError:
        return command  # the command itself held ' {"'
    if not isinstance(args, dict):
        return command
    kept = [str(v) for k, v in args.items() if k not in _WHERE_KEYS]
    return " ".join([head, *kept])
