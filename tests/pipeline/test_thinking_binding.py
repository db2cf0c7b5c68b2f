"""Thinking bound to its prefix (Anthropic "preserved thinking"): for a model that binds
its thinking blocks to what precedes them, no new replacement goes before the last
signed thinking block, while replacements adopted before such a block appeared are
re-applied as always (the block was produced for the request that held them); other
models, and requests without thinking, are condensed as before."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden import Engine
from ctxwarden.errors import StoreError
from ctxwarden.model.classify import signed_reasoning_end
from ctxwarden.proxy.fake_thinking import sign, thinking_error
from ctxwarden.store import MemoryStore
from ctxwarden.store.base import REF_PATTERN
from ctxwarden.tokens.registry import load_registry
from tests.passes.convo import FORCE, lines_of, make_engine

BINDING = "claude-fable-5-1"
NOT_BINDING = "claude-opus-4-1"


def _turn(k: int, thinking: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if thinking:
        blocks.append({"type": "thinking", "thinking": f"Plan {k}.", "signature": f"sig-{k}"})
    blocks.append(
        {"type": "tool_use", "id": f"t{k}", "name": "bash", "input": {"command": f"ls dir{k}"}}
    )
    output = lines_of(f"out{k}", 120)
    return [
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}",
                                      "content": output}]},
    ]  # fmt: skip


def _request(model: str, turns: list[bool]) -> dict[str, Any]:
    """A Messages request: one turn per entry, with a signed thinking block when True."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing build."}]
    for k, thinking in enumerate(turns):
        messages += _turn(k, thinking)
    return {"model": model, "max_tokens": 1024, "system": "You are a coding agent.",
            "messages": messages}  # fmt: skip


def _changed_messages(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(before["messages"], after["messages"], strict=True))
            if a != b]  # fmt: skip


def _engine() -> Engine:
    return make_engine("aggressive", FORCE)


def test_the_registry_says_which_models_bind_and_takes_unknown_ones_to() -> None:
    registry = load_registry()
    assert registry.binds_thinking(registry.lookup(BINDING))
    assert registry.binds_thinking(registry.lookup("claude-opus-5-5"))
    assert not registry.binds_thinking(registry.lookup(NOT_BINDING))
    assert not registry.binds_thinking(registry.lookup("claude-opus-5"))
    assert registry.binds_thinking(registry.lookup("some-model-from-next-year"))


@pytest.mark.parametrize("model", [BINDING, NOT_BINDING])
def test_without_thinking_both_kinds_of_model_are_condensed(model: str) -> None:
    request = _request(model, [False] * 8)
    result = _engine().condense(copy.deepcopy(request), api="anthropic.messages")
    assert result.report["rewritten"]
    assert _changed_messages(request, result.request)


def test_a_binding_model_gets_no_new_replacement_before_its_last_thinking_block() -> None:
    request = _request(BINDING, [True] * 8)
    result = _engine().condense(copy.deepcopy(request), api="anthropic.messages")
    assert result.request == request
    assert not result.report["rewritten"]


def test_a_model_that_does_not_bind_is_condensed_before_its_thinking_blocks() -> None:
    request = _request(NOT_BINDING, [True] * 8)
    result = _engine().condense(copy.deepcopy(request), api="anthropic.messages")
    changed = _changed_messages(request, result.request)
    last_thinking = 2 * 7 + 1  # the newest assistant message, itself exact
    assert changed and max(changed) < last_thinking


def test_only_what_follows_the_last_thinking_block_may_be_condensed() -> None:
    request = _request(BINDING, [True, True, False, False, False, False, False, False])
    engine = _engine()
    from ctxwarden.adapters import get_adapter

    end = signed_reasoning_end(get_adapter("anthropic.messages").parse(request))
    assert end == 4  # the second turn's assistant message is index 3
    result = engine.condense(copy.deepcopy(request), api="anthropic.messages")
    changed = _changed_messages(request, result.request)
    assert changed and min(changed) >= end


def test_replacements_adopted_before_thinking_began_stay_while_nothing_new_is_added() -> None:
    engine = _engine()
    session = "bound-session"
    plain = [False] * 6
    first = engine.condense(_request(BINDING, plain), api="anthropic.messages", session=session)
    assert first.report["rewritten"]
    sent = first.request
    for n in range(1, 4):  # thinking from now on: each request extends what was sent
        request = _request(BINDING, plain + [True] * n)
        result = engine.condense(copy.deepcopy(request), api="anthropic.messages", session=session)
        assert result.request["messages"][: len(sent["messages"]) - 1] == sent["messages"][:-1]
        newest_thinking = signed_reasoning_end(engine.parse(request, "anthropic.messages"))
        tail = result.request["messages"][len(sent["messages"]) - 1 : newest_thinking]
        assert tail == request["messages"][len(sent["messages"]) - 1 : newest_thinking]
        assert not result.report["compaction_step"]
        sent = result.request


