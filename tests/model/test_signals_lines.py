"""error_lines scans only the lines holding a keyword but must equal testing every line
on its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.passes.normalize import normalize_text
from ctxwarden.replay.signals import error_lines as replay_error_lines
from ctxwarden.signals import (
    _ERROR_RE,
    ANSI_RE,
    LinesShown,
    error_lines,
    is_error_line,
    plain_line,
)

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
        "\x1b[31mFAILED\x1b[0m tests/t.py::test_a",
        "\x1b[1;31merror\x1b[0m\x1b[1m: could not compile\x1b[0m",
        "\x1b[32mok\x1b[0m",
        "Exit code: 1",
        "ERROR tests/test_io.py - ModuleNotFoundError",
        "=== 1 failed, 41 passed in 0.52s ===",
        "=== 41 passed, 0 errors ===",
        "src/app.ts(3,7): error TS2322: Type 'string' is not assignable",
        "npm ERR! code ELIFECYCLE",
        'Exception in thread "main" java.lang.NullPointerException',
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
        "\x1b[31m",
        "\x1b[0m",
        "\x1b]0;a\nb\x07",  # a title code across a line break: each line read alone
        "ERR!",
        "npm ",
        "failed",
        "Exit ",
        "ERROR",
    ]
)


def _line_by_line(text: str) -> list[str]:
    """The reference: every distinct non-empty line the pattern matches on its own."""
    expected: list[str] = []
    for line in text.split("\n"):
        # a coloured line is read as a terminal shows it
        shown = plain_line(line) if "\x1b" in line else line
        if line and line not in expected and _ERROR_RE.search(shown):
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
    shown = plain_line(line) if "\x1b" in line else line  # as a terminal shows it
    assert is_error_line(line) == bool(_ERROR_RE.search(shown))


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


def test_coloured_and_other_common_error_lines_are_error_lines() -> None:
    for line in (
        "\x1b[31mFAILED\x1b[0m tests/test_io.py::test_read - assert 1 == 2",
        "\x1b[1;31merror\x1b[0m\x1b[1m: could not compile `app`\x1b[0m",
        "\x1b[91mValueError: bad value\x1b[0m",
        "Exit code: 1",
        "ERROR tests/test_io.py - ModuleNotFoundError",
        "=========== 1 failed, 41 passed in 0.52s ===========",
        "src/app.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
        "npm ERR! code ELIFECYCLE",
        'Exception in thread "main" java.lang.NullPointerException',
    ):
        assert is_error_line(line), line
        assert error_lines(f"ok\n{line}\ndone") == [line]
    for line in ("\x1b[32mPASSED\x1b[0m", "=== 41 passed, 0 errors ===", "Exit code: 0"):
        assert not is_error_line(line), line


def test_an_error_line_is_shown_by_a_whole_line_only() -> None:
    shown = LinesShown("FAILED tests/t.py::test_10\nok")
    assert shown.shows("FAILED tests/t.py::test_10")
    assert not shown.shows("FAILED tests/t.py::test_1")  # a prefix of a shown line


def test_a_coloured_error_line_is_shown_by_its_plain_form_and_back() -> None:
    coloured = "\x1b[31mFAILED\x1b[0m tests/t.py::test_a   "
    assert LinesShown("x\nFAILED tests/t.py::test_a\ny").shows(coloured)
    assert LinesShown(coloured).shows("FAILED tests/t.py::test_a")
    assert not LinesShown("FAILED tests/t.py::test_b").shows(coloured)


def test_a_long_error_line_is_shown_whole_or_cut() -> None:
    from ctxwarden.signals import shown_error_line

    line = "ValueError: " + "x" * 5000
    assert LinesShown(f"a\n{line}").shows(line)
    assert LinesShown(f"a\n{shown_error_line(line)}").shows(line)
    assert not LinesShown(f"a\n{line[:3000]}").shows(line)


def test_a_long_coloured_error_line_is_cut_around_its_signal_without_codes() -> None:
    from ctxwarden.signals import shown_error_line

    line = "x" * 1500 + " \x1b[31mFAILED\x1b[0m tests/t.py::test_rt - assert 1 == 2 " + "y" * 3000
    shown = shown_error_line(line)
    assert "FAILED tests/t.py::test_rt" in shown and "\x1b" not in shown
    assert LinesShown(shown).shows(line)


def test_a_huge_output_without_whitespace_is_still_ranked() -> None:
    # minified JSON: no whitespace to cut at, so the window is cut where it falls
    from ctxwarden.signals import mention_scores

    text = ",".join(f'{{"id":"req_{i:06d}"}}' for i in range(25_000))
    assert len(text) > 400_000 and " " not in text
    words = {w for w, _ in mention_scores(text)}
    assert "req_000001" in words and "req_024999" in words


@given(st.lists(_FRAGMENTS, max_size=30))
def test_stripping_codes_from_a_whole_text_equals_stripping_each_line(
    fragments: list[str],
) -> None:
    """No escape sequence crosses a line break: the normalize pass and the replay's
    error-line reader strip whole texts, the checks strip lines, and both must read the
    same lines (a title code left open until a later line took every line between)."""
    text = "".join(fragments)
    assert ANSI_RE.sub("", text) == "\n".join(ANSI_RE.sub("", x) for x in text.split("\n"))
    by_line = set().union(*(replay_error_lines(x) for x in text.split("\n")))
    assert replay_error_lines(text) == by_line


def test_normalizing_keeps_the_lines_after_a_title_code_left_open() -> None:
    lines = ["\x1b]0;building", "step one done", "ERROR: step two", "step three done\x07", "end"]
    kept = normalize_text("\n".join(lines)).split("\n")
    assert kept == ["0;building", *lines[1:]]  # only the lone escape goes
