"""Distinctive strings, error lines, wire views and JSONL request logs."""

from __future__ import annotations

import json
from pathlib import Path

from ctxwarden.replay.inputs import expand_paths, iter_sessions
from ctxwarden.replay.signals import distinctive_tokens, error_lines
from ctxwarden.replay.wire import action_text, item_skeleton, item_texts


def test_distinctive_tokens() -> None:
    text = "open ./src/app/models.py:120 then call parse_header on os.path and getUserName x 7"
    assert distinctive_tokens(text) == {
        "src/app/models.py",
        "120",
        "parse_header",
        "os.path",
        "getUserName",
    }
    assert distinctive_tokens("the quick brown fox 7") == set()


def test_error_lines() -> None:
    text = (
        "ok\nTraceback (most recent call last):\n  File x\nKeyError: 'a'\n"
        "tests/test_a.py::test_b FAILED\nsrc/a.c:3:5: error: expected ';'\n"
        "def handle(e: ValueError) -> None\n"
    )
    assert error_lines(text) == {
        "Traceback (most recent call last):",
        "KeyError: 'a'",
        "tests/test_a.py::test_b FAILED",
        "src/a.c:3:5: error: expected ';'",
    }


def test_wire_views_over_three_apis() -> None:
    anthropic = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}],
    }
    assert item_texts(anthropic) == [(True, "out")]
    assert item_skeleton(anthropic) == (("result", "t1", ""),)
    responses = {"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"}
    assert item_skeleton(responses) == (("call", "c", "bash"),)
    chat = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "c",
                "function": {"name": "f", "arguments": json.dumps({"command": "cat a/b.py"})},
            }
        ],
    }
    assert "cat a/b.py" in action_text(chat)


def test_jsonl_log_groups_sessions_and_derives_next_actions(tmp_path: Path) -> None:
    m1 = [{"role": "user", "content": "hi"}]
    a1 = {"role": "assistant", "content": "look at src/x_y.py"}
    m2 = [*m1, a1, {"role": "user", "content": "ok"}]
    lines = [
        {"request": {"model": "gpt-4o", "messages": m1}, "session": "A", "ts": 10},
        {"request": {"model": "gpt-4o", "messages": m2}, "session": "A", "ts": 20},
        {"model": "claude-sonnet-4", "system": "s", "messages": m1},
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert expand_paths([tmp_path]) == [path]
    sessions = [s for _, s in iter_sessions([path])]
    assert [s.id for s in sessions] == ["A", "log.jsonl"]
    first = sessions[0].requests
    assert first[0].next_action == [a1]
    assert first[0].ts == 10 and first[1].next_action is None
    assert sessions[1].requests[0].api == "anthropic.messages"


def test_a_coloured_error_line_is_read_without_its_colours() -> None:
    coloured = "ok\n\x1b[31mFAILED\x1b[0m tests/t.py::test_a\n\x1b[91mValueError: bad\x1b[0m"
    plain = "ok\nFAILED tests/t.py::test_a\nValueError: bad"
    assert (
        error_lines(coloured)
        == error_lines(plain)
        == {
            "FAILED tests/t.py::test_a",
            "ValueError: bad",
        }
    )
