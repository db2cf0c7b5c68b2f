"""The replay's token and error-line finders start a match only where a run starts and
search back once per reported line, and find what the plain forms (and the error pattern
as it was, quadratic on long runs) find."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.replay import signals
from ctxwarden.replay.signals import _CANDIDATE, _ERROR, MAX_LINE, distinctive_tokens, error_lines

_EVERY_POSITION = re.compile(r"[A-Za-z0-9_./\-]*(?:[/_.0-9]|[a-z][A-Z])[A-Za-z0-9_./\-]*")

_PIECES = st.sampled_from(
    ["a", "B", "aB", "1", "42", "_", ".", "/", "-", "./", " ", "\n", ":", "src/a.py", "----",
     "ValueError:", "FAILED", "error:", "x.y", "  ", "é", "fatal:", "[ERROR]", "a1b2"]
)  # fmt: skip


def _error_lines_searching_back_each_time(text: str) -> set[str]:
    out: set[str] = set()
    last_end = -1
    for match in _ERROR.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if start <= last_end:
            continue
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        last_end = end
        line = text[start:end].strip()
        if line:
            out.add(line[:MAX_LINE])
    return out


@settings(max_examples=600)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_the_finders_find_what_the_plain_forms_find(text: str) -> None:
    assert _CANDIDATE.findall(text) == _EVERY_POSITION.findall(text)
    assert error_lines(text) == _error_lines_searching_back_each_time(text)


def test_a_long_plain_run_and_its_neighbours() -> None:
    text = "-" * 100_000 + " see src/app.py:12 and x" * 3
    assert distinctive_tokens(text) == {"src/app.py", "12"}
    assert signals.error_lines("ok\n" + "FAILED " * 30_000 + "\nfine") == {
        ("FAILED " * 30_000).strip()[:MAX_LINE]
    }


_ERROR_AS_IT_WAS = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b[A-Za-z_][\w.]*(?:Error|Exception):"
    r"|^\s*(?:error|ERROR|fatal error|fatal):"
    r"|\bFAILED\b|\bFAIL:"
    r"|^\S+:\d+(?::\d+)?:\s*(?:fatal )?error\b"
    r"|\berror\[E\d+\]|\[ERROR\]"
    r"|\bpanicked at\b|^panic:",
    re.MULTILINE,
)
"""The error pattern as it was: a name tried after every dot of a run and an ``error:``
prefix at every line start of a run of blank lines (quadratic on long runs)."""


def _error_lines_as_they_were(text: str) -> set[str]:
    """:func:`error_lines` as it was, with the old pattern."""
    out: set[str] = set()
    last_end = -1
    for match in _ERROR_AS_IT_WAS.finditer(text):
        if match.start() <= last_end:
            continue
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        last_end = end
        line = text[start:end].strip()
        if line:
            out.add(line[:MAX_LINE])
    return out


_ERROR_PIECES = st.sampled_from(
    ["a", ".", "_", "1", "Error", "Exception", ":", " ", "\n", "Error:", "a.", "1.", "..",
     "V", "é", "\u0663", "\t", "\r", "\x1c", "\x85", "\n\n", "  ", "error", "ERROR",
     "fatal", "fatal error", "FAILED", "FAIL:", "panicked at", "panic:", "x:1:", "[ERROR]",
     "error[E1]", "Traceback (most recent call last)"]
)  # fmt: skip
"""Names, dots, digits (``\\u0663`` is an Arabic-Indic three: ``\\w``, not
``[A-Za-z_]``), the other hits and whitespace (``\\r``, ``\\x1c`` and ``\\x85`` are
``\\s`` but do not end a line)."""

_SEGMENTS = st.sampled_from(
    ["", "a", "_", "1", "é", "\u0663", "1a", "a1", "aError", "Error", "Exception", "_Error",
     "FAILED", "FAIL", "error", "ERROR", "fatal", "panic", "Traceback"]
)  # fmt: skip
_BLANKS = st.sampled_from(["", "", "", " ", "\t", "\r", "\x1c", "\x85", "\n", " \n"])
_GAPS = st.sampled_from(
    [":", ": ", " ", "\n", ":\n", "\n\n", "\n \n", ":1:", ":1:\n", ":12: ", ":1:2:", "\t",
     " error", "(", "[", "]"]
)  # fmt: skip
_RUNS = st.lists(
    st.tuples(_BLANKS, st.lists(_SEGMENTS, max_size=6).map(".".join), _GAPS).map("".join),
    max_size=12,
).map("".join)
"""Runs of ``[\\w.]`` made of dot-separated segments (empty ones too), after some blank
space and before a colon, a ``file:line:`` tail, a line break or another gap: where the
old pattern tried a name after a dot or an ``error:`` prefix after blank lines."""


@settings(max_examples=2000, deadline=None)
@given(st.lists(_ERROR_PIECES, max_size=60).map("".join))
def test_error_lines_are_those_of_the_old_pattern(text: str) -> None:
    assert _ERROR.pattern != _ERROR_AS_IT_WAS.pattern
    assert error_lines(text) == _error_lines_as_they_were(text)


@settings(max_examples=2000, deadline=None)
@given(_RUNS)
def test_error_lines_of_dotted_runs_are_those_of_the_old_pattern(text: str) -> None:
    assert error_lines(text) == _error_lines_as_they_were(text)


def test_error_lines_where_the_old_pattern_matched_inside_a_run() -> None:
    cases = {
        "1.2.ValueError: x": {"1.2.ValueError: x"},  # from the first name segment
        "..é.\u0663.os.Error: y": {"..é.\u0663.os.Error: y"},
        "1.aError:12:\nerror here": {"1.aError:12:\nerror here"},  # file:line: error first
        "ok panicked at.1.KeyError: z\nfine": {"ok panicked at.1.KeyError: z"},
        "a.b\n\n \t\n  error: boom\n": {"error: boom"},
        "1.2.3 x.Error no colon\n": set(),
    }
    for text, lines in cases.items():
        assert _error_lines_as_they_were(text) == lines, text
        assert error_lines(text) == lines, text


def test_long_dotted_runs_and_blank_lines() -> None:
    dotted = "a." * 20_000 + " x"
    letters = ".".join("abcdefghij" * 2_000)  # 40,000 characters of a.b.c...
    digits = "1." * 20_000 + "ValueError: boom"
    blank = "\n" * 40_000 + "error: late"
    assert error_lines(dotted) == set()
    assert error_lines(letters) == set()
    assert error_lines(digits) == {digits[:MAX_LINE]}
    assert error_lines(blank) == {"error: late"}
    assert error_lines(" \n" * 20_000) == set()
