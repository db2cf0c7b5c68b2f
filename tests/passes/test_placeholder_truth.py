"""What a placeholder shows is what the output holds: every shown run of lines is
consecutive in the original, and every hidden line lies in exactly one ``... (lines
A-B)`` range, numbered as ``recall`` numbers lines (findings 3 and 5 of the truth
review: the head and tail used to skip blank and short lines anywhere inside them, so
lines shown as consecutive were not, and a final ``OK`` or ``-3`` vanished unmarked).
And a normalized output's note names the changes an edit copying it must know of
(finding 6)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.passes.base import Segment
from ctxwarden.passes.config import MaskConfig, NormalizeConfig, TruncateConfig
from ctxwarden.passes.mask import MaskPass
from ctxwarden.passes.normalize import NormalizePass
from ctxwarden.passes.placeholder import Digest, placeholder_parts
from ctxwarden.passes.truncate import TruncatePass
from ctxwarden.signals import ANSI_RE, error_lines, shown_error_line
from tests.passes.convo import (
    FORCE,
    call,
    context,
    make_engine,
    refs_in,
    request,
    result,
    segment_at,
)

_MARKER = re.compile(r"\.\.\. \(lines (\d+)-(\d+)\)")
_REF = "cw:000000000000"
_LATER = (call("c9", "echo done"), result("c9", "done"))
"""A later output: an output is not the newest (never eligible) once it follows."""


def _shows(shown: str, line: str, limit: int) -> bool:
    """``shown`` is ``line`` as a placeholder shows it: whole, or a long line cut at
    ``limit`` characters (marked ``...``), or an error line as ``shown_error_line``."""
    cut = line if len(line) <= limit else line[: limit - 3] + "..."
    return shown in (line, cut, shown_error_line(line))


def _layout(body: str, text: str, errors: tuple[str, ...], limit: int) -> list[tuple[int, int]]:
    """Checks that ``body`` (a placeholder without mentions) shows ``text`` truthfully
    and returns its elision ranges ``(A, B)``, 1-based and inclusive.

    The lines after the header are read as: a run of original lines from line 1; then
    for each marker ``... (lines A-B)``, error lines of lines A-B (each hidden there),
    then a run of original lines from line B+1 up to the next marker's A-1 or the
    last line. So every original line is either shown, in order, consecutive with its
    neighbours in the run, or inside exactly one stated range."""
    lines = ANSI_RE.sub("", text).split("\n")
    n = len(lines)
    out = body.split("\n")[1:]
    marks = [(k, *map(int, m.groups())) for k, ln in enumerate(out) if (m := _MARKER.fullmatch(ln))]
    if not marks:
        if len(out) == n and all(_shows(s, ln, limit) for s, ln in zip(out, lines, strict=True)):
            return []  # every line shown
        # no line shown: the header's line count says so; the error lines follow it
        assert out == [shown_error_line(e) for e in errors]
        return []
    first_k = marks[0][0]
    assert marks[0][1] == first_k + 1, "the head is not lines 1.. of the original"
    for s, ln in zip(out[:first_k], lines, strict=False):
        assert _shows(s, ln, limit)
    listed: list[str] = []
    ranges = []
    for j, (k, a, b) in enumerate(marks):
        assert 1 <= a <= b <= n
        ranges.append((a, b))
        stop = marks[j + 1][0] if j + 1 < len(marks) else len(out)
        following = marks[j + 1][1] - 1 if j + 1 < len(marks) else n
        run = following - b  # the run after the marker: lines b+1..following
        segment = out[k + 1 : stop]
        assert 0 <= run <= len(segment), (a, b, segment)
        prefix, shown = segment[: len(segment) - run], segment[len(segment) - run :]
        for s, ln in zip(shown, lines[b:following], strict=True):
            assert _shows(s, ln, limit), (s, ln)
        hidden = {shown_error_line(e) for e in errors if e in lines[a - 1 : b]}
        assert set(prefix) <= hidden, (prefix, a, b)  # error lines of the hidden range
        listed.extend(prefix)
        if j + 1 < len(marks):
            assert marks[j + 1][1] == following + 1
        else:
            assert following == n
    assert len(listed) == len(set(listed))  # each error line listed once
    return ranges


_LINES = st.one_of(
    st.sampled_from(
        ["", " ", "OK", "-3", "}", "  }", "<output>", "</output>", "<returncode>1</returncode>",
         "bash-$", "42", "100%", "ok", "Ran 300 tests in 2.104s", "def handler(request):",
         "    return dispatch(request, 1)", "Error: cannot open config.yaml",
         "Traceback (most recent call last):", "AssertionError: 3 != 4",
         "\x1b[31mFAILED\x1b[0m tests/test_io.py::test_read", "x" * 300]
    ),
    st.text(st.sampled_from("ab1_-$# <>/.:()é\t"), max_size=40),
)  # fmt: skip


@st.composite
def outputs(draw: st.DrawFn) -> str:
    lines = draw(st.lists(_LINES, min_size=1, max_size=60))
    return "\n".join(ln for ln in lines if not ln.startswith("... (line"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    outputs(),
    st.integers(0, 6),
    st.integers(0, 6),
    st.sampled_from([20, 240]),
    st.booleans(),
    st.booleans(),
)
def test_every_line_is_shown_in_order_or_inside_exactly_one_stated_range(
    text: str, head: int, tail: int, limit: int, keep_errors: bool, is_error: bool
) -> None:
    digest = Digest(head_lines=head, tail_lines=tail, max_line_chars=limit, keep_errors=keep_errors)
    segment = Segment(("messages", 3, "content"), 3, 0, "tool_output", text, 500, "bash",
                      is_error=is_error)  # fmt: skip
    body, errors, _ = placeholder_parts(segment, _REF, digest)
    _layout(body, text, errors, limit)
    shown = set(body.split("\n"))
    assert all(shown_error_line(e) in shown for e in errors)  # every error line still seen


def _source_file() -> str:
    rows: list[str] = []
    for i in range(700):
        rows += [f"def handler_{i}(request):", f"    return dispatch(request, {i})", ""]
    return "\n".join(rows)  # 2,100 lines: over truncate's max_lines


def test_a_truncated_file_shows_its_first_lines_as_they_are() -> None:
    """The truncation head of a source file is its first lines, blank lines included
    (code copied from it matches the file; lines counted down it are right)."""
    text = _source_file()
    ctx, _ = context(request(call("c1", "cat app/handlers.py"), result("c1", text)))
    segment = segment_at(ctx, 3)
    rep = TruncatePass(TruncateConfig())(ctx, {})[segment.path]
    shown = rep.text.split("\n")
    marker = next(k for k, ln in enumerate(shown) if _MARKER.fullmatch(ln))
    original = text.split("\n")
    assert shown[1:marker] == original[: marker - 1]
    assert "" in shown[1:marker]
    body = rep.text.split("\n[mentions")[0].split("\n")
    tail = body[marker + 1 :]
    assert len(tail) >= 40 and tail == original[-len(tail) :]  # the last lines, as they are
    assert body[marker] == f"... (lines {marker}-{len(original) - len(tail)})"
    _layout("\n".join(body), text, (), 240)


def _unittest_output() -> str:
    rows = [f"test_feature_{i} (tests.test_mod.TestCase) ... ok" for i in range(300)]
    return "\n".join([*rows, "", "-" * 70, "Ran 300 tests in 2.104s", "", "OK"])


def _check_output() -> str:
    rows = [f"processing record_{i} with checksum {i * 7919 % 10007}" for i in range(300)]
    return "\n".join([*rows, "final count of mismatched records:", "-3"])


def _mini_swe_output() -> str:
    rows = [f"src/pkg/module_{i}.py:{i}: def function_{i}(arg): pass" for i in range(200)]
    return "\n".join(["<returncode>0</returncode>", "<output>", *rows, "</output>"])


def _stitched(engine: Any, placeholder: str, original: str) -> str:
    """The original as the placeholder describes it: its shown runs as shown, each
    elided range as ``engine.recall`` returns it (no error line is listed in these)."""
    (ref,) = refs_in(placeholder.split("\n")[0])
    parts = []
    for line in placeholder.split("\n")[1:]:
        if line.startswith("[mentions: "):
            break
        m = _MARKER.fullmatch(line)
        parts.append(engine.recall(ref, lines=f"{m[1]}-{m[2]}") if m else line)
    assert engine.recall(ref) == original
    return "\n".join(parts)


def test_a_masked_output_ends_with_its_real_last_lines_or_marks_them() -> None:
    """Through the engine: unittest's final ``OK`` and a script's final ``-3`` are
    shown (they are shorter than a marker), and every hidden range recalls exactly the
    lines it names, so the shown runs and the recalled ranges rebuild the original."""
    outputs = (_unittest_output(), _check_output(), _mini_swe_output())
    wire = request(
        call("c1", "python -m unittest -v"),
        result("c1", outputs[0]),
        call("c2", "python check.py"),
        result("c2", outputs[1]),
        call("c3", "grep -rn def src"),
        result("c3", outputs[2]),
        call("c4", "echo done"),
        result("c4", "done"),
    )
    engine = make_engine(pipeline={**FORCE, "order": ["mask"], "mask": {"head_tail_min_tokens": 0}})
    sent = engine.condense(wire).request["messages"]
    for index, original in zip((3, 5, 7), outputs, strict=True):
        placeholder = sent[index]["content"]
        assert _MARKER.search(placeholder), placeholder
        assert _stitched(engine, placeholder, original) == original
    assert sent[3]["content"].split("\n[mentions")[0].endswith("Ran 300 tests in 2.104s\n\nOK")
    assert sent[5]["content"].split("\n[mentions")[0].endswith("records:\n-3")
    # the leading markup is hidden under a marker, the closing tag (shorter) is shown
    mini = sent[7]["content"].split("\n")
    assert mini[1] == "... (lines 1-2)" and mini[2].startswith("src/pkg/module_0.py")


def test_a_hidden_error_line_is_listed_under_the_marker_of_its_range() -> None:
    """Lines skipped before the head and after the tail are marked like the middle
    ones; an error line hidden in one is listed right after that range's marker."""
    steps = [f"step {i} of the build went fine in module_{i}" for i in range(50)]
    rule = "=" * 70  # says nothing, and is longer than a marker
    rows = ["<returncode>1</returncode>", rule, "Building the project", *steps[:25],
            "Error: disk full on /dev/sda1", *steps[25:], rule]  # fmt: skip
    text = "\n".join(rows)
    ctx, _ = context(request(call("c1", "make"), result("c1", text), *_LATER))
    segment = segment_at(ctx, 3)
    config = MaskConfig(head_lines=1, tail_lines=1, head_tail_min_tokens=0, min_tokens=0)
    rep = MaskPass(config)(ctx, {})[segment.path]
    body = rep.text.split("\n[mentions")[0]
    assert body.split("\n")[1:] == [
        "... (lines 1-2)",
        "<returncode>1</returncode>",
        "Building the project",
        "... (lines 4-53)",
        "Error: disk full on /dev/sda1",
        "step 49 of the build went fine in module_49",
        "... (lines 55-55)",
    ]
    assert _layout(body, text, tuple(error_lines(text)), 240) == [(1, 2), (4, 53), (55, 55)]