class _Blip(MemoryStore):
    """A memory store whose artifact lookups fail while ``down``."""

    down = False

    def missing(self, tenant: str, refs: Any) -> frozenset[str]:
        if self.down:
            raise StoreError("blip")
        return super().missing(tenant, refs)

    def get(self, tenant: str, ref: str) -> str:
        if self.down:
            raise StoreError("blip")
        return super().get(tenant, ref)


@pytest.mark.parametrize("loss", ["artifacts_lost", "store_down"])
def test_replacements_before_a_bound_block_stay_whatever_became_of_their_artifacts(
    loss: str,
) -> None:
    # the thinking blocks were produced after the condensed texts: sending the originals
    # again would make the provider refuse them (a store blip is no reason to)
    store = _Blip()
    engine = make_engine("aggressive", FORCE, store=store)
    session = "bound-store"
    plain = [False] * 6
    first = engine.condense(_request(BINDING, plain), api="anthropic.messages", session=session)
    assert first.report["rewritten"]
    second = engine.condense(
        _request(BINDING, [*plain, True]), api="anthropic.messages", session=session
    )
    if loss == "artifacts_lost":
        store._items.clear()
    else:
        store.down = True
    request = _request(BINDING, [*plain, True, True])
    third = engine.condense(copy.deepcopy(request), api="anthropic.messages", session=session)
    kept = len(second.request["messages"])
    assert third.request["messages"][:kept] == second.request["messages"]
    if loss == "artifacts_lost":  # the originals are written again from the resent texts
        for ref in first.report["references"]:
            assert engine.recall(ref)
    # a model that does not bind gets the segment-local rule: the segments go whole
    other = make_engine("aggressive", FORCE, store=_Blip())
    other.condense(_request(NOT_BINDING, plain), api="anthropic.messages", session=session)
    assert isinstance(other.store, _Blip)
    other.store._items.clear()
    again = other.condense(
        _request(NOT_BINDING, [*plain, True]), api="anthropic.messages", session=session
    )
    assert again.report["segment_failures"] > 0


def test_the_report_says_where_new_edits_may_start() -> None:
    engine = _engine()
    bound = engine.condense(_request(BINDING, [True, True, False]), api="anthropic.messages")
    free = engine.condense(_request(NOT_BINDING, [True, True, False]), api="anthropic.messages")
    assert bound.report["new_edits_from"] == 4 and free.report["new_edits_from"] == 0


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[str, list[bool], list[int], list[bool], int | None]:
    """A model, per request whether the model thinks, output sizes, whether it closes
    the user's turn (a text answer, then a new user message), and a request at which
    the store loses every artifact (or none)."""
    n = draw(st.integers(4, 18))
    thinking = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    sizes = draw(st.lists(st.integers(5, 200), min_size=n, max_size=n))
    closes = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    loss = draw(st.none() | st.integers(0, n - 1))
    model = draw(st.sampled_from([BINDING, "claude-opus-5-5"]))
    return model, thinking, sizes, closes, loss


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session=_sessions(), preset=st.sampled_from(["balanced", "aggressive"]))
def test_every_bound_block_reaches_the_model_after_what_it_was_produced_for(
    session: tuple[str, list[bool], list[int], list[bool], int | None], preset: str
) -> None:
    # the model signs each thinking block over the request it answers (as sent, after
    # condensing); every later request must send each block after the same prefix, or
    # leave it out (only at the opening of a user turn, and for good: a block left out
    # never comes back, and none of the current turn's is left out)
    model, thinking, sizes, closes, loss = session
    store = _Blip()
    engine = make_engine(preset, FORCE, store=store)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing build."}]
    left_out: set[str] = set()  # signatures of blocks no longer sent
    for k, (thinks, size, close) in enumerate(zip(thinking, sizes, closes, strict=True)):
        if k == loss:
            store._items.clear()
        request = {"model": model, "max_tokens": 1024, "system": "You are a coding agent.",
                   "messages": copy.deepcopy(history)}  # fmt: skip
        result = engine.condense(request, api="anthropic.messages", session="prop")
        sent = result.request
        assert thinking_error(sent, binds=True) is None, k
        assert len(sent["messages"]) == len(history)
        opening = isinstance(history[-1]["content"], str)  # a user's text: a new turn
        turn_start = max(i for i, m in enumerate(history)
                         if m["role"] == "user" and isinstance(m["content"], str))  # fmt: skip
        signed = {b["signature"] for m in sent["messages"] for b in _blocks(m)
                  if b.get("type") == "thinking"}  # fmt: skip
        for i, message in enumerate(history):
            for block in _blocks(message):
                if block.get("type") != "thinking":
                    continue
                if block["signature"] in signed:
                    assert block["signature"] not in left_out, k  # never back
                    continue
                assert i < turn_start, k  # the current turn keeps its thinking
                if block["signature"] not in left_out:
                    assert opening, k  # left out only at a user turn's opening
                    left_out.add(block["signature"])
        for before, after in zip(history, sent["messages"], strict=True):
            assert after["role"] == before["role"]
            assert after["content"], k  # never left empty
        blocks: list[dict[str, Any]] = []
        if thinks:
            blocks.append({"type": "thinking", "thinking": f"Plan {k}.",
                           "signature": sign(sent, f"Plan {k}.")})  # fmt: skip
        if close:
            history += [
                {"role": "assistant", "content": [*blocks, {"type": "text", "text": f"Done {k}."}]},
                {"role": "user", "content": f"Now task {k + 1}."},
            ]  # fmt: skip
            continue
        blocks.append({"type": "tool_use", "id": f"t{k}", "name": "bash",
                       "input": {"command": f"ls dir{k}"}})  # fmt: skip
        output = lines_of(f"out{k}", size)
        history += [
            {"role": "assistant", "content": blocks},
            {"role": "user",
             "content": [{"type": "tool_result", "tool_use_id": f"t{k}", "content": output}]},
        ]  # fmt: skip


