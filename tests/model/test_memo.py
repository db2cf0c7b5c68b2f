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

import orjson
import pytest
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
    memo = base.item_memo()
    parsed = base.parse_items(request["messages"], "messages", openai_chat._message, memo)
    assert parsed.hashes == tuple(item_digest(m) for m in request["messages"])
    assert parsed.sizes == tuple(len(orjson.dumps(m)) for m in request["messages"])
    return parsed.messages  # type: ignore[return-value]


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
    monkeypatch.setattr(openai_chat._MEMO, "max_entries", 3)
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
    from ctxwarden.pipeline import rewrite

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
    scanned = tuple(rewrite.apply_to_message(m, applied) for m in conversation.messages)
    first = rewrite.apply_replacements(conversation, applied)
    again = rewrite.apply_replacements(conversation, applied)  # served from the memo
    assert first.messages == scanned == again.messages
    other = {p: Replacement("[ctxwarden: other]", "mask") for p in chosen}
    assert rewrite.apply_replacements(conversation, other).messages == tuple(
        rewrite.apply_to_message(m, other) for m in conversation.messages
    )


def test_a_full_memo_drops_its_oldest_entries_not_everything() -> None:
    from ctxwarden.memo import BoundedMemo

    memo: BoundedMemo[int, int] = BoundedMemo(8, 10_000)
    for i in range(8):
        memo.put(i, i, 1)
    assert len(memo) == 8
    memo.put(8, 8, 1)  # past 8 entries: back to three quarters, the newest kept
    assert len(memo) == 6 and all(k in memo for k in range(3, 9))
    assert memo.get(2, None) is None and memo.get(8, None) == 8


def test_a_memo_is_bounded_by_the_bytes_it_keeps_alive(no_memo_budget: None) -> None:
    from ctxwarden.memo import BoundedMemo, footprint, text_memo

    memo: BoundedMemo[str, str] = BoundedMemo(1_000, 1_000_000)
    for i in range(100):
        text = f"{i} " + "x" * 100_000
        memo.put(text, text.upper(), footprint(text) * 2)
    assert memo.weight <= 1_000_000 and 0 < len(memo) <= 5
    calls: list[str] = []

    @text_memo(max_entries=1_000, max_bytes=300_000)
    def lines(text: str) -> tuple[str, ...]:
        calls.append(text)
        return tuple(text.splitlines())

    big = "\n".join(f"error {i}" for i in range(10_000))  # ~100 KB and 10,000 strings
    assert lines(big) == lines(big) and len(calls) == 2  # too heavy to keep: computed again
    assert lines("a\nb") == ("a", "b") and lines("a\nb") == ("a", "b") and len(calls) == 3