# -- normalize: the note names what changed ----------------------------------------------


def _normalized_note(text: str) -> str:
    wire = request(call("c1", "cat notes"), result("c1", text), *_LATER)
    ctx, _ = context(wire)
    segment = segment_at(ctx, 3)
    out = NormalizePass(NormalizeConfig(min_saving_tokens=0, min_tokens=0))(ctx, {})
    return out[segment.path].text.rsplit("\n", 1)[1]


def _pretty_json() -> str:
    import json

    scripts = {f"task{i}": f"node scripts/task{i}.js" for i in range(60)}
    return json.dumps({"name": "app", "scripts": scripts}, indent=2)


def test_normalized_note_names_json_minified() -> None:
    note = _normalized_note(_pretty_json())
    assert re.fullmatch(
        r"\[ctxwarden: normalized \(JSON minified\); exact original: cw:\w+\]", note
    )


def test_normalized_note_names_trailing_whitespace_and_folded_repeats_not_colour() -> None:
    markdown = "\n".join(f"Line {i} of the \x1b[1mrelease notes\x1b[0m  " for i in range(40))
    assert "(trailing whitespace removed);" in _normalized_note(markdown)
    repeated = "\n".join(["\x1b[33mWARNING: deprecated call in legacy.py\x1b[0m"] * 40 + ["done"])
    assert "(repeated lines folded);" in _normalized_note(repeated)
    both = markdown + "\n" + repeated
    assert "(trailing whitespace removed, repeated lines folded);" in _normalized_note(both)
    coloured = "\n".join(f"\x1b[32mPASSED\x1b[0m test_{i}" for i in range(40))
    assert _normalized_note(coloured).startswith("[ctxwarden: normalized; exact original: ")


