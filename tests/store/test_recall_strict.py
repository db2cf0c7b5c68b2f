"""Recall: line ranges are ASCII digits only, and a range the line cap cut short says so."""

from __future__ import annotations

import pytest

from ctxwarden.errors import RequestError
from ctxwarden.store import MemoryStore
from ctxwarden.store.recall import MAX_RECALL_LINES, parse_line_range, recall, recall_text


@pytest.mark.parametrize("spec", ["1_0", "1-1_0", "+3", "3-+4", "\u0663", "1-\u0664", "0x3", "1e2"])
def test_a_range_is_ascii_digits_only(spec: str) -> None:
    """``int`` took ``1_0`` as 10, ``+3`` as 3 and other scripts' digits."""
    with pytest.raises(RequestError, match="is not A-B"):
        parse_line_range(spec)


@pytest.mark.parametrize(
    ("spec", "expected"), [("2 - 4", (2, 4)), ("007", (7, 7)), (" 3 ", (3, 3))]
)
def test_spaces_and_leading_zeros_still_read(spec: str, expected: tuple[int, int]) -> None:
    assert parse_line_range(spec) == expected


def test_a_range_cut_by_the_line_cap_says_where() -> None:
    store = MemoryStore()
    text = "\n".join(f"line {i}" for i in range(1, 6001))
    ref = store.put("t", text)
    found = recall(store, ref, "1-10000", tenant="t")
    assert found.text.count("\n") + 1 == MAX_RECALL_LINES
    assert (found.cut_at, found.wanted, found.lines) == (MAX_RECALL_LINES, 6000, 6000)
    assert recall_text(store, ref, "1-10000", tenant="t") == found.text
    rest = recall(store, ref, f"{MAX_RECALL_LINES + 1}-6000", tenant="t")
    assert rest.cut_at is None
    assert found.text + "\n" + rest.text == text


@pytest.mark.parametrize("lines", [None, "1-3", "2-99999", "3"])
def test_no_cut_is_reported_when_nothing_was_left_out(lines: str | None) -> None:
    store = MemoryStore()
    ref = store.put("t", "a\nb\nc")
    found = recall(store, ref, lines, tenant="t")
    assert found.cut_at is None and found.wanted is None
    assert found.lines == 3


def test_a_line_number_of_thousands_of_digits_is_no_traceback() -> None:
    store = MemoryStore()
    ref = store.put("t", "a\nb\nc")
    huge = "9" * 5000
    whole = recall(store, ref, f"2-{huge}", tenant="t")
    assert whole.text == "b\nc"
    assert parse_line_range(f"0000{'0' * 40}7") == (7, 7)
    with pytest.raises(RequestError, match="past the end"):
        recall(store, ref, f"{huge}-{huge}", tenant="t")