def test_thinking_is_left_out_from_a_step_at_a_user_turn_on_and_stays_out() -> None:
    # under pressure, at the opening of a user turn, a step rewrites old outputs and the
    # thinking from its first rewritten message on is left out; the next request (a
    # tool result) leaves the same blocks out and keeps the new turn's
    engine = _engine()
    request = _request(BINDING, [True] * 8)
    request["messages"] += [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "All done.", "signature": "sig-done"},
            {"type": "text", "text": "Done."}]},
        {"role": "user", "content": "Next task."},
    ]  # fmt: skip
    first = engine.condense(request, api="anthropic.messages", session="s")
    assert first.report["new_edits_from"] == 0
    dropped = first.report["thinking_dropped"]
    assert dropped >= 1
    edited = _changed_messages(request, first.request)
    kept = [b["signature"] for m in first.request["messages"] for b in _blocks(m)
            if b.get("type") == "thinking"]  # fmt: skip
    assert kept == [f"sig-{k}" for k in range(8) if 1 + 2 * k < edited[0]]
    follow = copy.deepcopy(request)
    follow["messages"] += [
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Look.", "signature": "sig-new"},
            {"type": "tool_use", "id": "t99", "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t99",
                                      "content": "a"}]},
    ]  # fmt: skip
    second = engine.condense(follow, api="anthropic.messages", session="s")
    assert second.report["thinking_dropped"] == dropped
    assert second.request["messages"][: len(request["messages"])] == first.request["messages"]
    assert second.request["messages"][-2:] == follow["messages"][-2:]


@pytest.mark.parametrize(("model", "kept"), [(BINDING, False), (NOT_BINDING, True)])
def test_shadow_keeps_no_replacement_a_binding_model_never_saw(model: str, kept: bool) -> None:
    # a shadow session switched to active would send, before the thinking the model
    # wrote for the original texts, replacements it never saw
    engine = _engine()
    plain = [False] * 6
    shadow = engine.condense(
        _request(model, plain), api="anthropic.messages", session="sh", mode="shadow"
    )
    assert shadow.report["rewritten"] and shadow.request == _request(model, plain)
    request = _request(model, [*plain, True])
    active = engine.condense(copy.deepcopy(request), api="anthropic.messages", session="sh")
    bound = signed_reasoning_end(engine.parse(request, "anthropic.messages"))
    untouched = active.request["messages"][:bound] == request["messages"][:bound]
    assert untouched is not kept


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), -5.0, 60.0])
def test_a_session_is_held_as_sent_for_a_finite_while_only(seconds: float) -> None:
    import time

    from ctxwarden.pipeline.state import SessionState

    engine = _engine()
    engine.forget_session("held", as_sent_for=seconds)
    state = SessionState.decode(engine.store.get_state("local", "held"))
    if seconds == 60.0 or seconds == float("inf"):
        assert time.time() < state.as_sent_until < time.time() + 31 * 24 * 3600
        held = engine.condense(_request(NOT_BINDING, [False] * 6), api="anthropic.messages",
                               session="held")  # fmt: skip
        assert held.report["as_sent"] and not held.report["rewritten"]
    else:
        assert state.as_sent_until == 0.0


