"""The replay's token and error-line finders start a match only where a run starts and
search back once per reported line, and find what the plain forms find."""

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
