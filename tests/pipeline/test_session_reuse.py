"""What an engine keeps from a session's previous request (segment walks, element
changes, rewritten messages) only saves work: a warm engine sends the bytes and the
report of an engine that keeps nothing (a new one on the same store for every request),
whatever the client resends under the session: an extension, an older shorter history,
an edited output, the turns out of order."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import CondenseResult
from ctxwarden.io import bundled_sessions, load_session, session_requests
from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.parts import TextPart, ToolCallPart, ToolResultPart
from ctxwarden.passes.base import Replacement
from ctxwarden.pipeline.presets import resolve_pipeline
from ctxwarden.pipeline.rewrite import Rewriter, apply_replacements
from ctxwarden.pipeline.segments import segment_view
from ctxwarden.pipeline.sent import SentElements
from ctxwarden.store import MemoryStore
from ctxwarden.tokens.counter import TokenCounter
from tests.passes.convo import FORCE, make_engine
from tests.passes.strategies import chat_requests, fresh_session
from tests.pipeline.test_cross_api_properties import APIS, HISTORIES, PROPERTY, turn_requests

_PARSER = make_engine()
_COUNTER = TokenCounter()


def _outcome(result: CondenseResult) -> tuple[bytes, bytes]:
    report = {k: v for k, v in result.report.items() if k != "duration_ms"}
    return orjson.dumps(result.request), orjson.dumps(report, option=orjson.OPT_SORT_KEYS)


def _same_as_cold(
    preset: str, api: str, requests: list[dict[str, Any]], pipeline: dict[str, Any]
) -> int:
    """Condense ``requests`` as one session on a warm engine and, each, on a new engine
    sharing a second store; assert both answer the same. Returns the rewritten count."""
    warm = make_engine(preset, pipeline)
    store = MemoryStore()
    session = fresh_session()
    rewritten = 0
    for k, request in enumerate(requests):
        cold = make_engine(preset, pipeline, store=store)
        expected = _outcome(cold.condense(copy.deepcopy(request), api=api, session=session))
        got = warm.condense(copy.deepcopy(request), api=api, session=session)
        assert _outcome(got) == expected, f"request {k}"
        rewritten += bool(got.report["rewritten"])
    return rewritten


def _resent(requests: list[dict[str, Any]], order: list[int]) -> list[dict[str, Any]]:
    """The requests in ``order``: the history grows, then an older one comes again."""
    return [requests[i] for i in order]


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
@pytest.mark.parametrize("session", bundled_sessions()[:2], ids=lambda p: p.name[:40])
def test_a_warm_engine_answers_a_resent_or_edited_history_as_a_cold_one(
    session: Path, preset: str
) -> None:
    requests = [r for r, _ in session_requests(load_session(session))]
    n = len(requests)
    edited = copy.deepcopy(requests[-1])
    tool = next(m for m in edited["messages"][2:] if m["role"] == "tool")
    tool["content"] = "an output the client changed since\n" * 40
    order = [*range(n), n // 2, n - 1, n // 3, *range(n // 3 + 1, n)]
    sequence = [*_resent(requests, order), edited, requests[-1], edited]
    assert _same_as_cold(preset, "openai.chat", sequence, FORCE) > 0


@pytest.mark.parametrize("api", APIS)
@PROPERTY
@given(data=st.data())
def test_a_warm_engine_answers_any_resent_turn_as_a_cold_one(api: str, data: st.DataObject) -> None:
    history = data.draw(HISTORIES[api], label="history")
    requests = turn_requests(api, history, data.draw(st.integers(3, 6), label="turns"))
    order = data.draw(
        st.lists(st.integers(0, len(requests) - 1), min_size=2, max_size=8), label="resent"
    )
    _same_as_cold("balanced", api, [*requests, *_resent(requests, order)], FORCE)


@settings(max_examples=60, deadline=None)
@given(chat_requests(), st.booleans())
def test_eligible_paths_are_the_editable_texts_of_unprotected_messages(
    wire: dict[str, Any], policy: bool
) -> None:
    _check_eligible("openai.chat", wire, policy)


@pytest.mark.parametrize("api", APIS)
@PROPERTY
@given(data=st.data())
def test_eligible_paths_are_the_editable_texts_in_every_api(api: str, data: st.DataObject) -> None:
    _check_eligible(api, data.draw(HISTORIES[api], label="history"), data.draw(st.booleans()))


def _check_eligible(api: str, wire: dict[str, Any], policy: bool) -> None:
    """The segments of unprotected messages, but outputs a tool policy keeps: each
    message's texts of an editable class, read part by part."""
    small, kept = {"min_tokens": 30}, {"exclude": True}
    tools = {"bash": small, "shell": small, "python": kept, "write_file": kept} if policy else {}
    config = resolve_pipeline("balanced", {"tools": tools})
    conversation = _PARSER.parse(wire, api)
    view = segment_view(conversation, _COUNTER, config)
    protected = protected_message_indexes(conversation)
    expected: set[Any] = set()
    for i, message in enumerate(conversation.messages):
        if i in protected:
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.arguments_path is not None:
                rule = config.tools.get(part.name)
                if rule is None or not rule.exclude:  # an excluded tool's calls stay
                    expected.add(part.arguments_path)
            elif isinstance(part, ToolResultPart):
                for sub in part.content:
                    if not isinstance(sub, TextPart) or not sub.safety.editable:
                        continue
                    segment = view.segment(sub.path)
                    assert segment is not None
                    rule = config.tools.get(segment.tool_name)
                    small = (
                        rule is not None
                        and rule.min_tokens is not None
                        and (segment.tokens < rule.min_tokens)
                    )
                    kept = rule is not None and (rule.exclude or small)
                    if not kept:
                        expected.add(sub.path)
            elif (
                isinstance(part, TextPart)
                and message.role in ("assistant", "user")
                and part.safety.editable
            ):
                expected.add(part.path)
    assert view.eligible == expected


