"""Two outputs whose 48-bit ``cw:`` references collide (crafted: about 2**24 tries find
a pair) never share a placeholder: the one condensed second in a request stays whole,
and a text that replaced an adopted decision's original at its place is not sent with
the original's placeholder (helper-126's review: its reference recalled the other
text)."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from ctxwarden import Engine, EngineConfig
from ctxwarden.passes.base import ref_for
from ctxwarden.store.base import REF_PATTERN
from tests.passes.convo import FORCE

_PREFIX = (
    "\n".join(
        f"collide row {i}: checked collide_item_{i} in module_collide.py ok" for i in range(80)
    )
    + "\nnonce "
)
A, B = _PREFIX + "ee3597707b8a", _PREFIX + "d034045fbbe0"


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "bash", "arguments": arguments}}]}  # fmt: skip


def _request(*outputs: str) -> dict[str, Any]:
    """A request reading each output in turn (calls c0, c1, ...), then an ``ls``."""
    turns: list[dict[str, Any]] = []
    for k, output in enumerate([*outputs, "ok"]):
        turns += [_call(f"c{k}", f"cat f{k}.txt"),
                  {"role": "tool", "tool_call_id": f"c{k}", "content": output}]  # fmt: skip
    return {"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the build."}, *turns,
        {"role": "assistant", "content": "Looking."}, {"role": "user", "content": "go on"},
    ]}  # fmt: skip


def _engine() -> Engine:
    return Engine(EngineConfig(preset="aggressive", pipeline=FORCE, data_dir=tempfile.mkdtemp()))


def _recalls_its_own(engine: Engine, sent: str, original: str) -> bool:
    return all(engine.recall(ref) == original for ref in REF_PATTERN.findall(sent))


def test_the_pair_collides() -> None:
    assert A != B and ref_for(A) == ref_for(B)


def test_two_colliding_outputs_in_one_request_never_share_a_reference() -> None:
    request = _request(A, B)
    engine = _engine()
    sent = engine.condense(request, "openai.chat", session="x").request["messages"]
    assert _recalls_its_own(engine, sent[3]["content"], A)
    assert _recalls_its_own(engine, sent[5]["content"], B)
    assert sent[5]["content"] == B  # its reference is taken: it stays whole


def test_a_colliding_text_at_an_adopted_place_is_not_given_its_placeholder() -> None:
    engine = _engine()
    first = engine.condense(_request(A), "openai.chat", session="x").request["messages"]
    assert first[3]["content"] != A  # condensed: a decision adopted for A
    second = engine.condense(_request(B), "openai.chat", session="x").request["messages"]
    assert _recalls_its_own(engine, second[3]["content"], B)
