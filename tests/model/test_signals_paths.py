"""paths_in starts a match only where a run of path characters starts (linear in the
text). It finds what trying every position finds, except a match glued to the end of
the one before it (``a.py-.py`` gave ``-.py``), which no path is."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.signals import _PATH_RE, paths_in

_EVERY_POSITION = re.compile(
    r"(?:[\w.-]+/)+[\w.-]+"
    r"|[\w-]+\.(?:py|java|js|ts|go|rs|c|h|cpp|rb|md|txt|json|toml|yaml|yml|cfg|ini|xml|sh)\b"
)
"""The pattern without the run-start guards: the reference (quadratic on long words)."""

_PIECES = st.sampled_from(
    ["a", "b_1", "-", ".", "/", "./", "../", "py", ".py", "test", ".test", "json", " ",
     "\n", ":", "+", "é", "src", "x" * 30, "foo.bar", "a/b", "/tmp/", "'", "(", ".sh"]
)  # fmt: skip


@settings(max_examples=600)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_run_start_guards_find_what_every_position_finds(text: str) -> None:
    ends = set()
    expected = []
    for m in _EVERY_POSITION.finditer(text):
        if m.start() not in ends:
            expected.append((m.start(), m.group(0)))
        ends.add(m.end())
    assert [(m.start(), m.group(0)) for m in _PATH_RE.finditer(text)] == expected


def test_paths_in_a_long_word_and_around_it() -> None:
    text = "echo " + "Qm9vaw" * 20_000 + " > out/blob.txt && cat setup.py"
    assert paths_in(text) == {"out/blob.txt", "setup.py"}
