"""Failures stay local: corrupted or missing artifacts roll back one segment, a broken
store sends the original request with a reason, and nothing raises."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxwarden import StoreError
from ctxwarden.store import MemoryStore, SqliteStore
from tests.passes.convo import FORCE, call, dumps, lines_of, make_engine, refs_in, request, result
from tests.passes.strategies import check_invariants


def _turn1() -> dict[str, Any]:
    return request(
        call("c1", "pytest -q"),
        result("c1", lines_of("first", 80, extra=("Error: one",))),
        call("c2", "ls -R"),
        result("c2", lines_of("second", 80)),
        call("c3", "git status"),
        result("c3", "clean"),
    )


def _turn2() -> dict[str, Any]:
    wire = _turn1()
    wire["messages"] += [call("c4", "git diff"), result("c4", lines_of("third", 10))]
    return wire


def _ref_of(res: Any, index: int) -> str:
    (ref,) = set(refs_in(res.request["messages"][index]["content"].split("\n")[0]))
    return ref


def _corrupt_then_continue() -> tuple[Any, Any, dict[str, Any], Any, str]:
    store = MemoryStore()
    engine = make_engine("balanced", FORCE, store=store)
    first = engine.condense(_turn1(), session="s")
    assert first.request["messages"][3]["content"] != _turn1()["messages"][3]["content"]
    assert first.request["messages"][5]["content"] != _turn1()["messages"][5]["content"]
    bad = _ref_of(first, 3)
    store.corrupt("local", bad, "tampered bytes")
    replica = make_engine("balanced", FORCE, store=store)
    wire = _turn2()
    return first, replica, wire, replica.condense(wire, session="s"), bad


def test_corrupted_artifact_is_a_counted_segment_failure_not_a_crash() -> None:
    first, replica, wire, res, _bad = _corrupt_then_continue()
    assert res.report["fallback_reason"] is None
    assert res.report["segment_failures"] + res.report["rollbacks"] >= 1
    # The other segment stays condensed exactly as before (its cache prefix holds).
    assert res.request["messages"][5]["content"] == first.request["messages"][5]["content"]
    # Nothing sent may point at the tampered bytes: every reference recalls the original.
    check_invariants(replica, wire, res.request)


def test_corrupted_segment_is_sent_as_the_original() -> None:
    """The brief: after a corrupted artifact the segment stays as the original."""
    _, _, wire, res, _ = _corrupt_then_continue()
    assert res.request["messages"][3]["content"] == wire["messages"][3]["content"]


def test_corrupted_artifact_is_detected_by_the_engine_that_stored_it() -> None:
    store = MemoryStore()
    engine = make_engine("balanced", FORCE, store=store)
    first = engine.condense(_turn1(), session="s")
    store.corrupt("local", _ref_of(first, 3), "tampered bytes")
    wire = _turn2()
    res = engine.condense(wire, session="s")
    assert res.report["fallback_reason"] is None
    assert res.report["segment_failures"] + res.report["rollbacks"] >= 1
    check_invariants(engine, wire, res.request)


def test_corrupted_artifact_at_commit_time_does_not_crash() -> None:
    wire = _turn1()
    store = MemoryStore()
    original = wire["messages"][3]["content"]
    ref = store.put("local", original)
    store.corrupt("local", ref, "tampered bytes")
    engine = make_engine("balanced", FORCE, store=store)
    res = engine.condense(wire, session="s")
    assert res.report["fallback_reason"] is None
    # Either the artifact was rewritten intact or the segment was rolled back.
    if res.request["messages"][3]["content"] != original:
        assert engine.recall(ref) == original
    else:
        assert res.report["rollbacks"] >= 1
    check_invariants(engine, wire, res.request)


def test_missing_artifact_is_a_segment_local_failure(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    engine = make_engine("balanced", FORCE, store=SqliteStore(path))
    first = engine.condense(_turn1(), session="s")
    gone = _ref_of(first, 3)
    kept = _ref_of(first, 5)
    engine.close()
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM artifacts WHERE ref = ?", (gone,)).rowcount == 1
    db.close()
    replica = make_engine("balanced", FORCE, store=SqliteStore(path))
    wire = _turn2()
    res = replica.condense(wire, session="s")
    assert res.report["fallback_reason"] is None
    assert res.report["segment_failures"] >= 1
    assert res.request["messages"][5]["content"] == first.request["messages"][5]["content"]
    assert replica.recall(kept) == wire["messages"][5]["content"]
    # Whatever message 3 became, it must be the original or resolve to it again.
    check_invariants(replica, wire, res.request)
    replica.close()


class FailingStore:
    """A store whose every call fails (an unreachable backend)."""

    def __init__(self) -> None:
        self.calls = 0

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise StoreError("redis store failed to get: redis://user:secret@db:6379 refused")

    put = get = has = missing = get_state = put_state = stats = gc = _fail

    def close(self) -> None:
        return None


@pytest.mark.parametrize("preset", ["conservative", "balanced", "aggressive"])
def test_failing_store_passes_the_request_through_with_a_reason(preset: str) -> None:
    wire = _turn2()
    before = dumps(wire)
    store = FailingStore()
    engine = make_engine(preset, FORCE, store=store)  # type: ignore[arg-type]
    res = engine.condense(wire, session="s")
    assert dumps(res.request) == before
    # what failed, never the driver's text (which may hold a URL with a password)
    assert res.report["fallback_reason"] == "StoreError: redis store failed to get"
    assert res.report["fallbacks"] == 1
    assert not res.changed
    assert store.calls >= 1


def _turns(n: int) -> list[dict[str, Any]]:
    """``n`` growing requests of one session: each adds a call and a bulky result."""
    wires = []
    wire = _turn1()
    for i in range(n):
        wire = {**wire, "messages": [*wire["messages"]]}
        wire["messages"] += [call(f"t{i}", f"cat f{i}.txt"), result(f"t{i}", lines_of(f"t{i}", 60))]
        wires.append(wire)
    return wires


def test_artifact_lost_turns_after_its_step_is_a_segment_failure(tmp_path: Path) -> None:
    """A placeholder re-sent for many turns still names an original that resolves: the
    store is asked on every request, not only on the one after the step."""
    path = tmp_path / "store.sqlite3"
    engine = make_engine("balanced", FORCE, store=SqliteStore(path))
    wires = _turns(5)
    results = [engine.condense(w, session="s") for w in wires[:4]]
    gone = _ref_of(results[0], 3)
    assert gone in results[3].request["messages"][3]["content"]  # still re-sent
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM artifacts WHERE ref = ?", (gone,)).rowcount == 1
    db.close()
    res = engine.condense(wires[4], session="s")
    assert res.report["fallback_reason"] is None
    assert res.report["segment_failures"] >= 1
    assert res.request["messages"][3]["content"] == wires[4]["messages"][3]["content"]
    check_invariants(engine, wires[4], res.request)
    engine.close()


def test_a_state_written_without_refs_still_has_its_references_checked(tmp_path: Path) -> None:
    """States of the previous version saved frozen decisions with no references (the bug
    this guards against); their texts still name them, and a lost one is caught."""
    path = tmp_path / "store.sqlite3"
    store = SqliteStore(path)
    engine = make_engine("balanced", FORCE, store=store)
    wires = _turns(4)
    results = [engine.condense(w, session="s") for w in wires[:3]]
    data = orjson.loads(store.get_state("local", "s") or b"{}")
    for decision in data["decisions"].values():
        decision[3] = []  # refs, as the previous version re-saved them
    data.pop("adopted", None)
    store.put_state("local", "s", orjson.dumps(data))
    gone = _ref_of(results[0], 3)
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM artifacts WHERE ref = ?", (gone,)).rowcount == 1
    db.close()
    res = engine.condense(wires[3], session="s")
    assert res.report["segment_failures"] >= 1
    assert res.request["messages"][3]["content"] == wires[3]["messages"][3]["content"]
    check_invariants(engine, wires[3], res.request)
    engine.close()


@pytest.mark.parametrize(
    "damaged",
    [
        {"exact_hashes": None},
        {"turns": "3"},
        {"exact_tokens": ["a"]},
        {"cum_exact": []},
        {"decisions": {"/messages/3/content": [1, 2, 3, [], 0]}},
        {"decisions": {"/messages/3/content": ["x", "mask", "cw:000000000000", "cw:ab", 1]}},
        {"decisions": {"/messages/3/content": ["", "mask", "cw:000000000000", [], 1]}},
    ],
    ids=[
        "null-hashes",
        "text-turns",
        "text-tokens",
        "list-ledger",
        "int-text",
        "str-refs",
        "empty-text",
    ],
)
def test_a_damaged_state_is_a_fresh_session_not_a_session_off(damaged: dict[str, Any]) -> None:
    """A state row of valid JSON with a value of the wrong type (another writer, a
    damaged row) is read as no state: the request is condensed, and so is the next one
    (it made every later request of the session fall back with a TypeError)."""
    store = MemoryStore()
    engine = make_engine("balanced", FORCE, store=store)
    wires = _turns(5)
    for wire in wires[:3]:
        engine.condense(wire, session="s")
    data = orjson.loads(store.get_state("local", "s") or b"{}")
    store.put_state("local", "s", orjson.dumps({**data, **damaged}))
    for wire in wires[3:]:
        res = engine.condense(wire, session="s")
        assert res.report["fallback_reason"] is None
        assert res.changed
        check_invariants(engine, wire, res.request)
    engine.close()


def test_an_old_corrupted_original_is_caught_within_a_few_turns_and_healed(
    tmp_path: Path,
) -> None:
    """Damage to an original adopted turns ago (not only the last step's) is found: one
    older decision is read back per request in turn. Its segment is sent whole that
    request (a segment failure), its original is written again from it, so recall works
    again (it kept failing on every turn while the placeholder kept naming it)."""
    path = tmp_path / "store.sqlite3"
    engine = make_engine("balanced", FORCE, store=SqliteStore(path))
    wires = _turns(12)
    first = engine.condense(wires[0], session="s")
    for wire in wires[1:4]:
        engine.condense(wire, session="s")
    damaged = _ref_of(first, 3)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE artifacts SET body = substr(body, 1, 10) WHERE ref = ?", (damaged,))
    db.close()
    with pytest.raises(StoreError):
        engine.recall(damaged)
    failures = 0
    for wire in wires[4:]:
        res = engine.condense(wire, session="s")
        assert res.report["fallback_reason"] is None
        check_invariants(engine, wire, res.request)
        failures += res.report["segment_failures"]
        if failures:
            assert res.request["messages"][3]["content"] == wire["messages"][3]["content"]
            break
    assert failures == 1
    assert engine.recall(damaged) == wires[0]["messages"][3]["content"]
    engine.close()


class _FlakyReads(MemoryStore):
    """Reads time out while ``flaky`` (lookups of what exists still answer)."""

    flaky = False

    def get(self, tenant: str, ref: str) -> str:
        if self.flaky:
            raise StoreError("redis store failed to read an artifact: timeout")
        return super().get(tenant, ref)


def test_a_store_that_fails_to_answer_leaves_old_decisions_frozen() -> None:
    """The older decision drawn for a read-back is failed only on damage, not on a
    store that does not answer (that sent an old segment whole: two cache breaks deep
    in the history); the last step's own decisions still are."""
    store = _FlakyReads()
    engine = make_engine("balanced", FORCE, store=store)
    wires = _turns(10)
    previous = None
    for n, wire in enumerate(wires):
        store.flaky = n == 9
        sent = engine.condense(wire, session="s").request["messages"]
        if previous is not None and n == 9:
            changed = [i for i in range(len(previous)) if previous[i] != sent[i]]
            assert changed and min(changed) >= len(previous) - 4  # the last step's, no older
        previous = sent
    engine.close()


def test_an_original_larger_than_the_stores_cap_is_never_referenced() -> None:
    """gc drops an artifact larger than the byte cap first: its segment stays whole
    (counted), while the smaller ones are condensed as usual."""
    big = lines_of("big", 400)
    small = lines_of("small", 60)
    cap = len(big.encode()) - 1
    assert len(small.encode()) < cap
    store = MemoryStore(max_bytes=cap)
    engine = make_engine("balanced", FORCE, store=store)
    wire = request(
        call("c1", "cat big"), result("c1", big), call("c2", "ls"), result("c2", small),
        call("c3", "git status"), result("c3", "clean"),
    )  # fmt: skip
    res = engine.condense(wire, api="openai.chat")
    sent = {m.get("tool_call_id"): m["content"] for m in res.request["messages"]}
    assert sent["c1"] == big  # whole
    assert sent["c2"] != small  # condensed
    assert res.report["segment_failures"] >= 1
    store.gc()
    for ref in refs_in(dumps(res.request).decode()):
        assert engine.recall(ref)
