"""A session-state row damaged yet still valid JSON (helper-104's review): a decision
whose text no longer matches the digest written with it is not re-applied; its segment
goes out original, counted as a segment failure, as for a corrupt artifact."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import ctxwarden
from ctxwarden.pipeline.state import SessionState
from ctxwarden.store.sqlite import SqliteStore

FAIL = "FAILED tests/test_parser.py::test_unicode - AssertionError: assert 'u' == 'v'"
LOG = "\n".join([f"[{i:04d}] INFO step {i} path=/srv/data/f{i}.bin" for i in range(400)] + [FAIL])


def _request(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "task"}
    ]  # fmt: skip
    for t in range(turns):
        arguments = json.dumps({"command": f"pytest -k {t}"})
        call = {"id": f"c{t}", "type": "function",
                "function": {"name": "bash", "arguments": arguments}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}",
                         "content": LOG if t == 0 else f"ok {t}"})  # fmt: skip
    return {"model": "gpt-4o", "messages": messages}


def test_a_damaged_decision_is_not_re_applied(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    config = ctxwarden.EngineConfig(
        preset="aggressive", budget={"context_window": 8000, "output_reserve": 1000}
    )
    with ctxwarden.Engine(config, store=SqliteStore(path)) as engine:
        first = engine.condense(_request(3), api="openai.chat", session="s")
        shown = first.request["messages"][3]["content"]
        assert shown != LOG and FAIL in shown  # condensed, the error line kept
        db = sqlite3.connect(path)
        (state,) = db.execute("SELECT state FROM sessions").fetchone()
        damaged = bytes(state).replace(b"FAILED tests/test_parser", b"FAILEX tests/test_parser")
        assert damaged != bytes(state) and SessionState.decode(damaged).damaged
        db.execute("UPDATE sessions SET state=?", (damaged,))
        db.commit()
        db.close()
        second = engine.condense(_request(4), api="openai.chat", session="s")
    assert second.request["messages"][3]["content"] == LOG  # original, not the damage
    assert second.report["segment_failures"] >= 1


def test_a_state_written_without_digests_is_read_as_it_is() -> None:
    state = SessionState(turns=3)
    raw = json.loads(state.encode())
    raw["decisions"] = {"/messages/3/content": ["[condensed]", "mask", "cw:0123456789ab", [], 5]}
    raw.pop("digest", None)
    decoded = SessionState.decode(json.dumps(raw).encode())
    assert list(decoded.decisions) == ["/messages/3/content"] and not decoded.damaged
