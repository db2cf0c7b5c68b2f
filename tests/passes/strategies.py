"""Hypothesis strategies for OpenAI chat conversations and the invariants every
condensed request must keep (shared by the pass and pipeline property tests)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
from hypothesis import strategies as st

from ctxwarden import Engine
from ctxwarden.signals import error_lines
from tests.passes.convo import MODEL, dumps, refs_in

__all__ = ["chat_requests", "check_invariants", "condense_turns", "fresh_session"]

COMMANDS = (
    "pytest -q",
    "ls -R src",
    "cat src/app.py",
    "make build",
    "git diff",
    "python run.py --fast",
)
ERRORS = (
    "Traceback (most recent call last):",
    "ValueError: bad value for parse_header",
    "FAILED tests/test_app.py::test_run - AssertionError: 3 != 4",
    "src/app.c:12:5: error: expected ';' before '}' token",
    "bash: frobctl: command not found",
)
_sessions = itertools.count()


def fresh_session() -> str:
    """A session key never used before in this process (examples stay independent)."""
    return f"prop-{next(_sessions)}"


@st.composite
def _output(draw: st.DrawFn, earlier: list[str]) -> str:
    kind = draw(
        st.sampled_from(
            ["small", "lines", "lines", "errors", "errors", "noisy", "dup", "dup", "json", "huge"]
        )
    )
    tag = draw(st.sampled_from(["alpha", "beta", "gamma", "delta", "omega"]))
    salt = draw(st.integers(0, 99))
    if kind == "dup" and earlier:
        return draw(st.sampled_from(earlier))
    if kind == "small":
        return f"ok {tag} {salt}"
    if kind == "json":
        data = {"items": [{"id": i, "name": f"{tag}_{salt}_{i}"} for i in range(40)]}
        return json.dumps(data, indent=2)
    n = draw(st.integers(5, 120)) if kind != "huge" else 2100
    rows = [f"{tag} row {i}: checked {tag}_item_{salt}_{i} in module_{tag}.py ok" for i in range(n)]
    if kind == "errors":
        for err in draw(st.lists(st.sampled_from(ERRORS), min_size=1, max_size=3)):
            rows.insert(draw(st.integers(0, len(rows))), err)
    if kind == "noisy":
        rows = [f"\x1b[32m{r}\x1b[0m   " for r in rows] + ["WARNING: again"] * 12
        rows.append("\r".join(f"progress {k * 10}%" for k in range(11)))
    return "\n".join(rows)


@st.composite
def chat_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A valid OpenAI chat request: tool calls with matching results, random sizes,
    duplicates, errors, assistant prose, later user turns and unknown top-level keys."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing build in src/app.py."},
    ]
    outputs: list[str] = []
    ids = itertools.count()
    for _ in range(draw(st.integers(1, 7))):
        n_calls = draw(st.integers(1, 2))
        calls = []
        for _ in range(n_calls):
            cid = f"call_{next(ids)}"
            command = draw(st.sampled_from(COMMANDS))
            calls.append(
                {
                    "id": cid,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            )
        prose = draw(st.sampled_from([None, "Let me check.", "Running the tests in src/app.py"]))
        messages.append({"role": "assistant", "content": prose, "tool_calls": calls})
        for c in calls:
            text = draw(_output(outputs))
            outputs.append(text)
            if draw(st.booleans()):
                content: Any = text
            else:
                content = [{"type": "text", "text": text}]
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})
        extra = draw(st.sampled_from(["none", "none", "assistant", "user"]))
        if extra == "assistant":
            sentences = " ".join(f"Step {i} looked fine in part_{i}." for i in range(60))
            messages.append({"role": "assistant", "content": sentences})
        elif extra == "user":
            messages.append({"role": "user", "content": "Also check the docs please."})
    ending = draw(st.sampled_from(["user", "tools", "assistant_user", "prefill"]))
    if ending == "prefill":  # the model is to continue this text
        prefill = " ".join(f"Step {i} of the fix touches part_{i} of app.py." for i in range(40))
        messages.append({"role": "assistant", "content": prefill})
    elif ending == "assistant_user":
        messages.append({"role": "assistant", "content": "Summary so far."})
        messages.append({"role": "user", "content": "continue"})
    elif ending == "user":
        messages.append({"role": "user", "content": "continue"})
    wire: dict[str, Any] = {"model": MODEL, "messages": messages}
    if draw(st.booleans()):
        wire["temperature"] = 0.2
        wire["x_unknown_future"] = {"nested": [1, 2.5, "three", None, True]}
        wire["tools"] = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    return wire


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def _same_except_text(a: Any, b: Any) -> bool:
    """Content of two messages is the same apart from text values."""
    if isinstance(a, str) or a is None:
        return isinstance(b, type(a))
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if {k: v for k, v in x.items() if k != "text"} != {
            k: v for k, v in y.items() if k != "text"
        }:
            return False
    return True


def _check_calls(engine: Engine, old: Any, new: Any, i: int, tenant: str) -> None:
    """Ids, types and names of tool calls are exact; old calls' arguments may be trimmed,
    stay valid JSON, and name a reference that recalls the exact original arguments."""
    assert len(new) == len(old), i
    for a, b in zip(old, new, strict=True):
        strip = {k: v for k, v in a.items() if k != "function"}
        assert dumps({k: v for k, v in b.items() if k != "function"}) == dumps(strip), i
        assert list(b["function"]) == list(a["function"]), i
        assert b["function"]["name"] == a["function"]["name"], i
        before, after = a["function"]["arguments"], b["function"]["arguments"]
        if before == after:
            continue
        orjson.loads(after)  # still valid JSON
        refs = refs_in(after)
        assert refs, f"message {i}: arguments trimmed without a reference"
        assert before in {engine.recall(r, tenant=tenant) for r in refs}, i


def check_invariants(
    engine: Engine, wire: dict[str, Any], out: dict[str, Any], tenant: str = "local"
) -> int:
    """Assert every whole-request invariant; return the number of rewritten texts."""
    assert list(out) == list(wire)
    for key in wire:
        if key != "messages":
            assert dumps(out[key]) == dumps(wire[key]), key
    before, after = wire["messages"], out["messages"]
    assert len(after) == len(before)
    roles = [m["role"] for m in before]
    end = len(roles)  # a trailing prefill and the turn it continues stay exact too
    while end and roles[end - 1] == "assistant":
        end -= 1
    last_assistant = max((i for i in range(end) if roles[i] == "assistant"), default=-1)
    first_user = roles.index("user") if "user" in roles else -1
    everything = "\n".join(t for m in after for t in _texts(m.get("content")))
    rewritten = 0
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        assert list(new) == list(old), i
        for key in old:
            if key == "tool_calls":
                _check_calls(engine, old[key], new[key], i, tenant)
            elif key != "content":
                assert dumps(new[key]) == dumps(old[key]), (i, key)
        if old["role"] == "system" or i == first_user or i > last_assistant:
            assert dumps(new) == dumps(old), f"protected message {i} changed"
            continue
        assert _same_except_text(old.get("content"), new.get("content")), i
        for o, n in zip(_texts(old.get("content")), _texts(new.get("content")), strict=True):
            if o == n:
                continue
            rewritten += 1
            assert n.strip(), f"message {i} became empty"
            for line in error_lines(o):
                assert line in everything, f"error line lost: {line!r}"
            refs = refs_in(n)
            assert refs, f"message {i} rewritten without a reference"
            recalled = {engine.recall(ref, tenant=tenant) for ref in refs}
            assert o in recalled, f"message {i}: no reference recalls the original"
    # Tool pairing: every result answers an earlier call of the open assistant turn.
    open_ids: list[str] = []
    for m in after:
        if m["role"] == "assistant":
            open_ids = [c["id"] for c in m.get("tool_calls") or ()]
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_ids
            open_ids.remove(m["tool_call_id"])
    return rewritten


def condense_turns(
    engine: Engine, wire: dict[str, Any], cuts: int = 3
) -> list[tuple[dict[str, Any], Any]]:
    """Condense growing prefixes of ``wire`` (ending before assistant messages, then the
    whole request) in one session; check invariants and cache stability between steps."""
    messages = wire["messages"]
    ends = [k for k, m in enumerate(messages) if m["role"] == "assistant" and k > 2]
    ends = [*ends[-(cuts - 1) :], len(messages)] if cuts > 1 else [len(messages)]
    session = fresh_session()
    previous: list[Any] | None = None
    out = []
    for end in ends:
        request = {**wire, "messages": messages[:end]}
        res = engine.condense(request, session=session)
        assert res.report["fallback_reason"] is None, res.report["fallback_reason"]
        check_invariants(engine, request, res.request)
        sent = res.request["messages"]
        if previous is not None and not res.report["compaction_step"]:
            assert dumps(sent[: len(previous)]) == dumps(previous), "cache prefix broken"
        previous = sent
        out.append((request, res))
    return out
