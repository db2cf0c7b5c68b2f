"""A recall answer says when the 5,000-line cap cut the range the model asked for, and
which lines to ask for next (the model took the cut range for the whole one)."""

from __future__ import annotations

import functools

from ctxwarden.proxy.recall import RecallCall, answer_call
from ctxwarden.store import MemoryStore
from ctxwarden.store.recall import recall


def _answer(lines: str | None, max_bytes: int = 10_000_000) -> str:
    store = MemoryStore()
    ref = store.put("t", "\n".join(f"line {i}" for i in range(1, 6001)))
    arguments = f'{{"ref": "{ref}"' + (f', "lines": "{lines}"' if lines else "") + "}"
    call = RecallCall("c1", arguments)
    answer = answer_call(functools.partial(recall, store), call, tenant="t", max_bytes=max_bytes)
    assert answer.ok
    return answer.text


def test_a_range_cut_by_the_line_cap_says_so() -> None:
    text = _answer("1-6000")
    *lines, note = text.split("\n")
    assert len(lines) == 5000 and lines[-1] == "line 5000"
    assert note == (
        "[ctxwarden_recall: cut at line 5,000 of 6,000 (5,000 lines at most); "
        "ask for lines 5001-6000]"
    )


def test_a_range_within_the_cap_and_a_whole_original_carry_no_note() -> None:
    assert _answer("10-20").split("\n") == [f"line {i}" for i in range(10, 21)]
    assert _answer(None).endswith("line 6000")


def test_the_byte_cap_note_still_wins() -> None:
    assert "truncated; 6000 lines in all" in _answer("1-6000", max_bytes=1_000)
