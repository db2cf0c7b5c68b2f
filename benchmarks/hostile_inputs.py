"""Condense time on hostile but plausible agent inputs (not a test).

Each case is a chat request whose oldest tool output, call or assistant text holds one
adversarial text; the times are one ``Engine.condense`` (memory store, the vocabulary
loaded untimed) and a second one of the same request (the next turn resends the
history, so a text too large to memo costs its time on every turn), plus the proxy's
SSE splitter on one big event. Run it on two commits (``git archive REV src`` and
``PYTHONPATH``) to compare.

    .venv/bin/python benchmarks/hostile_inputs.py
"""

from __future__ import annotations

import time
from typing import Any

from ctxwarden import Engine, EngineConfig


def _request(output: str = "short", command: str = "cat f.txt", text: str | None = None) -> Any:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    for k in range(6):
        args = '{"command": "%s"}' % (command if k == 0 else f"cat f{k}.txt")
        call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": args}}
        messages.append({"role": "assistant", "content": text if k == 1 else None,
                         "tool_calls": [call]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"c{k}",
                         "content": output if k == 0 else f"line {k}\n" * 50})  # fmt: skip
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    return {"model": "gpt-4o", "messages": messages}


def _error_log(n: int, hidden: bool) -> str:
    return "\n".join(
        f"  at helper_fn_{i} (lib/pkg_{i}/file_{i}.js:{i}:7)"
        if hidden and i % 2 == 0
        else f"Error: failure number {i} in module_{i}"
        for i in range(n)
    )


CASES: list[tuple[str, str, Any]] = [
    ("long word in a command", "conservative", _request(command="echo " + "x" * 80_000)),
    ("dotted line with an Error", "conservative", _request("a." * 20_000 + " ValueError: x")),
    ("16,000 error lines", "balanced", _request(_error_log(16_000, hidden=False))),
    ("error lines and hidden names", "balanced", _request(_error_log(16_000, hidden=True))),
    (
        "text opening with a 20,000-line list",
        "balanced",
        _request(
            text="\n".join(f"- item {i} with some words" for i in range(20_000))
            + ". After. "
            + "\n".join(f"line {i}" for i in range(20_000))
        ),
    ),
]


def main() -> None:
    for name, preset, request in CASES:
        engine = Engine(EngineConfig(preset=preset, store={"backend": "memory"}))
        engine.condense(_request(), session="warm-up")
        started = time.perf_counter()
        engine.condense(request, session="s")
        first = time.perf_counter() - started
        started = time.perf_counter()  # the next turn resends it: what every turn costs
        engine.condense(request, session="s")
        again = time.perf_counter() - started
        print(f"{name:40} {preset:12} {first:8.2f} s {again:8.2f} s")
    from ctxwarden.proxy.sse import SSESplitter

    event = b"data: " + b"x" * 15_000_000 + b"\n\n"
    splitter = SSESplitter()
    started = time.perf_counter()
    for i in range(0, len(event), 65_536):
        splitter.feed(event[i : i + 65_536])
    name, elapsed = "15 MB SSE event in 64 KB chunks", time.perf_counter() - started
    print(f"{name:40} {'proxy':12} {elapsed:8.2f} s")


if __name__ == "__main__":
    main()
