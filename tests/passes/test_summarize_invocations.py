"""``summarize`` keeps the skeleton of tool invocations written in an assistant's text
(Cline/Roo XML tool tags, Aider's SEARCH/REPLACE edits, fenced shell commands): the
summary of an old turn still shows what the agent ran, in the format it must keep
producing. Before, these blocks were prose: only the lead and path lines survived."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.passes.base import ref_for
from ctxwarden.passes.config import SummarizeConfig
from ctxwarden.passes.summarize import MAX_VALUE_LINE, SummarizePass, _Skeletons, extract_summary
from ctxwarden.signals import LinesShown, error_lines, shown_error_line

from .convo import FORCE, context, make_engine, refs_in, request, segment_at

_PROSE = " ".join(
    f"I looked at step {i} of the parser module and the option table looked consistent."
    for i in range(12)
)


def _summary(text: str) -> list[str]:
    return extract_summary.__wrapped__(text, 1)[0].split("\n")  # type: ignore[attr-defined,no-any-return]


def _note(text: str, lines: int) -> str:
    return f"[ctxwarden: {lines:,} more line{'s' if lines != 1 else ''} in {ref_for(text)}]"


def _is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(n == h for h in it) for n in needles)


def test_a_cline_command_block_is_kept_whole() -> None:
    block = [
        "<execute_command>",
        "<command>python -m pytest tests/test_core.py -x -q -k parse</command>",
        "<requires_approval>false</requires_approval>",
        "</execute_command>",
    ]
    text = _PROSE + "\n\n" + "\n".join(block)
    summary = _summary(text)
    assert summary[0].startswith("I looked at step 0 of the parser module")
    assert "step 5" not in "\n".join(summary)  # the prose is still summarized
    assert summary[1:] == block


def test_a_long_child_value_keeps_its_first_line_a_note_and_its_error_lines() -> None:
    content = [f"def f{i}():\n    return {i}" for i in range(30)]
    body = [*"\n".join(content).split("\n"), "    raise ValueError('bad')"]
    text = (
        "I will create the module with its helpers now, the whole file at once.\n\n"
        "<write_to_file>\n<path>src/pkg/new.py</path>\n<content>\n"
        + "\n".join(body)
        + "\n</content>\n</write_to_file>\nThen I will run the tests."
    )
    summary = _summary(text)
    assert summary[1:] == [
        "<write_to_file>",
        "<path>src/pkg/new.py</path>",
        "<content>",
        "def f0():",
        _note(text, len(body) - 1),
        "    raise ValueError('bad')",  # hidden by the note, still shown
        "</content>",
        "</write_to_file>",
    ]


_CLINE = ("------- SEARCH", "+++++++ REPLACE")
"""Cline's current markers (``src/core/assistant-message/diff.ts``)."""


@pytest.mark.parametrize(
    ("search_mark", "replace_mark"), [_CLINE, ("<<<<<<< SEARCH", ">>>>>>> REPLACE")]
)
def test_a_diff_inside_a_tool_block_keeps_its_markers_and_each_sides_first_line(
    search_mark: str, replace_mark: str
) -> None:
    search = [f"    old_{i} = {i}" for i in range(6)]
    replace = [f"    new_{i} = {i}" for i in range(5)]
    text = (
        _PROSE
        + f"\n<replace_in_file>\n<path>src/pkg/core.py</path>\n<diff>\n{search_mark}\n"
        + "\n".join(search)
        + "\n=======\n"
        + "\n".join(replace)
        + f"\n{replace_mark}\n</diff>\n</replace_in_file>"
    )
    assert _summary(text)[1:] == [
        "<replace_in_file>",
        "<path>src/pkg/core.py</path>",
        "<diff>",
        search_mark,
        "    old_0 = 0",
        _note(text, 5),
        "=======",
        "    new_0 = 0",
        _note(text, 4),
        replace_mark,
        "</diff>",
        "</replace_in_file>",
    ]


