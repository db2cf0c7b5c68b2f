"""The replay of an Anthropic session whose calls write files through their ``input``:
old inputs are condensed in place (an object still), which is neither a violation nor
unrecoverable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxwarden.replay import run_replay


def _written(k: int) -> str:
    lines = (f"def handler_{k}_{i}(event):\n    return event.get('k{i}')" for i in range(60))
    return "\n".join(lines)


def _session(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Write the handlers."}]
    for k in range(turns):
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "write",
               "input": {"file_path": f"src/h{k}.py", "content": _written(k)}}  # fmt: skip
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": "ok"}
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": f"Writing {k}."}, use]},
            {"role": "user", "content": [result]},
        ]
    messages.append({"role": "assistant", "content": "All written."})
    return {
        "id": "writes",
        "source": "test",
        "model": "claude-sonnet-4-5",
        "system": "You write code.",
        "max_tokens": 1024,
        "tools": [{"name": "write", "input_schema": {"type": "object"}}],
        "messages": messages,
    }


def test_old_call_inputs_are_condensed_cleanly_and_recoverably(tmp_path: Path) -> None:
    path = tmp_path / "writes.json"
    path.write_text(json.dumps(_session(8)))
    result = run_replay([path], ["preset:balanced"], baselines=[])
    (session,) = result.subject("balanced").sessions
    assert session.violations == {}
    assert session.transforms["trim_args"]["count"] >= 1
    assert session.tokens[-1] < session.exact_tokens[-1] * 0.5
    assert session.recoverable() == 1.0
