"""The parse and classify memos give exactly what parsing and classifying afresh give.

Agents resend their history, so the adapters reuse a message parsed before (same JSON
at the same position) and classification reuses a classified copy. These properties
compare every request of a growing conversation, turn by turn, with a parse and a
classification done without any memo.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.adapters import base, get_adapter, openai_chat
from ctxwarden.model import classify
from ctxwarden.model.classify import _classify_part, protected_message_indexes
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.hashing import element_hashes, item_digest
from tests.passes.strategies import chat_requests

classify_module = importlib.import_module("ctxwarden.model.classify")


def _classify_fresh(conversation: Conversation) -> Conversation:
    """The part-by-part classification, no memo (the reference)."""
    protected = protected_message_indexes(conversation)
    seen: set[str] = set()
    messages: list[Message] = []
    for i, message in enumerate(conversation.messages):
        parts = tuple(_classify_part(p, i in protected, seen) for p in message.parts)
        messages.append(replace(message, parts=parts))
    system = tuple(_classify_part(p, True, seen) for p in conversation.system)
    return replace(conversation, messages=tuple(messages), system=system)


def _parse_fresh(request: dict[str, Any]) -> Conversation:
    memo: base.ItemMemo = {}
    messages, hashes = base.parse_items(request["messages"], "messages", openai_chat._message, memo)
    assert hashes == tuple(item_digest(m) for m in request["messages"])
    return messages  # type: ignore[return-value]


@settings(max_examples=60, deadline=None)
@given(request=chat_requests(), shift=st.booleans())
def test_memoized_parse_and_classify_equal_fresh_ones(request: dict[str, Any], shift: bool) -> None:
    adapter = get_adapter("openai.chat")
    messages = request["messages"]
    for k in range(2, len(messages) + 1):  # every prefix, as an agent's turns grow
        turn = {**request, "messages": [dict(m) for m in messages[:k]]}
        if shift and k % 2:  # the same items one position later are other items
            turn["messages"].insert(2, {"role": "user", "content": "also check the docs"})
        parsed = adapter.parse(turn)
        assert parsed.messages == _parse_fresh(turn)
        assert element_hashes(parsed)[1:] == [item_digest(m) for m in turn["messages"]]
        assert classify(parsed) == _classify_fresh(parsed)
        assert classify(parsed) == classify(adapter.parse(turn))  # second time: memo hits


def test_memos_stay_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(base, "MAX_MEMO_ITEMS", 3)
    monkeypatch.setattr(classify_module._MEMO, "max_objects", 3)
    request = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": f"message {i}"} for i in range(10)],
    }
    conversation = get_adapter("openai.chat").parse(request)
    classify(conversation)
    assert len(openai_chat._MEMO) <= 3
    assert len(classify_module._MEMO) <= 3


@settings(max_examples=40, deadline=None)
@given(request=chat_requests(), data=st.data())
def test_memoized_rewrite_equals_a_full_scan(request: dict[str, Any], data: st.DataObject) -> None:
    from ctxwarden.passes.base import Replacement
    from ctxwarden.pipeline import condenser

    conversation = classify(get_adapter("openai.chat").parse(request))
    paths = [
        p.path
        for m in conversation.messages
        for p in m.text_parts()
        if p.path[0] == "messages" and isinstance(p.path[1], int)
    ]
    chosen = data.draw(st.lists(st.sampled_from(paths), unique=True)) if paths else []
    text = data.draw(st.sampled_from(["[ctxwarden: a]", "[ctxwarden: b]"]))
    applied = {p: Replacement(f"{text} {i}", "mask") for i, p in enumerate(chosen)}
    scanned = tuple(condenser._apply_to_message(m, applied) for m in conversation.messages)
    first = condenser._apply(conversation, applied)
    again = condenser._apply(conversation, applied)  # served from the memo
    assert first.messages == scanned == again.messages
    other = {p: Replacement("[ctxwarden: other]", "mask") for p in chosen}
    assert condenser._apply(conversation, other).messages == tuple(
        condenser._apply_to_message(m, other) for m in conversation.messages
    )


def test_a_full_memo_drops_its_oldest_quarter_not_everything() -> None:
    from ctxwarden.memo import remember

    memo: dict[int, int] = {}
    for i in range(8):
        remember(memo, i, i, 8)
    assert list(memo) == list(range(8))
    remember(memo, 8, 8, 8)  # full: the two oldest go, the rest keep their hits
    assert list(memo) == [2, 3, 4, 5, 6, 7, 8]
    big = {i: i for i in range(100)}  # over a lowered bound: back under it at once
    remember(big, 100, 100, 8)
    assert len(big) <= 8 and 100 in big and 99 in big