def test_clines_markers_open_and_close_each_edit_and_are_not_roos_side_lines() -> None:
    # two edits in one diff: the second "------- SEARCH" opens an edit (a lone
    # "-------" would be Roo's side line); a fenced edit and one at the top level too
    sides = [[f"    {name}_{i} = compute({i})" for i in range(8)] for name in ("a", "b")]
    edit = [_CLINE[0], *sides[0], "=======", *sides[1], _CLINE[1]]
    skeleton = [_CLINE[0], sides[0][0], "=======", sides[1][0], _CLINE[1]]
    text = (
        _PROSE + "\n<replace_in_file>\n<path>src/pkg/core.py</path>\n<diff>\n"
        + "\n".join(edit + edit) + "\n</diff>\n</replace_in_file>"
    )  # fmt: skip
    shown = [line for line in _summary(text)[1:] if not line.startswith("[ctxwarden:")]
    assert shown == [
        "<replace_in_file>",
        "<path>src/pkg/core.py</path>",
        "<diff>",
        *skeleton,
        *skeleton,
        "</diff>",
        "</replace_in_file>",
    ]
    fenced = ["src/pkg/core.py", "```python", *edit, "```"]
    for lines, kept in ((fenced, [*fenced[:2], *skeleton, "```"]), (edit, skeleton)):
        text = _PROSE + "\n\n" + "\n".join(lines)
        assert [x for x in _summary(text)[1:] if not x.startswith("[ctxwarden:")] == kept


def test_roo_side_markers_stay_with_the_search_marker() -> None:
    old = "\n".join(f"    x_{i} = {i}" for i in range(6))
    text = (
        _PROSE + "\n<apply_diff>\n<path>a.py</path>\n<diff>\n<<<<<<< SEARCH\n:start_line:12\n"
        f"-------\n{old}\n=======\n    x = 2\n>>>>>>> REPLACE\n</diff>\n</apply_diff>"
    )
    summary = _summary(text)
    start = summary.index("<<<<<<< SEARCH")
    assert summary[start : start + 5] == [
        "<<<<<<< SEARCH",
        ":start_line:12",
        "-------",
        "    x_0 = 0",
        _note(text, 5),
    ]
    assert summary[start + 5 : start + 8] == ["=======", "    x = 2", ">>>>>>> REPLACE"]


def test_aider_edits_keep_their_path_line_fence_and_markers() -> None:
    edit = [
        "src/pkg/core.py",
        "```python",
        "<<<<<<< SEARCH",
        "    result_17 = value_17 * 24",
        "=======",
        "    result_17 = value_17 * 25",
        ">>>>>>> REPLACE",
        "```",
    ]
    text = (
        _PROSE + "\n\n" + "\n".join(edit) + "\n\nAnd the docstring of the same function too.\n\n"
        + "\n".join(edit).replace("result_17", "doc_17")
    )  # fmt: skip
    summary = _summary(text)
    assert summary[1 : 1 + len(edit)] == edit
    assert summary[1 + len(edit) :] == [line.replace("result_17", "doc_17") for line in edit]


def test_a_short_shell_block_is_kept_whole_and_a_long_one_keeps_its_first_line() -> None:
    short = ["```bash", "cd /repo && grep -rn 'def parse' src/ | head -20", "```"]
    text = "THOUGHT: " + _PROSE + "\n\n" + "\n".join(short)
    assert _summary(text)[1:] == short
    tagged = ["```mswea_bash_command", "ls -la src/", "```"]  # mini-swe-agent 2 (text)
    text = "THOUGHT: " + _PROSE + "\n\n" + "\n".join(tagged)
    assert _summary(text)[1:] == tagged
    script = [f"echo step {i}" for i in range(12)]
    text = "THOUGHT: " + _PROSE + "\n\n```sh\n" + "\n".join(script) + "\n```"
    assert _summary(text)[1:] == ["```sh", "echo step 0", _note(text, 11), "```"]


def test_a_long_one_line_value_is_cut_and_keeps_its_closing_tag() -> None:
    command = "python -c '" + "x" * 400 + "'"
    text = _PROSE + f"\n<execute_command>\n  <command>{command}</command>\n</execute_command>"
    assert _summary(text)[1:] == [
        "<execute_command>",
        f"  <command>{command[:MAX_VALUE_LINE]}",
        f"[ctxwarden: the rest of this line in {ref_for(text)}]",
        "  </command>",
        "</execute_command>",
    ]
    # an error line shows whole (so its skeleton is never shorter) up to 2,000 characters
    failed = "FAILED tests/t.py::test_a " + "y" * 300
    text = _PROSE + f"\n<result>\n<output>{failed}</output>\n</result>"
    assert _summary(text)[1:] == ["<result>", f"<output>{failed}</output>", "</result>"]
    failed = "FAILED tests/t.py::test_a " + "y" * 3_000
    text = _PROSE + f"\n<result>\n<output>{failed}</output>\n</result>"
    assert _summary(text)[1:] == [
        "<result>",
        f"<output>{failed[:MAX_VALUE_LINE]}",
        f"[ctxwarden: the rest of this line in {ref_for(text)}]",
        shown_error_line(f"<output>{failed}</output>"),
        "</output>",
        "</result>",
    ]