def _placeholders(wire: dict[str, Any], text: str) -> dict[Any, Replacement]:
    conversation = _PARSER.parse(wire, "openai.chat")
    return {
        p.path: Replacement(f"{text} {i}", "mask")
        for i, p in enumerate(p for m in conversation.messages for p in m.text_parts())
    }


@settings(max_examples=40, deadline=None)
@given(chat_requests(), st.data())
def test_kept_changes_and_rewrites_equal_fresh_ones(wire: dict[str, Any], data: Any) -> None:
    """A kept answer is only given back while it is the answer: the same texts on the
    same messages; another text, or a message that changed, is worked out again."""
    sent, rewriter = SentElements(), Rewriter()
    conversation = _PARSER.parse(wire, "openai.chat")
    view = segment_view(conversation, _COUNTER, resolve_pipeline("balanced", {}))
    hashes = [f"h{i}" for i in range(len(conversation.messages) + 1)]

    def saved(path: Any, rep: Replacement) -> int:
        segment = view.segment(path)
        return segment.tokens - _COUNTER.count_text(rep.text) if segment else 0

    def check(reps: dict[Any, Replacement], hashes: list[str]) -> None:
        fresh = SentElements().changes("s", hashes, reps, view.segment, saved)
        assert dict(sent.changes("s", hashes, reps, view.segment, saved)) == dict(fresh)
        got = rewriter.rewrite("s", conversation, reps)
        assert got.messages == apply_replacements(conversation, reps).messages

    first = _placeholders(wire, "[ctxwarden: a]")
    chosen = data.draw(st.lists(st.sampled_from(sorted(first, key=str)), unique=True))
    reps = {p: first[p] for p in chosen}
    check(reps, hashes)
    check(reps, hashes)  # kept
    other = {p: Replacement(r.text + " (again)", "mask") for p, r in reps.items()}
    check(other, hashes)  # other texts
    edited = [*hashes[:-1], "changed"] if len(hashes) > 1 else hashes
    check(other, edited)  # the last message changed


def test_a_new_message_object_at_a_kept_index_is_rewritten_again() -> None:
    thoughts = [{"type": "text", "text": "first thoughts"}, {"type": "text", "text": "plan"}]
    wire = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": thoughts},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "done"},
        ],
    }
    rewriter = Rewriter()
    conversation = _PARSER.parse(wire, "openai.chat")
    reps = {("messages", 1, "content", 0, "text"): Replacement("[ctxwarden: a]", "summarize")}
    rewriter.rewrite("s", conversation, reps)
    changed = copy.deepcopy(wire)
    changed["messages"][1]["content"][1]["text"] = "another plan"
    other = _PARSER.parse(changed, "openai.chat")
    got = rewriter.rewrite("s", other, reps)
    assert got.messages == apply_replacements(other, reps).messages
    assert got.messages[1].parts[1] is other.messages[1].parts[1]
