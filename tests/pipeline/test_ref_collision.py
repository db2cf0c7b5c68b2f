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
FAILED = "Error: build failed in step one\nrun 55dea3"
PASSED = "build passed in step one\nrun 42f5bfe"  # collides with FAILED, shows no error


def _call(call_id: str, command: str) -> dict[str, Any]:
    arguments = json.dumps({"command": command})
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "bash", "arguments": arguments}}]}  # fmt: skip


def _request(*outputs: str) -> dict[str, Any]:
    """A request reading each output in turn (calls c0, c1, ...), then an ``ls``."""
    return _runs(*((f"cat f{k}.txt", output) for k, output in enumerate(outputs)))


def _runs(*runs: tuple[str, str]) -> dict[str, Any]:
    """A request running each command with its output in turn (calls c0, c1, ...),
    then one more read."""
    turns: list[dict[str, Any]] = []
    for k, (command, output) in enumerate([*runs, (f"cat f{len(runs)}.txt", "ok")]):
        turns += [_call(f"c{k}", command),
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


def test_a_superseding_output_replaced_by_a_colliding_text_is_no_longer_the_witness() -> None:
    """An old build whose note left out its error line (the newer build showed it) must
    show it again once the newer output reads otherwise, even with the same reference."""
    assert ref_for(FAILED) == ref_for(PASSED) and "Error" not in PASSED
    # two lines, one of them the newer build's: superseded (a longer old output would
    # share too little of it, pipeline.supersede.min_overlap)
    old = "collide " * 60 + "0\nError: build failed in step one"
    engine = _engine()
    first = engine.condense(_runs(("make", old), ("make", FAILED)), "openai.chat", session="x")
    note = first.request["messages"][3]["content"]
    assert "superseded" in note and "Error" not in note  # the witness shows the error line
    second = engine.condense(_runs(("make", old), ("make", PASSED)), "openai.chat", session="x")
    messages = second.request["messages"]
    assert messages[5]["content"] == PASSED
    assert "Error: build failed in step one" in messages[3]["content"]
