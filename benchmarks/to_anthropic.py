"""Convert OpenAI Chat sessions to Anthropic Messages session files (not a test).

The corpus is OpenAI Chat; this writes the same sessions as an Anthropic client would
send them, so ``ctxwarden replay`` measures the Messages path on real histories:
system messages become the top-level ``system``, assistant tool calls ``tool_use``
blocks whose ``input`` is the decoded arguments object, tool messages ``tool_result``
blocks of a user message (consecutive ones merged into one message, as Messages
requires alternating roles).

    python benchmarks/to_anthropic.py 4 /tmp/anth   # EVERY_NTH OUT_DIR
    ctxwarden replay /tmp/anth --preset balanced --preset aggressive
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "sessions"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"raw": arguments}
    return value if isinstance(value, dict) else {"value": value}


def convert(session: dict[str, Any]) -> dict[str, Any]:
    """The Messages session of one Chat session file's object."""
    system: list[str] = []
    messages: list[dict[str, Any]] = []

    def push(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for m in session["messages"]:
        role, text = m["role"], _text(m.get("content"))
        if role == "system":
            system.append(text)
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": m["tool_call_id"]}
            push("user", [{**result, "content": text or "(empty)"}])
        else:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for call in m.get("tool_calls") or []:
                function = call["function"]
                blocks.append({"type": "tool_use", "id": call["id"], "name": function["name"],
                               "input": _input(function["arguments"])})  # fmt: skip
            if blocks:
                push("assistant" if role == "assistant" else "user", blocks)
    names = {b["name"] for m in messages for b in m["content"] if b["type"] == "tool_use"}
    return {
        "id": session["id"],
        "source": session.get("source", ""),
        "model": "claude-sonnet-4-5",
        "system": "\n".join(system) or "You are an agent.",
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in sorted(names)],
        "max_tokens": 4096,
        "messages": messages,
    }


def main() -> None:
    step = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "anthropic_sessions")
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(CORPUS.glob("*.json.gz"))[::step]
    for f in files:
        with gzip.open(f) as fh:
            session = json.load(fh)
        (out / f.name.replace(".json.gz", ".json")).write_text(json.dumps(convert(session)))
    print(f"{len(files)} sessions written to {out}")


if __name__ == "__main__":
    main()