def test_a_glued_value_with_a_long_last_line_keeps_its_closing_tag() -> None:
    last = "  --option " + "z" * 300
    text = (
        _PROSE + f"\n<execute_command>\n<command>cd /repo &&\n{last}</command>\n</execute_command>"
    )
    assert _summary(text)[1:] == [
        "<execute_command>",
        "<command>cd /repo &&",
        _note(text, 1),
        "</command>",
        "</execute_command>",
    ]
    last = "FAILED tests/t.py::test_b " + "z" * 3_000 + "</output>"
    text = _PROSE + f"\n<result>\n<output>pytest -q\n{last}\n</result>"
    assert _summary(text)[1:] == [
        "<result>",
        "<output>pytest -q",
        _note(text, 1),
        shown_error_line(last),  # in its place, as the condenser's check shows it
        "</output>",
        "</result>",
    ]


@pytest.mark.parametrize(
    "block",
    [
        "<write_to_file>\n<path>a.txt</path>\n<content>\nhello\nworld\n</content>\n</write_to_file>",
        "<execute_command>\n<command>" + "x" * 182 + "</command>\n</execute_command>",
        "<execute_command>\n<command>" + "x" * 230 + "</command>\n</execute_command>",
        "```bash\n" + "\n".join(f"echo 'FAILED tests/t.py::test_{i}'" for i in range(9)) + "\n```",
        "<replace_in_file>\n<path>a.py</path>\n<diff>\n------- SEARCH\n    x = 1\n    y = 2\n"
        "=======\n    x = 2\n+++++++ REPLACE\n</diff>\n</replace_in_file>",
    ],
    ids=["two-line value", "201-char line", "260-char line", "errors only", "short sides"],
)
def test_a_block_whose_skeleton_would_not_be_shorter_is_kept_whole(block: str) -> None:
    assert _summary(_PROSE + "\n" + block)[1:] == block.split("\n")


def test_other_code_prose_like_tags_and_unclosed_blocks_are_prose() -> None:
    # code of another language, a <thinking> block of prose, an unclosed tool tag:
    # summarized as before (only lines naming paths or errors)
    for block in (
        "```python\nx = 1\ny = 2\n```",
        "<thinking>\nThe parser reads headers\nand keeps them\n</thinking>",
        "<execute_command>\n<command>ls</command>",
    ):
        assert _summary(_PROSE + "\n" + block) == [_summary(_PROSE)[0]]


def test_an_xml_block_in_a_code_fence_is_not_a_tool_block() -> None:
    text = _PROSE + "\n```html\n<div>\n<p>hello</p>\n</div>\n```"
    assert _summary(text) == [_summary(_PROSE)[0]]


# -- the pass ---------------------------------------------------------------------------

_AIDER = (
    _PROSE
    + "\n\nsrc/pkg/core.py\n```python\n<<<<<<< SEARCH\n"
    + "\n".join(f"    value_{i} = compute({i})" for i in range(20))
    + "\n=======\n"
    + "\n".join(f"    value_{i} = compute({i} + 1)" for i in range(20))
    + "\n    raise ValueError('bad factor')\n>>>>>>> REPLACE\n```"
)


def _request(text: str) -> dict[str, Any]:
    return request(
        {"role": "assistant", "content": text},
        {"role": "user", "content": "ok"},
        *({"role": "assistant", "content": x} for x in "abcd"),
    )


def test_the_pass_sends_the_edit_skeleton_and_the_engine_keeps_it() -> None:
    wire = _request(_AIDER)
    engine = make_engine(pipeline={**FORCE, "summarize": {"enabled": True, "min_tokens": 100}})
    out = engine.condense(wire)
    assert out.report["transforms"]["summarize"]["count"] == 1
    sent = out.request["messages"][2]["content"].split("\n")
    skeleton = ["src/pkg/core.py", "```python", "<<<<<<< SEARCH", "    value_0 = compute(0)"]
    assert _is_subsequence(
        [*skeleton, "=======", "    value_0 = compute(0 + 1)", ">>>>>>> REPLACE", "```"], sent
    )
    assert "    raise ValueError('bad factor')" in sent
    (ref,) = set(refs_in("\n".join(sent)))
    assert engine.recall(ref) == _AIDER