def test_memos_survive_threads_evicting_at_once() -> None:
    import threading

    from ctxwarden.memo import BoundedMemo

    memo: BoundedMemo[int, int] = BoundedMemo(64, 10**9)
    errors: list[BaseException] = []

    def fill(offset: int) -> None:
        try:
            for i in range(20_000):
                memo.put(offset + i, i, 1)
                memo.get(offset + i - 3, None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(k * 1_000_000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(memo) <= 64


def test_a_memo_budget_shares_bytes_in_proportion_and_applies_to_later_memos() -> None:
    import gc

    from ctxwarden.memo import (
        DEFAULT_MEMO_BUDGET,
        BoundedMemo,
        memo_budget,
        memo_weight,
        set_memo_budget,
    )
    from ctxwarden.tokens.counter import TokenCounter

    big: BoundedMemo[int, str] = BoundedMemo(1_000_000, 4 * 2**30)
    small: BoundedMemo[int, str] = BoundedMemo(1_000_000, 2**30)
    for i in range(200):
        big.put(i, "x", 10_000)
        small.put(i, "x", 10_000)
    try:
        set_memo_budget(1_000_000)
        assert memo_budget() == 1_000_000
        assert abs(big.max_bytes - 4 * small.max_bytes) <= 4  # integer shares
        assert big.weight <= big.max_bytes < 1_000_000 and small.weight <= small.max_bytes
        assert 200 > len(big) > 0  # the oldest were dropped at once, not everything
        assert 199 in big and 0 not in big
        later = TokenCounter()  # made after the budget: its share at once
        for i in range(20_000):
            later.count_text(f"line {i} " + "y" * 50)
        assert 0 < later.weight <= 1_000_000 and memo_weight() <= 1_000_000
        before = big.max_bytes
        # a new memo takes its share of the budget (one far larger than every other
        # memo alive, those of engines earlier tests left included)
        huge: BoundedMemo[int, str] = BoundedMemo(10, 2**50)
        assert big.max_bytes < before // 10
        del huge
        gc.collect()
        assert big.max_bytes >= before  # and gives it back when it goes
        with pytest.raises(ValueError, match="budget"):
            set_memo_budget(-1)
        set_memo_budget(None)  # no budget: each memo its own bound
        assert memo_budget() is None
        assert big.max_bytes == 4 * 2**30 and small.max_bytes == 2**30
    finally:
        set_memo_budget(DEFAULT_MEMO_BUDGET)
    assert memo_budget() == DEFAULT_MEMO_BUDGET and big.max_bytes < 4 * 2**30


def test_an_entry_too_heavy_for_its_memo_is_kept_aside_and_pushes_nothing_out(
    no_memo_budget: None,
) -> None:
    # an output of thirty thousand error lines was worked on again at every request
    from ctxwarden.memo import HEAVY_ENTRIES, MISSING, BoundedMemo

    memo: BoundedMemo[int, str] = BoundedMemo(1_000, 1_000_000)
    for i in range(50):
        memo.put(i, "x", 100)
    heavy = memo.max_bytes // 4 + 1
    assert memo.put(-1, "huge", heavy) == "huge"
    assert memo.get(-1, MISSING) == "huge" and -1 in memo
    assert all(memo.get(i, MISSING) == "x" for i in range(50))  # nothing pushed out
    assert memo.weight == 5_000 + heavy
    for k in range(2, 2 + HEAVY_ENTRIES):  # the newest heavy entries are kept
        memo.put(-k, "huge", heavy)
    assert memo.get(-1, MISSING) is MISSING and memo.get(-2, MISSING) == "huge"
    assert memo.weight <= memo.max_bytes  # counted against the bound, never past it
    assert memo.put(-9, "too big", memo.max_bytes // 2 + 1) == "too big"  # over half
    assert memo.get(-9, MISSING) is MISSING
    memo.put(-2, "light again", 10)  # stored light: no stale heavy copy stays
    assert memo.pop(-2, MISSING) == "light again" and memo.get(-2, MISSING) is MISSING
    memo.clear()
    assert memo.weight == 0 and len(memo) == 0


def test_heavy_entries_make_the_others_room_within_the_bound(no_memo_budget: None) -> None:
    from ctxwarden.memo import BoundedMemo

    memo: BoundedMemo[int, str] = BoundedMemo(100_000, 1_000_000)
    for i in range(9_000):
        memo.put(i, "x", 100)  # 900,000 bytes of light entries
    memo.put(-1, "huge", 400_000)
    memo.put(-2, "huge", 300_000)
    assert memo.weight <= memo.max_bytes
    memo.trim()
    assert memo.weight <= memo.max_bytes and memo.get(-2, None) == "huge"


def test_a_memoized_none_is_an_answer_even_when_evicted_meanwhile() -> None:
    """normalize and trim_args memoize None ("leave it"): a lookup racing an eviction
    must compute again, not read None for a text that was never looked at."""
    from ctxwarden.passes.config import NormalizeConfig
    from ctxwarden.passes.normalize import NormalizePass

    normalize = NormalizePass(NormalizeConfig())
    noisy = "\x1b[31mred\x1b[0m trailing   \n" * 5
    clean = normalize._normalized(noisy)
    assert clean is not None and "\x1b" not in clean

    class Evicting(type(normalize._memo)):  # type: ignore[misc]
        def __contains__(self, key: object) -> bool:  # says yes, then forgets it
            found = super().__contains__(key)
            self.clear()
            return found

    memo = Evicting(1_000, 1_000_000)
    memo.put(noisy, clean, 1_000)
    normalize._memo = memo
    assert normalize._normalized(noisy) == clean


def test_pop_removes_an_entry_and_its_weight(no_memo_budget: None) -> None:
    from ctxwarden.memo import MISSING, BoundedMemo

    memo: BoundedMemo[str, int] = BoundedMemo(10, 10_000)
    memo.put("a", 1, 300)
    memo.put("b", 2, 200)
    assert memo.pop("a", MISSING) == 1 and memo.weight == 200 and "a" not in memo
    assert memo.pop("a", MISSING) is MISSING and memo.weight == 200
    memo.put("a", 3, 300)  # put back: the newest, so "b" is dropped first
    assert list(memo._data) == ["b", "a"] and memo.weight == 500


def test_decoded_session_states_are_bounded_by_bytes(no_memo_budget: Any) -> None:
    """The condenser keeps the decoded state of recent sessions within its byte bound,
    and a session whose decoded state was dropped is condensed the same."""
    from ctxwarden import Engine, EngineConfig
    from ctxwarden.memo import BoundedMemo

    def request(n: int, turns: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "s"},
                                          {"role": "user", "content": f"task {n}"}]  # fmt: skip
        for k in range(turns):
            args = f'{{"command": "ls d{k}"}}'
            call = {"id": f"c{k}", "type": "function",
                    "function": {"name": "bash", "arguments": args}}  # fmt: skip
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{k}",
                             "content": f"file_{n}_{k}.py\n" * 400})  # fmt: skip
        return {"model": "gpt-4o", "messages": messages}

    small = Engine(EngineConfig(store={"backend": "memory"}))
    small.condenser._states = BoundedMemo(512, 60_000)
    roomy = Engine(EngineConfig(store={"backend": "memory"}))
    for turns in (8, 9, 10):
        for n in range(20):
            a = small.condense(request(n, turns), session=f"s{n}")
            b = roomy.condense(request(n, turns), session=f"s{n}")
            assert a.request == b.request
            assert small.condenser._states.weight <= 60_000
    assert len(small.condenser._states) < len(roomy.condenser._states) == 20


def test_a_text_memo_keeps_keyword_calls_apart_from_positional_ones() -> None:
    from ctxwarden.memo import text_memo

    @text_memo()
    def echo(*args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return args, tuple(sorted(kwargs.items()))

    assert echo("x", k=1) == (("x",), (("k", 1),))
    assert echo(("x",), ("k", 1)) == ((("x",), ("k", 1)), ())  # not the keyword call's
    assert echo("a", "b") == (("a", "b"), ()) and echo("a") == (("a",), ())
    assert echo(("a", "b")) == ((("a", "b"),), ())  # one tuple argument, not two


def test_heavy_entries_count_against_the_entry_bound(no_memo_budget: None) -> None:
    from ctxwarden.memo import BoundedMemo

    memo: BoundedMemo[int, str] = BoundedMemo(1_000, 1_000_000)
    memo.put(-1, "huge", 300_000)
    memo.put(-2, "huge", 300_000)
    memo.max_entries = 3  # as a test or a smaller budget sets it
    for i in range(10):
        memo.put(i, "x", 10)
        assert len(memo) <= 3
    memo.trim()
    assert len(memo) <= 3
