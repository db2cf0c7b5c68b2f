"""The incremental segment walk gives exactly the view of a full walk."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import Engine, EngineConfig
from ctxwarden.model.hashing import element_hashes
from ctxwarden.pipeline.presets import resolve_pipeline
from ctxwarden.pipeline.segments import SegmentCache, SegmentView, segment_view
from ctxwarden.tokens.counter import TokenCounter
from tests.passes.strategies import chat_requests

_ENGINE = Engine(EngineConfig(store={"backend": "memory"}))
_COUNTER = TokenCounter()
_CONFIG = resolve_pipeline("balanced", {"tools": {"bash": {"min_tokens": 30}}})


def _view(wire: dict[str, Any], cache: SegmentCache | None, session: str) -> SegmentView:
    conversation = _ENGINE.parse(wire, "openai.chat")
    keys = element_hashes(conversation)[1:]
    return segment_view(
        conversation, _COUNTER, _CONFIG, cache=cache, session=session, message_keys=keys
    )


def _same(a: SegmentView, b: SegmentView) -> None:
    assert a.segments == b.segments
    assert (a.eligible, a.recent, a.relevant, a.visible) == (
        b.eligible,
        b.recent,
        b.relevant,
        b.visible,
    )


@settings(max_examples=40, deadline=None)
@given(chat_requests(), st.integers(min_value=0, max_value=5))
def test_growing_and_diverging_requests_match_a_full_walk(wire: dict[str, Any], cut: int) -> None:
    messages = wire["messages"]
    cache = SegmentCache(max_sessions=2)
    for end in range(1, len(messages) + 1):
        prefix = {**wire, "messages": messages[:end]}
        _same(_view(prefix, cache, "s"), _view(prefix, None, ""))
    # a request that is not an extension (history edited by the client) walks afresh
    edited = [*messages[: max(1, len(messages) - cut - 1)], {"role": "user", "content": "new"}]
    changed = {**wire, "messages": edited}
    _same(_view(changed, cache, "s"), _view(changed, None, ""))
    # other sessions do not disturb each other; the oldest is dropped past the cap
    _same(_view(wire, cache, "t"), _view(wire, None, ""))
    _same(_view(wire, cache, "u"), _view(wire, None, ""))
    _same(_view(wire, cache, "s"), _view(wire, None, ""))


def test_an_extension_walks_only_the_new_messages(monkeypatch: Any) -> None:
    import ctxwarden.pipeline.segments as segments

    walked: list[int] = []
    real = segments._walk_message

    def counting(built: Any, i: int, *args: Any) -> None:
        walked.append(i)
        real(built, i, *args)

    monkeypatch.setattr(segments, "_walk_message", counting)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    messages += [{"role": "user", "content": f"question {i}"} for i in range(5)]
    cache = SegmentCache()
    _view({"model": "gpt-4o", "messages": messages[:4]}, cache, "s")
    walked.clear()
    _view({"model": "gpt-4o", "messages": messages}, cache, "s")
    assert walked == [4, 5]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ('bash -lc cat setup.py {"workdir":"/Users/me/repo"}', "bash -lc cat setup.py"),
        ('view {"path":"src/app/models.py"}', "view src/app/models.py"),
        ('python t.py --cfg {"p": 1} src/b.py', 'python t.py --cfg {"p": 1} src/b.py'),
        ("ls -la", "ls -la"),
    ],
)
def test_relevance_reads_the_file_not_the_directory(command: str, expected: str) -> None:
    from ctxwarden.pipeline.segments import _command_line

    assert _command_line(command) == expected


def test_cached_walks_are_bounded_by_bytes_and_still_give_full_walks(
    no_memo_budget: None,
) -> None:
    """Many sessions with large outputs: the cache keeps its estimate under its byte
    bound (dropping the least recently used), and every view still equals a full walk,
    whether its session's walk was kept or dropped."""
    cache = SegmentCache(max_sessions=512, max_bytes=400_000)
    wires = []
    for n in range(30):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task"},
        ]
        for k in range(3):
            args = f'{{"command": "cat f{k}.py"}}'
            call = {"id": f"c{n}_{k}", "type": "function",
                    "function": {"name": "bash", "arguments": args}}  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append(
                {"role": "tool", "tool_call_id": f"c{n}_{k}", "content": f"{n} {k} " * 5_000}
            )
        wires.append({"model": "gpt-4o", "messages": messages})
    for n, wire in enumerate(wires):
        _same(_view(wire, cache, f"s{n}"), _view(wire, None, ""))
        assert cache.weight <= 400_000
    assert 0 < len(cache) < 30  # each walk weighs ~100 KB: only the newest few are kept
    for n in (0, 29):  # a dropped walk and a kept one, extended by one message
        wire = wires[n]
        grown = {**wire, "messages": [*wire["messages"], {"role": "user", "content": "more"}]}
        _same(_view(grown, cache, f"s{n}"), _view(grown, None, ""))


def test_a_session_walk_weighs_at_least_its_texts(no_memo_budget: None) -> None:
    cache = SegmentCache()
    text = "y" * 50_000
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "next"},
    ]
    _view({"model": "gpt-4o", "messages": messages}, cache, "s")
    assert 50_000 <= cache.weight <= 200_000