def test_normalized_changes_name_a_line_end_cr_as_trailing_whitespace() -> None:
    """A CRLF text loses its CRs (the progress-bar rule keeps a line's last state):
    that is trailing whitespace gone; a progress bar alone is not named."""
    from ctxwarden.passes.normalize import TRAILING, normalized_with_changes

    crlf = "\r\n".join(f"row {i} of the windows file" for i in range(40))
    assert normalized_with_changes(crlf) == (crlf.replace("\r", ""), (TRAILING,))
    bar = "\r".join(f"Downloading {k}%" for k in range(0, 101, 10))
    assert normalized_with_changes(bar) == ("Downloading 100%", ())


_PIECES = st.sampled_from(["a", "b", " ", "\t", "\r", "\n", "\x1b[0m", "{", "}", '"x"', ":"])


@given(st.lists(_PIECES, max_size=40).map("".join))
def test_normalized_changes_name_exactly_the_trailing_whitespace_and_folds_made(text: str) -> None:
    from ctxwarden.passes.normalize import FOLDED, MINIFIED, TRAILING, normalized_with_changes

    normalized, changes = normalized_with_changes(text, repeat_run=2)
    if MINIFIED in changes:
        assert changes == (MINIFIED,)
        return
    plain = ANSI_RE.sub("", text).split("\n")
    assert (TRAILING in changes) == any(ln != ln.rstrip() for ln in plain)
    assert (FOLDED in changes) == ("[ctxwarden: previous line repeated" in normalized)
