"""Error-line detection stays linear on long lines and finds what the reference
finds: the error pattern without ``.`` in its name class (every name before a dot ends
a word, so a match from after the last dot exists whenever one with dots does) and the
pytest ``E`` lines searched back once per line."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.signals import (
    _E_LINE_RE,
    _ERROR_KEYWORDS,
    _ERROR_RE,
    _candidate_line_starts,
    error_lines,
)

_WITH_DOTS = re.compile(_ERROR_RE.pattern.replace("[A-Za-z_]*(?:Error", "[A-Za-z_.]*(?:Error"),
                        _ERROR_RE.flags)  # fmt: skip
"""The pattern as it was, quadratic on long runs of letters and dots."""

_PIECES = st.sampled_from(
    ["a", "Z", "_", ".", " ", ":", "(", "[", "\n", "E", "  ", "Error", "Exception",
     "Failure", "Fault", "error", "ValueError", "os.Error", "x.y.", "FAILED", "fatal",
     "panic", "\t", "é", "-", "1"]
)  # fmt: skip


@settings(max_examples=800)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_the_error_pattern_says_yes_exactly_when_the_old_one_did(line: str) -> None:
    assert _WITH_DOTS.pattern != _ERROR_RE.pattern
    assert bool(_ERROR_RE.search(line)) == bool(_WITH_DOTS.search(line))


@settings(max_examples=500)
@given(st.lists(_PIECES, max_size=60).map("".join))
def test_candidate_lines_are_the_lines_of_every_hit(text: str) -> None:
    expected: set[int] = set()
    for i in range(len(text)):
        if any(text.startswith(k, i) for k in _ERROR_KEYWORDS) or _E_LINE_RE.match(text, i):
            expected.add(text.rfind("\n", 0, i) + 1)
    assert _candidate_line_starts(text) == sorted(expected)


def test_long_lines_of_dots_and_e_hits_give_their_error_lines() -> None:
    dotted = "a." * 20_000 + " ValueError: boom"
    pytest_e = "E  " * 50_000
    text = f"ok\n{dotted}\n{pytest_e}\nfine"
    assert error_lines(text) == [dotted, pytest_e]


@settings(max_examples=400)
@given(st.lists(_PIECES, max_size=30).map("".join), st.lists(_PIECES, max_size=4).map("".join))
def test_line_search_is_substring_search(text: str, needle: str) -> None:
    from ctxwarden.signals import TextSearch

    shown = TextSearch(text)
    assert (needle in shown) == (needle in text)
    for line in text.split("\n"):
        assert line in shown