def test_a_summary_that_saves_too_little_is_not_made() -> None:
    # a short lead and a command block: the skeleton is the text
    text = (
        "Let me run the whole test suite again to see whether it passes now.\n\n"
        "<execute_command>\n<command>python -m pytest tests -x -q --no-header -p no:cacheprovider"
        " --maxfail=1 -k 'parse or header or option or table'</command>\n"
        "<requires_approval>false</requires_approval>\n</execute_command>"
    )
    ctx, _ = context(_request(text))
    segment = segment_at(ctx, 2)
    assert segment.tokens >= 50
    assert SummarizePass(SummarizeConfig(enabled=True, min_tokens=50))(ctx, {}) == {}


# -- properties -------------------------------------------------------------------------

_VALUES = st.sampled_from(
    ["src/a.py", "false", "ls -la", "Error: boom", "x" * 250, "FAILED tests/t.py::test_a",
     "    return 1", "", "<b>not a tag</b>", "```", "=======", "echo done"]
)  # fmt: skip
_PROSE_LINES = st.sampled_from(
    ["I will check the parser now.", "See src/pkg/io.py.", "ValueError: bad header", "",
     "Then I run the tests and read what fails.", "<note>", "1. First"]
)  # fmt: skip


@st.composite
def _blocks(draw: Any) -> tuple[str, list[str]]:
    """A block's text and the lines its skeleton must show in order."""
    kind = draw(st.sampled_from(["xml", "edit", "cline", "shell"]))
    values = draw(st.lists(st.lists(_VALUES, min_size=1, max_size=12), min_size=1, max_size=3))
    if kind == "xml":
        lines = ["<tool_use>"]
        for k, value in enumerate(values):
            if len(value) == 1 and value[0]:
                lines.append(f"<arg{k}>{value[0]}</arg{k}>")
            else:
                lines += [f"<arg{k}>", *value, f"</arg{k}>"]
        lines.append("</tool_use>")
        structure = [x for x in lines if x.startswith(("<tool_use>", "</tool_use>", "</arg"))]
        return "\n".join(lines), structure
    if kind in ("edit", "cline"):
        marks = (
            ["<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"]
            if kind == "edit"
            else [_CLINE[0], "=======", _CLINE[1]]
        )
        sides = [[x for x in v if x not in ("=======", "```")] for v in values]
        lines = ["src/pkg/core.py", "```python"]
        for side in sides:
            lines += [marks[0], *side, marks[1], *side[::-1], marks[2]]
        lines.append("```")
        return "\n".join(lines), [*lines[:2], *(marks * len(sides)), "```"]
    body = [x for v in values for x in v if x != "```"]
    return "\n".join(["```bash", *body, "```"]), ["```bash", "```"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PROSE_LINES.map(lambda x: (x, [])), _blocks()), max_size=8))
def test_skeletons_keep_structure_and_every_error_line(pieces: list[tuple[str, list[str]]]) -> None:
    text = "\n".join(piece for piece, _ in pieces)
    summary, errors = extract_summary.__wrapped__(text, 1)  # type: ignore[attr-defined]
    assert errors == tuple(error_lines(text))
    shown = LinesShown(summary)
    assert all(shown.shows(e) for e in errors)  # the condenser's check
    structure = [line for _, lines in pieces for line in lines]
    assert _is_subsequence(structure, summary.split("\n"))
    assert set(refs_in(summary)) <= {ref_for(text)}
    assert extract_summary.__wrapped__(text, 1) == (summary, errors)  # type: ignore[attr-defined]
    # prose lines as written, each block as a skeleton no longer than the block
    pieces = _Skeletons(text).pieces()
    assert len("\n".join(line for _, lines in pieces for line in lines)) <= len(text)


def test_a_long_run_of_tagged_lines_is_data_not_a_tool_block() -> None:
    items = [f"<li>item {i} of the list</li>" for i in range(40)]
    text = _PROSE + "\n<ul>\n" + "\n".join(items) + "\n</ul>"
    assert _summary(text) == [_summary(_PROSE)[0]]
