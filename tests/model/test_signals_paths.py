"""paths_in starts a match only where a run of path characters starts (linear in the
text). Every match it finds is a path by the unguarded pattern, and it finds every match
that trying every position finds except one glued to a word (``a.py-.py`` gave ``-.py``,
which no path is). paths_in gives a set of strings, so a path counts as found wherever
it was found."""

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


@settings(max_examples=3000)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_run_start_guards_find_what_every_position_finds(text: str) -> None:
    matches = list(_PATH_RE.finditer(text))
    found = [m.group(0) for m in matches]
    for path in found:  # each is a path by the unguarded pattern
        assert _EVERY_POSITION.fullmatch(path)
    for m in _EVERY_POSITION.finditer(text):  # and none is lost but one glued to a word
        glue = _PATH_CHARS if "/" in m.group(0) else _NAME_CHARS
        # or one overlapping a found match: matches do not overlap, and the reference,
        # resuming after a glued match, may cut the text elsewhere ("a.py-.sh.py.py":
        # it finds "py.py" at 9, the guarded pattern "sh.py" at 6)
        overlaps = any(f.start() < m.end() and m.start() < f.end() for f in matches)
        if not overlaps and (m.start() == 0 or text[m.start() - 1] not in glue):
            # the same path, though maybe found at another place: after a glued match
            # the reference resumes where that one ended ("a.py-.py.py.py": it finds
            # "py.py" at 9, the guarded pattern at 6), and paths_in gives a set
            assert m.group(0) in found


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-é")
_PATH_CHARS = _NAME_CHARS | {"."}
"""Characters that continue a run (``\\w`` of the pieces and dashes; dots too in a
path with a slash): a match starting right after one is glued to what precedes it
(``a.py-.py`` gave ``-.py``). A bare file name may follow a dot (``.test.py``)."""


def test_a_match_glued_to_a_word_is_not_a_path() -> None:
    assert [m.group(0) for m in _PATH_RE.finditer("a.py-.py x a.py-a.py")] == ["a.py", "a.py"]
    assert [m.group(0) for m in _PATH_RE.finditer("open .test.py")] == ["test.py"]


def test_paths_in_a_long_word_and_around_it() -> None:
    text = "echo " + "Qm9vaw" * 20_000 + " > out/blob.txt && cat setup.py"
    assert paths_in(text) == {"out/blob.txt", "setup.py"}
