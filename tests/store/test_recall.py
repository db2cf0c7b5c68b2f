"""Recall: parse_line_range and recall_text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.errors import ArtifactMissing, RequestError
from ctxwarden.store import MemoryStore
from ctxwarden.store.recall import MAX_RECALL_LINES, parse_line_range, recall_text

TEXT = "one\ntwo\nthree\nfour\nfive"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("3", (3, 3)),
        ("2-4", (2, 4)),
        (" 2-4 ", (2, 4)),
        ("1-1", (1, 1)),
        ("1-999999", (1, MAX_RECALL_LINES)),
    ],
)
def test_parse_line_range(spec: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_line_range(spec) == expected


@pytest.mark.parametrize("spec", ["0", "0-3", "4-2", "a-b", "1-", "-3", "1-2-3", "x"])
def test_parse_line_range_rejects(spec: str) -> None:
    with pytest.raises(RequestError, match="line range"):
        parse_line_range(spec)


@pytest.fixture
def store_and_ref() -> tuple[MemoryStore, str]:
    store = MemoryStore()
    return store, store.put("t", TEXT)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (None, TEXT),
        ("1", "one"),
        ("2-3", "two\nthree"),
        ("4-100", "four\nfive"),
        ("5", "five"),
    ],
)
def test_recall_text_ranges(
    store_and_ref: tuple[MemoryStore, str], lines: str | None, expected: str
) -> None:
    store, ref = store_and_ref
    assert recall_text(store, ref, lines, tenant="t") == expected


def test_a_range_past_the_end_says_how_many_lines_there_are(
    store_and_ref: tuple[MemoryStore, str],
) -> None:
    store, ref = store_and_ref
    with pytest.raises(RequestError, match=f"6-9 is past the end: {ref} has 5 lines"):
        recall_text(store, ref, "6-9", tenant="t")


def test_recall_strips_whitespace_around_the_ref(store_and_ref: tuple[MemoryStore, str]) -> None:
    store, ref = store_and_ref
    assert recall_text(store, f"  {ref}\n", tenant="t") == TEXT


@pytest.mark.parametrize(
    "bad", ["cw:123", "cw:XYZXYZXYZXYZ", "5f3a9c21e0b4", "cw:5f3a9c21e0b45", "", None, 12]
)
def test_recall_rejects_malformed_refs(store_and_ref: tuple[MemoryStore, str], bad: str) -> None:
    """Not a reference is the caller's error (a typed RequestError naming it), not a
    missing artifact, whatever was passed."""
    store, _ = store_and_ref
    with pytest.raises(RequestError, match="not a ctxwarden reference") as info:
        recall_text(store, bad, tenant="t")
    assert not isinstance(info.value, ArtifactMissing)
    assert repr(bad) in str(info.value)


def test_recall_is_tenant_scoped(store_and_ref: tuple[MemoryStore, str]) -> None:
    store, ref = store_and_ref
    with pytest.raises(ArtifactMissing):
        recall_text(store, ref, tenant="someone-else")


# Lines without "\n" and without lone surrogates (which have no UTF-8 form to address).
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(exclude_categories=("Cs",), exclude_characters="\n")),
        min_size=1,
    )
)
def test_line_ranges_partition_the_text(lines: list[str]) -> None:
    store = MemoryStore()
    text = "\n".join(lines)
    ref = store.put("t", text)
    pieces = [recall_text(store, ref, f"{i}-{i}", tenant="t") for i in range(1, len(lines) + 1)]
    assert pieces == lines
    assert "\n".join(pieces) == text


def test_a_bad_range_is_the_callers_error_even_for_a_missing_reference() -> None:
    with pytest.raises(RequestError, match="is not A-B"):
        recall_text(MemoryStore(), "cw:000000000000", "x-y", tenant="t")
