"""Tool results sent as user text (Cline's and Roo Code's classic protocol) are
condensed as tool outputs (helper-127's review: such sessions were never condensed,
even past the window); every other user text stays as the user wrote it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import ConfigError, Engine, EngineConfig
from ctxwarden.store import MemoryStore
from ctxwarden.store.base import REF_PATTERN
from tests.passes.convo import FORCE, lines_of, make_engine

FILE = lines_of("core", 120)
TESTS = lines_of("pytest", 80, extra=("FAILED tests/test_core.py::test_parse - assert 75 == 78",))


def _environment(k: int) -> str:
    return f"<environment_details>\n# Current Time\n2025-01-0{k} 10:00\n</environment_details>"


def _turn(k: int, xml: str, header: str, output: str) -> list[dict[str, Any]]:
    """An assistant message calling a tool in XML, and the user message with its
    result: a header block, the output block, the environment block."""
    blocks = [header, output, _environment(k)]
    return [
        {"role": "assistant", "content": f"Step {k}.\n\n{xml}"},
        {"role": "user", "content": [{"type": "text", "text": b} for b in blocks]},
    ]


def _cline() -> dict[str, Any]:
    return {"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "You are Cline."},
        {"role": "user", "content": "<task>Fix the failing parser test</task>"},
        *_turn(1, "<read_file><path>src/core.py</path></read_file>",
               "[read_file for 'src/core.py'] Result:", FILE),
        *_turn(2, "<execute_command><command>pytest -x</command></execute_command>",
               "[execute_command for 'pytest -x'] Result:", TESTS),
        *_turn(3, "<execute_command><command>ls</command></execute_command>",
               "[execute_command for 'ls'] Result:", "a.py\nb.py"),
    ]}  # fmt: skip


def _blocks(request: dict[str, Any], message: int) -> list[str]:
    return [block["text"] for block in request["messages"][message]["content"]]


def test_an_old_result_sent_as_user_text_is_condensed_and_recallable() -> None:
    wire = _cline()
    with make_engine(pipeline=FORCE) as engine:
        sent = engine.condense(wire, api="openai.chat").request
        header, output, _ = _blocks(sent, 3)
        assert header == "[read_file for 'src/core.py'] Result:"  # the user's own text
        assert len(output) < len(FILE) / 4
        (ref,) = set(REF_PATTERN.findall(output))
        assert engine.recall(ref) == FILE
        tests = _blocks(sent, 5)[1]
        assert "FAILED tests/test_core.py::test_parse - assert 75 == 78" in tests  # kept
    assert sent["messages"][1] == wire["messages"][1]  # the first user message
    assert sent["messages"][-1] == wire["messages"][-1]  # the newest message


def test_the_newest_result_is_kept_and_environment_blocks_stay_as_sent() -> None:
    """helper-133: each environment block counted as a result of its own, so it was
    the newest output kept whole while the command output the agent acts on was
    masked; and an older block (a terminal's new output) was superseded by a newer."""
    wire = _cline()
    newest = lines_of("listing", 90)
    wire["messages"][7]["content"][1]["text"] = newest
    with make_engine(pipeline=FORCE) as engine:
        sent = engine.condense(wire, api="openai.chat").request
    assert _blocks(sent, 7)[1] == newest
    for at in (3, 5, 7):
        assert _blocks(sent, at)[2] == _environment(at // 2)


def test_a_policy_for_a_text_result_tool_is_matched() -> None:
    policies = {"tools": {"read_file": {"exclude": True}, "browser_action": {"exclude": True}}}
    with make_engine(pipeline={**FORCE, **policies}) as engine:
        result = engine.condense(_cline(), api="openai.chat")
    assert result.report["tool_policies_unmatched"] == ["browser_action"]
    assert _blocks(result.request, 3)[1] == FILE  # excluded by name


def test_a_result_in_one_string_and_in_anthropic_blocks_is_condensed() -> None:
    string = {"role": "user", "content": f"[read_file for 'src/core.py'] Result:\n{FILE}"}
    chat = {"model": "gpt-4.1", "messages": [
        {"role": "system", "content": "You are Cline."},
        {"role": "user", "content": "<task>Fix it</task>"},
        {"role": "assistant", "content": "<read_file><path>src/core.py</path></read_file>"},
        string,
        {"role": "assistant", "content": "<execute_command><command>ls</command>"},
        {"role": "user", "content": "[execute_command for 'ls'] Result:\na.py"},
    ]}  # fmt: skip
    messages: list[dict[str, Any]] = chat["messages"][1:]
    anthropic = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You are Cline.",
                 "messages": messages}  # fmt: skip
    for wire, api in ((chat, "openai.chat"), (anthropic, "anthropic.messages")):
        with make_engine(pipeline=FORCE) as engine:
            sent = engine.condense(wire, api=api).request
        at = 3 if api == "openai.chat" else 2
        text = sent["messages"][at]["content"]
        assert text.startswith("[ctxwarden:") and len(text) < len(FILE) / 4, api


def test_without_patterns_user_texts_stay_as_sent() -> None:
    wire = _cline()
    with make_engine(pipeline={**FORCE, "text_tool_results": []}) as engine:
        sent = engine.condense(wire, api="openai.chat").request
    assert all(sent["messages"][i] == wire["messages"][i] for i in (1, 3, 5, 7))


@pytest.mark.parametrize(
    ("patterns", "said"),
    [
        (["[unclosed"], "not a regular expression"),
        (["Result:"], "no group named 'tool'"),
        (["(?P<tool>x)?"], "matches an empty text"),
    ],
)
def test_a_bad_pattern_is_refused_naming_the_key(patterns: list[str], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Engine(EngineConfig(pipeline={"text_tool_results": patterns}), store=MemoryStore())
    assert "text_tool_results" in str(caught.value) and said in str(caught.value)


_USER_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), max_size=400
).filter(lambda t: not t.lstrip().startswith(("[", "<")))


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.lists(_USER_TEXT, min_size=1, max_size=3), min_size=1, max_size=4))
def test_a_user_text_no_pattern_matches_is_never_changed(texts: list[list[str]]) -> None:
    """Whatever the users write in later messages (between results the engine does
    condense), it goes out as written (each text unique: an exact copy of an earlier
    text block may become a reference to it, as any copy does)."""
    turns: list[dict[str, Any]] = []
    for k, blocks in enumerate(texts):
        turns += _turn(k, "<read_file><path>a.py</path></read_file>",
                       "[read_file for 'a.py'] Result:", f"{FILE}\n{k}")  # fmt: skip
        said = [{"type": "text", "text": f"{t} (#{k}.{j})"} for j, t in enumerate(blocks)]
        turns += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": said}]
    wire = {"model": "gpt-4.1", "messages": [
        {"role": "user", "content": "<task>Fix it</task>"}, *turns,
        {"role": "assistant", "content": "Next."}, {"role": "user", "content": "go on"},
    ]}  # fmt: skip
    with make_engine(pipeline=FORCE) as engine:
        sent = engine.condense(wire, api="openai.chat").request
    for k in range(len(texts)):
        at = 1 + 4 * k + 3
        assert sent["messages"][at] == wire["messages"][at]


def test_a_header_naming_a_long_command_is_still_a_header() -> None:
    """helper-137: patterns saw 1,000 characters, so a result whose header named a
    one-line command of about a thousand characters stayed the user's text."""
    command = "python -c '" + "x = 1; " * 300 + "'"
    wire = _cline()
    wire["messages"][3]["content"][0]["text"] = f"[execute_command for '{command}'] Result:"
    with make_engine(pipeline=FORCE) as engine:
        sent = engine.condense(wire, api="openai.chat").request
    assert len(_blocks(sent, 3)[1]) < len(FILE) / 4
