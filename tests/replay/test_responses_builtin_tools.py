"""A Responses agent on the built-in shell and apply_patch tools, replayed: its old
outputs and patches are condensed, and the replay's integrity checks find nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ctxwarden.config import EngineConfig
from ctxwarden.replay.report_json import result_to_dict
from ctxwarden.replay.runner import run_replay


def _lines(tag: str, n: int = 120) -> str:
    return "\n".join(f"{tag} {i}: value_{i} = compute(src/{tag}/mod_{i}.py)" for i in range(n))


def _turn(i: int) -> list[dict[str, Any]]:
    """One turn: a shell call and its output, then a patch and its result."""
    shell = {
        "type": "shell_call",
        "call_id": f"call_sh{i}",
        "action": {"commands": [f"cat src/pkg/mod_{i}.py"]},
        "status": "completed",
    }
    outcome = {"type": "exit", "exit_code": 0}
    output = {
        "type": "shell_call_output",
        "call_id": f"call_sh{i}",
        "output": [{"stdout": _lines(f"out{i}"), "stderr": "", "outcome": outcome}],
    }
    diff = "\n".join(f"+line {k} of patch {i}" for k in range(150))
    operation = {"type": "update_file", "path": f"src/pkg/mod_{i}.py", "diff": diff}
    patch = {
        "type": "apply_patch_call",
        "call_id": f"call_ap{i}",
        "status": "completed",
        "operation": operation,
    }
    done = {
        "type": "apply_patch_call_output",
        "call_id": f"call_ap{i}",
        "status": "completed",
        "output": f"patched src/pkg/mod_{i}.py",
    }
    return [shell, output, patch, done]


def _log(path: Path, turns: int) -> Path:
    items: list[dict[str, Any]] = [{"role": "user", "content": "fix the failing module"}]
    lines = []
    for i in range(turns):
        items.extend(_turn(i))
        request = {"model": "gpt-5", "instructions": "You are an agent.", "input": list(items)}
        lines.append(orjson.dumps({"request": request, "api": "openai.responses"}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_builtin_tool_sessions_condense_with_no_integrity_violation(tmp_path: Path) -> None:
    log = _log(tmp_path / "shell.jsonl", 30)
    config = EngineConfig(preset="balanced", store={"backend": "memory"})  # type: ignore[arg-type]
    result = run_replay([log], [config], baselines=("exact", "mask:3"))
    data = result_to_dict(result, turns=False)
    for subject in data["subjects"]:  # the masking baseline writes valid outputs too
        violations = subject["aggregate"]["violations"]
        assert violations["total"] == 0, (subject["name"], violations)
    aggregate = data["subjects"][-1]["aggregate"]
    assert aggregate["reduction"]["total"] > 0.3
    transforms = aggregate["decisions"]["transforms"]
    assert transforms, "nothing was condensed"