def _play(engine: Engine, history: list[dict[str, Any]], k: int, close: bool) -> dict[str, Any]:
    """One request of a thinking session (checked as the provider checks it), then the
    answer signed over what was sent and, for a tool call, its output."""
    request = {"model": BINDING, "max_tokens": 1024, "system": "You are a coding agent.",
               "messages": copy.deepcopy(history)}  # fmt: skip
    result = engine.condense(request, api="anthropic.messages", session="s")
    assert thinking_error(result.request, binds=True) is None, k
    thought = {"type": "thinking", "thinking": f"Plan {k}.",
               "signature": sign(result.request, f"Plan {k}.")}  # fmt: skip
    if close:
        history += [{"role": "assistant", "content": [thought, {"type": "text", "text": "Done."}]},
                    {"role": "user", "content": f"Now task {k + 1}."}]  # fmt: skip
    else:
        call = {"type": "tool_use", "id": f"t{k}", "name": "bash", "input": {"command": f"ls {k}"}}
        result_block = {"type": "tool_result", "tool_use_id": f"t{k}",
                        "content": lines_of(f"out{k}", 120)}  # fmt: skip
        history += [{"role": "assistant", "content": [thought, call]},
                    {"role": "user", "content": [result_block]}]  # fmt: skip
    return result.report


@pytest.mark.parametrize("edit", ["re_prompt", "rewind"])
def test_blocks_left_out_stay_out_when_the_client_re_prompts_or_rewinds(edit: str) -> None:
    # the drops name the blocks, not the history they were in: a re-prompted turn (the
    # user message of a step that left thinking out, replaced) or a rewind to an earlier
    # such turn sends each block after what it was signed over, or leaves it out
    engine = _engine()
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing build."}]
    steps: list[list[dict[str, Any]]] = []  # the history each drop step was sent with
    k = 0
    while len(steps) < 3 and k < 60:
        before = copy.deepcopy(history)
        report = _play(engine, history, k, k % 4 == 3)
        if report.get("thinking_dropped") and report["compaction_step"]:
            steps.append(before)
        k += 1
    assert len(steps) == 3
    history = copy.deepcopy(steps[-1] if edit == "re_prompt" else steps[1])
    history[-1] = {"role": "user", "content": "Actually, do something else."}
    for k in range(100, 106):
        _play(engine, history, k, k % 4 == 3)


def _split_request(turns: list[bool]) -> dict[str, Any]:
    """As :func:`_request`, each tool result's output held in three text blocks."""
    request = _request(BINDING, turns)
    for message in request["messages"][2::2]:
        result = message["content"][0]
        result["content"] = [
            {"type": "text", "text": lines_of(f"{result['tool_use_id']}p{j}", 60)} for j in range(3)
        ]
    return request


class _Unwritable(MemoryStore):
    """A memory store that refuses new artifacts while ``full``."""

    full = False

    def put(self, tenant: str, text: str) -> str:
        if self.full:
            raise StoreError("full")
        return super().put(tenant, text)


@pytest.mark.parametrize("split", [False, True])
def test_lost_originals_of_held_replacements_are_written_again(split: bool) -> None:
    # a result held in several blocks: its placeholder and stubs name the whole output,
    # which no single block's text hashes to; it is rebuilt from the blocks
    make = _split_request if split else (lambda turns: _request(BINDING, turns))
    store = _Unwritable()
    engine = make_engine("aggressive", FORCE, store=store)
    plain = [False] * 6
    first = engine.condense(make(plain), api="anthropic.messages", session="s")
    assert first.report["references"]
    engine.condense(make([*plain, True]), api="anthropic.messages", session="s")
    store.lose_artifacts()
    third = engine.condense(make([*plain, True, True]), api="anthropic.messages", session="s")
    sent = set(REF_PATTERN.findall(orjson.dumps(third.request).decode()))
    assert sent >= set(first.report["references"])
    for ref in sent:
        assert engine.recall(ref)
    assert third.report["segment_failures"] == 0


def test_held_replacements_whose_originals_cannot_be_written_again_are_counted() -> None:
    store = _Unwritable()
    engine = make_engine("aggressive", FORCE, store=store)
    plain = [False] * 6
    engine.condense(_split_request(plain), api="anthropic.messages", session="s")
    second = engine.condense(_split_request([*plain, True]), api="anthropic.messages", session="s")
    store.lose_artifacts()
    store.full = True
    third = engine.condense(
        _split_request([*plain, True, True]), api="anthropic.messages", session="s"
    )
    kept = len(second.request["messages"])
    assert third.request["messages"][:kept] == second.request["messages"]  # held: as adopted
    assert third.report["segment_failures"] > 0
