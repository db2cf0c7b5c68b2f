"""Hand-made sessions with known answers, and scripted subjects for the replay tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SYS = "You are a coding agent."
TASK = "Fix the bug."


def call(i: int, cmd: str) -> dict[str, Any]:
    args = json.dumps({"command": cmd})
    return {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": args}}


def tool_session() -> list[dict[str, Any]]:
    """Two tool outputs; the last action uses ``src/pkg/widget_core.py`` (only in output 1)
    and ``parse_value`` (only in output 2). Output 1 holds one error line."""
    return [
        {"role": "system", "content": SYS},
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": None, "tool_calls": [call(1, "grep -rn widget src")]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "src/pkg/widget_core.py:12: x = 1\nValueError: widget broke",
        },
        {"role": "assistant", "content": None, "tool_calls": [call(2, "cat notes.txt")]},
        {"role": "tool", "tool_call_id": "c2", "content": "see def parse_value here"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(3, "sed -n 1,5p src/pkg/widget_core.py # parse_value")],
        },
    ]


def write_session(folder: Path, messages: list[dict[str, Any]], name: str = "s1") -> Path:
    path = folder / f"{name}.json"
    path.write_text(
        json.dumps({"id": name, "source": "test", "model": "gpt-4o", "messages": messages})
    )
    return path


@pytest.fixture
def session_file(tmp_path: Path) -> Path:
    return write_session(tmp_path, tool_session())


class Scripted:
    """A subject that rewrites each request with ``fn`` (and recalls from ``store``)."""

    kind = "engine"

    def __init__(self, name: str, fn: Any, store: dict[str, str] | None = None) -> None:
        self.name = name
        self.fn = fn
        self.store = store or {}

    def condense(
        self, request: dict[str, Any], api: str, session: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        out = self.fn(request)
        return out, {"rewritten": out is not request}

    def recall(self, ref: str) -> str | None:
        return self.store.get(ref)

    def close(self) -> None:
        return None
