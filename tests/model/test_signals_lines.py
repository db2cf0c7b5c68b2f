"""error_lines scans only the lines holding a keyword but must equal testing every line
on its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.signals import _ERROR_RE, error_lines, is_error_line

_LINES = st.sampled_from(
    [
        "",
        "  ",
        "ok",
        "Traceback (most recent call last):",
        "E       assert 1 == 2",
        "  E  x",
        "file.py:12:",
        "error: boom",
        "src/a.c:3:4: error: bad",
        "FAILED tests/test_a.py::test_x",
        "KeyError: 'k'",
        "<returncode>1</returncode>",
        "nothing to see",
        "Segmentation fault (core dumped)",
        "bash: foo: command not found",
        "cat: x: No such file or directory",
        "Process finished with exit code 2",
        "[INFO] BUILD FAILURE",
        "thread 'main' panicked at src/main.rs:2:5",
        "[FATAL] out of memory",
        "a.c:1: warning: unused",
        "E\t\tassert x",
        "Http2Error: nope",
        "x.ValueError(",
    ]
)

_FRAGMENTS = st.sampled_from(
    [
        "Error",
        "error",
        "E",
        " ",
        "  ",
        "\t",
        "\n",
        ":",
        "(",
        "[",
        "1",
        "2:",
        "x",
        "_",
        ".",
        "FAIL",
        "ED",
        "exit ",
        "code ",
        "fatal",
        "panic",
        "<returncode>",
        "</returncode>",
        "warning",
        "No such file or directory",
        "Traceback (most recent call last)",
    ]
)


def _line_by_line(text: str) -> list[str]:
    """The reference: every distinct non-empty line the pattern matches on its own."""
    expected: list[str] = []
    for line in text.split("\n"):
        if line and line not in expected and _ERROR_RE.search(line):
            expected.append(line)
    return expected


@given(st.lists(_LINES, max_size=30))
def test_error_lines_equal_a_line_by_line_scan(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert error_lines(text) == _line_by_line(text)


@given(st.lists(_FRAGMENTS, max_size=40))
def test_error_lines_equal_a_line_by_line_scan_on_any_text(fragments: list[str]) -> None:
    text = "".join(fragments)
    assert error_lines(text) == _line_by_line(text)


_WORDS = st.sampled_from(
    [
        "plain",
        "getUserName",
        "HTTP",
        "Http",
        "ab",
        "a1",
        "12",
        "7",
        "src/a.py",
        "x.y",
        "os.path",
        "parse_header",
        "ÄpfelBaum",
        "eXtra",
        "CamelCase",
        "snake_",
        "$var",
        "a:b",
        "1234",
        "v2",
    ]
)


@given(st.lists(_WORDS, max_size=20), st.sampled_from([" ", "\n", ", ", "("]))
def test_distinctive_strings_match_the_word_rule(words: list[str], sep: str) -> None:
    from ctxwarden.signals import _WORD_RE, _distinctive, distinctive_strings

    text = sep.join(words)
    expected: list[str] = []
    for raw in _WORD_RE.findall(text):
        word = raw.rstrip(".:-")
        if word not in expected and _distinctive(word):
            expected.append(word)
    assert distinctive_strings(text) == expected


@given(st.lists(_FRAGMENTS, max_size=20))
def test_is_error_line_equals_the_pattern(fragments: list[str]) -> None:
    line = "".join(fragments).replace("\n", " ")
    assert is_error_line(line) == bool(_ERROR_RE.search(line))


@given(st.text(max_size=300))
def test_mentions_round_trip_through_the_space_separated_line(text: str) -> None:
    """Placeholders list mentions separated by one space: no mention may hold one."""
    from ctxwarden.passes.placeholder import mentions_line
    from ctxwarden.signals import mention_scores

    words = [w for w, _ in mention_scores(text)]
    line = mentions_line(words)
    assert line.startswith("[mentions: ") and line.endswith("]")
    assert (line[len("[mentions: ") : -1].split(" ") if words else []) == words


def test_a_huge_output_is_ranked_on_its_head_and_tail() -> None:
    from ctxwarden.signals import MENTION_SCAN_HEAD, MENTION_SCAN_TAIL, mention_scores

    filler = "".join(f"row_{i} " for i in range((MENTION_SCAN_HEAD + MENTION_SCAN_TAIL) // 5))
    text = "start_name " + filler + " middle_only_name " + filler + " tail_end_name"
    words = {w for w, _ in mention_scores(text)}
    assert {"start_name", "tail_end_name"} <= words
    assert "middle_only_name" not in words
    # a text within the bound is ranked whole
    small = "start_name " + "pad " * 1000 + " middle_only_name " + "pad " * 1000 + " tail_end_name"
    assert "middle_only_name" in {w for w, _ in mention_scores(small)}
