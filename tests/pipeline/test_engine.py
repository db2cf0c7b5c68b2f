"""The whole engine over real sessions: determinism across replicas and restarts, cache
stability between compaction steps, recall, modes and what the report may contain."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.io import bundled_sessions, load_session, session_requests
from ctxwarden.signals import distinctive_set
from ctxwarden.store import MemoryStore, SqliteStore
from tests.passes.convo import FORCE, call, dumps, lines_of, make_engine, request, result
from tests.passes.strategies import check_invariants

SESSIONS = bundled_sessions()
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "balanced": ("balanced", {}),
    "forced": ("balanced", FORCE),
}


def _requests(path: Path) -> list[dict[str, Any]]:
    return [r for r, _ in session_requests(load_session(path))]


def _run(engine: Engine, requests: list[dict[str, Any]]) -> list[bytes]:
    return [dumps(engine.condense(r, session="s1").request) for r in requests]


def _sqlite_engine(path: Path, preset: str, pipeline: dict[str, Any]) -> Engine:
    return make_engine(preset, pipeline, store=SqliteStore(path))


def test_bundled_sessions_are_present() -> None:
    assert len(SESSIONS) >= 2


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("session", SESSIONS[:2], ids=lambda p: p.name[:40])
def test_two_replicas_sharing_a_store_give_identical_bytes(
    tmp_path: Path, session: Path, config: str
) -> None:
    preset, pipeline = CONFIGS[config]
    requests = _requests(session)
    reference = _sqlite_engine(tmp_path / "ref.sqlite3", preset, pipeline)
    expected = _run(reference, requests)
    reference.close()
    shared = tmp_path / "shared.sqlite3"
    a = _sqlite_engine(shared, preset, pipeline)
    b = _sqlite_engine(shared, preset, pipeline)
    # Replicas behind a load balancer: turns alternate between the two engines.
    got = [
        dumps((a if k % 2 == 0 else b).condense(r, session="s1").request)
        for k, r in enumerate(requests)
    ]
    a.close()
    b.close()
    assert got == expected
    if config == "forced":
        assert sum(g != dumps(r) for g, r in zip(got, requests, strict=True)) > len(got) // 2


@pytest.mark.parametrize("config", list(CONFIGS))
def test_restart_on_the_same_store_continues_identically(tmp_path: Path, config: str) -> None:
    preset, pipeline = CONFIGS[config]
    requests = _requests(SESSIONS[1])
    reference = _sqlite_engine(tmp_path / "ref.sqlite3", preset, pipeline)
    expected = _run(reference, requests)
    reference.close()
    path = tmp_path / "store.sqlite3"
    half = len(requests) // 2
    first = _sqlite_engine(path, preset, pipeline)
    got = _run(first, requests[:half])
    first.close()
    second = _sqlite_engine(path, preset, pipeline)
    got += _run(second, requests[half:])
    second.close()
    assert got == expected


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.name[:40])
def test_cache_prefix_is_stable_between_compaction_steps(session: Path, config: str) -> None:
    preset, pipeline = CONFIGS[config]
    engine = make_engine(preset, pipeline)
    previous: list[Any] | None = None
    steps = quiet = 0
    for req in _requests(session):
        res = engine.condense(req, session="s1")
        assert res.report["fallback_reason"] is None
        check_invariants(engine, req, res.request)
        sent = res.request["messages"]
        if previous is not None:
            if res.report["compaction_step"]:
                steps += 1
            else:
                quiet += 1
                assert dumps(sent[: len(previous)]) == dumps(previous)
        previous = sent
    assert quiet > 0
    if config == "forced":
        assert steps > 0


def test_every_reported_reference_recalls_its_original() -> None:
    engine = make_engine("balanced", FORCE)
    originals: set[str] = set()
    for req in _requests(SESSIONS[0]):
        res = engine.condense(req, session="s1")
        originals.update(m["content"] for m in req["messages"] if isinstance(m.get("content"), str))
        originals.update(
            c["function"]["arguments"] for m in req["messages"] for c in m.get("tool_calls") or ()
        )
        for ref in res.report["references"]:
            text = engine.recall(ref)
            assert text in originals
            n = text.count("\n") + 1
            assert engine.recall(ref, f"1-{n}") == text
            assert engine.recall(ref, f"{n}-{n + 5}") == text.split("\n")[-1]
    assert res.report["references"]


# -- modes ----------------------------------------------------------------------------


def _condensable() -> dict[str, Any]:
    errs = ("Traceback (most recent call last):", "KeyError: 'zebra_quux_8123'")
    return request(
        call("c1", "pytest -q tests/test_zebra_quux.py"),
        result("c1", lines_of("zebraquux", 80, extra=errs)),
        call("c2", "cat notes_zebra_quux.txt"),
        result("c2", lines_of("zebraquux", 80)),
        tail="now fix zebra_quux_8123",
    )


def test_exact_mode_returns_the_input_unchanged() -> None:
    wire = _condensable()
    before = dumps(wire)
    store = MemoryStore()
    engine = make_engine("aggressive", FORCE, store=store)
    res = engine.condense(wire, mode="exact")
    assert dumps(res.request) == before == dumps(wire)
    assert not res.changed and res.report["transforms"] == {}
    assert store.stats()["artifacts"] == 0 and store.stats()["sessions"] == 0
    configured = make_engine("aggressive", FORCE, mode="exact").condense(wire)
    assert dumps(configured.request) == before and not configured.changed
    # The same engine does condense when asked for active mode (the test is not vacuous).
    assert engine.condense(wire, mode="active").changed


def test_shadow_mode_returns_the_original_but_reports_decisions() -> None:
    wire = _condensable()
    before = dumps(wire)
    shadow = make_engine("balanced", FORCE).condense(wire, mode="shadow")
    active = make_engine("balanced", FORCE).condense(wire)
    assert dumps(shadow.request) == before
    assert shadow.report["shadow"] is True
    assert shadow.report["rewritten"] and not shadow.changed and active.changed
    assert shadow.report["transforms"] == active.report["transforms"] != {}
    assert shadow.report["tokens_after"] == active.report["tokens_after"]
    assert shadow.report["tokens_after"] < shadow.report["tokens_before"]
    assert dumps(active.request) != before


def test_condense_never_mutates_its_input() -> None:
    wire = _condensable()
    before = dumps(wire)
    res = make_engine("aggressive", FORCE).condense(wire)
    assert res.changed
    assert dumps(wire) == before


def test_report_never_contains_message_contents() -> None:
    wire = _condensable()
    wire["messages"][0]["content"] = "System secret marker_sys_77aa."
    engine = make_engine("aggressive", FORCE)
    res = engine.condense(wire)
    assert res.changed
    blob = orjson.dumps(res.report).decode()
    for needle in (
        "zebra_quux",
        "zebraquux",
        "marker_sys_77aa",
        "Traceback",
        "KeyError",
        "pytest -q",
        "Fix the failing build",
        "Looking at the results",
    ):
        assert needle not in blob, needle
    # The engine config is the only switch that may put contents in the report.
    assert EngineConfig().include_contents_in_report is False


def test_output_is_independent_of_what_the_engine_condensed_before() -> None:
    """Memos are keyed by everything a result depends on: the same output seen earlier
    under another model's tokenizer (an estimate, scaled) does not leak its count."""
    wire = request(
        call("c1", "cat big.py"),
        result("c1", lines_of("big", 120)),
        call("c2", "ls"),
        result("c2", "big.py"),
    )
    used = make_engine(pipeline=FORCE)
    used.condense({**wire, "model": "claude-sonnet-4-5"}, session="other")
    fresh = make_engine(pipeline=FORCE)
    a = used.condense(wire, session="s").request
    b = fresh.condense(wire, session="s").request
    assert a["messages"][3]["content"] != wire["messages"][3]["content"]  # it was masked
    assert dumps(a) == dumps(b)


def test_one_engine_serves_sessions_from_several_threads_as_it_would_alone() -> None:
    """Per-request memos live with the request, per-session caches are keyed by session:
    sessions condensed concurrently on one engine give the bytes they give alone."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    workloads = [_requests(p) for p in SESSIONS[:4]]

    def run(engine: Engine, k: int) -> list[bytes]:
        return [dumps(engine.condense(r, session=f"s{k}").request) for r in workloads[k]]

    alone = [run(make_engine(pipeline=FORCE), k) for k in range(len(workloads))]
    shared = make_engine(pipeline=FORCE)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            together = list(pool.map(lambda k: run(shared, k), range(len(workloads))))
    finally:
        sys.setswitchinterval(interval)
    assert together == alone


def test_a_session_switching_models_gives_the_bytes_of_a_restarted_engine() -> None:
    """Cached segment walks are only reused under the same tokenizer and API."""
    from ctxwarden.store import MemoryStore

    head = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    turn1 = {
        "model": "claude-sonnet-4",
        "messages": [*head, call("c1", "cat big.py"), result("c1", lines_of("alpha", 120))],
    }
    turn2 = {
        "model": "gpt-4o",
        "messages": [
            *turn1["messages"],
            call("c2", "ls"),
            result("c2", lines_of("beta", 60)),
            {"role": "assistant", "content": "done"},
        ],
    }

    def run(restart: bool) -> bytes:
        store = MemoryStore()
        engine = make_engine("balanced", FORCE, store=store)
        engine.condense(turn1, session="s1")
        if restart:
            engine = make_engine("balanced", FORCE, store=store)
        return dumps(engine.condense(turn2, session="s1").request)

    assert run(restart=False) == run(restart=True)


def _bulky_request() -> dict[str, Any]:
    return request(
        call("c1", "cat big.txt"),
        result("c1", lines_of("big", 120)),
        call("c2", "cat other.txt"),
        result("c2", lines_of("other", 120)),
        call("c3", "git status"),
        result("c3", "clean"),
    )


@pytest.mark.parametrize(
    ("condition", "runs"),
    [
        ({"min_request_tokens": 0}, True),
        ({"min_request_tokens": 10**7}, False),
        ({"min_band": "low"}, True),
        ({"min_band": "hard"}, False),
    ],
)
def test_a_pass_runs_only_when_its_conditions_hold(condition: dict[str, Any], runs: bool) -> None:
    """Conditional execution: a pass whose request-size or pressure condition does not
    hold proposes nothing (here the mask pass, the only one that applies)."""
    pipeline = {**FORCE, "mask": {"min_tokens": 0, **condition}}
    res = make_engine("balanced", pipeline).condense(_bulky_request(), session="s")
    assert ("mask" in res.report["transforms"]) is runs
    assert res.changed is runs


def test_report_counts_bytes_before_and_after() -> None:
    """The report's byte counts are the compact JSON sizes of the request received and
    of the request returned (the same when nothing was rewritten)."""
    wire = _bulky_request()
    res = make_engine("balanced", FORCE).condense(wire, session="s")
    assert res.changed
    assert res.report["bytes_before"] == len(orjson.dumps(wire))
    assert res.report["bytes_after"] == len(orjson.dumps(res.request))
    assert res.report["bytes_after"] < res.report["bytes_before"]
    exact = make_engine("balanced", FORCE, mode="exact").condense(wire, session="s")
    assert exact.report["bytes_after"] == exact.report["bytes_before"]


_UNREADABLE = {
    "integer beyond 64 bits": (
        "anthropic.messages",
        {
            "model": "claude-sonnet-4-20250514",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "compute 30!"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "check", "input": {"n": 2**100}}
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            ],
        },
    ),
    "lone surrogate": (
        "openai.chat",
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "emoji cut: \ud83d"}]},
    ),
    "python value": (
        "openai.chat",
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "x", "meta": {1, 2}}]},
    ),
}


@pytest.mark.parametrize("case", sorted(_UNREADABLE))
def test_a_request_the_engine_cannot_read_is_returned_unchanged(case: str) -> None:
    """Values a JSON library of the client accepts but the engine's cannot encode are no
    reason to fail the request: it is returned as received, with the reason."""
    api, wire = _UNREADABLE[case]
    res = make_engine("balanced", FORCE).condense(wire, api=api, session="s")
    assert res.request == wire
    assert res.report["fallback_reason"].startswith("unreadable: ")
    assert res.report["fallbacks"] == 1
    assert not res.report["rewritten"]


def test_a_note_pointing_to_an_output_that_changed_is_not_reapplied() -> None:
    """A duplicate becomes "identical to message #3"; when message 3 no longer reads the
    same (the agent elided it, or another run shares the derived session key), the note
    is false and the error line it relied on would be gone: it is not re-applied."""
    error = "ValueError: bad value for parse_header in src/app.py"
    text = "\n".join([f"row {i}: checked item_{i} in module_x.py ok" for i in range(80)] + [error])
    first = request(
        call("c1", "python run.py"),
        result("c1", text),
        call("c2", "ls"),
        result("c2", "a.py b.py"),
        call("c3", "python run.py --again"),
        result("c3", text),
        call("c4", "echo done"),  # the copy is not the newest output (never deduped)
        result("c4", "done"),
    )
    engine = make_engine("balanced", FORCE)
    res1 = engine.condense(first, session="s")
    assert res1.report["transforms"].get("dedupe", {}).get("count") == 1
    second = orjson.loads(orjson.dumps(first))
    second["messages"][3]["content"] = "[output elided by the agent]"
    second["messages"] += [call("c5", "ls tests"), result("c5", "t.py")]
    second["messages"] += [
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    res2 = engine.condense(second, session="s")
    assert "dedupe" not in res2.report["transforms"]
    assert error in orjson.dumps(res2.request).decode()
    check_invariants(engine, second, res2.request)


def test_a_name_only_the_agents_condensable_prose_shows_stays_in_the_mentions() -> None:
    """A placeholder leaves out of its mentions only what never-condensed text shows:
    the agent's prose that names the same function is summarized in the same step, so
    the name must stay in the placeholder (DESIGN: no string of a masked output leaves
    the request)."""
    prose = (
        "I will look at the hashing code first. "
        + " ".join(f"Then I check step {i} of the plan carefully." for i in range(12))
        + " The bug is probably in compute_checksum_v2 which the loader calls."
    )
    out = "\n".join(
        f"utils/hashing_helpers.py:{10 + i}: value_{i} = compute_checksum_v2(block_{i})"
        for i in range(40)
    )
    wire = request(
        call("c1", "grep -rn checksum utils", text=prose),
        result("c1", out),
        call("c2", "ls"),
        result("c2", "a.py"),
    )
    res = make_engine("balanced", FORCE).condense(wire, session="s")
    sent = res.request["messages"]
    assert sent[2]["content"] != prose and sent[3]["content"] != out  # both condensed
    assert "compute_checksum_v2" in sent[3]["content"]


def test_report_holds_the_rewritten_texts_only_when_asked() -> None:
    wire = _bulky_request()
    quiet = make_engine("balanced", FORCE).condense(wire, session="s")
    assert quiet.changed and "contents" not in quiet.report
    res = make_engine("balanced", FORCE, include_contents_in_report=True).condense(
        wire, session="s"
    )
    contents = res.report["contents"]
    assert contents
    for entry in contents:
        node: Any = res.request
        for key in entry["path"].strip("/").split("/"):
            node = node[int(key) if key.isdigit() else key]
        assert node == entry["text"]


def test_a_text_repeating_a_tool_output_is_not_a_pointer_to_it() -> None:
    """Dedupe works within a kind: a user pasting a tool output back keeps the text (a
    pointer to an output whose placeholder leaves out what that text shows would take
    every one of those names out of the request)."""
    out = "\n".join(
        f"utils/hashing_helpers.py:{10 + i}: value_{i} = compute_checksum_v{i}(block_{i})"
        for i in range(40)
    )
    wire = request(
        call("c1", "grep -rn checksum utils"),
        result("c1", out),
        {"role": "user", "content": out},
        call("c2", "ls"),
        result("c2", "a.py"),
    )
    res = make_engine("balanced", FORCE).condense(wire, session="s")
    assert res.request["messages"][3]["content"] != out  # the output is masked
    assert res.request["messages"][4] == wire["messages"][4]
    sent = orjson.dumps(res.request).decode()
    assert all(name in sent for name in distinctive_set(out))


def test_a_whole_request_fallback_is_what_the_next_request_extends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the session state records what was sent: after a fallback (the original went
    # out), the next request's cache and step accounting start from the original
    import ctxwarden.engine as engine_module
    from ctxwarden.errors import ValidationFailed

    real = engine_module.validate_rewrite
    failing: set[int] = set()
    turn = 0

    def validate(*args: Any) -> int:
        if turn in failing:
            raise ValidationFailed("injected for the test")
        return real(*args)

    monkeypatch.setattr(engine_module, "validate_rewrite", validate)
    engine = make_engine("balanced", FORCE)
    requests = _requests(SESSIONS[0])
    previous: list[Any] | None = None
    fell_back = 0
    for turn, req in enumerate(requests):
        if turn % 5 == 3:
            failing.add(turn)
        res = engine.condense(req, session="s1")
        fell_back += res.report["fallbacks"]
        sent = res.request["messages"]
        if previous is not None and not res.report["fallbacks"]:
            extends = dumps(sent[: len(previous)]) == dumps(previous)
            assert extends is not res.report["compaction_step"], turn
        previous = sent
    assert fell_back > 0


def test_a_replica_reads_the_state_another_wrote_not_the_one_it_kept() -> None:
    # each engine keeps the state it wrote last decoded; after another replica wrote
    # the session's state, that one must be read (turns, ledger and decisions go on)
    requests = _requests(SESSIONS[0])
    reference = make_engine("balanced", FORCE)
    store = MemoryStore()
    a = make_engine("balanced", FORCE, store=store)
    b = make_engine("balanced", FORCE, store=store)

    def seen(engine: Engine, request: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        result = engine.condense(request, session="s1")
        report = {k: v for k, v in result.report.items() if k != "duration_ms"}
        return dumps(result.request), report

    expected = [seen(reference, r) for r in requests]
    got = [seen(b if k % 3 == 2 else a, r) for k, r in enumerate(requests)]
    assert got == expected
    assert [report["session_turns"] for _, report in got] == list(range(1, len(requests) + 1))


@pytest.mark.parametrize("session", SESSIONS[:2], ids=lambda p: p.name[:40])
def test_step_start_names_the_first_message_a_step_rewrote(session: Path) -> None:
    engine = make_engine("balanced", FORCE)
    previous: list[Any] | None = None
    steps = 0
    for turn in _requests(session):
        result = engine.condense(turn, session="s1")
        sent, start = result.request["messages"], result.report["step_start"]
        if result.report["compaction_step"]:
            assert previous is not None and start is not None
            assert sent[:start] == previous[:start] and sent[start] != previous[start]
            steps += 1
        else:
            assert start is None
            assert previous is None or sent[: len(previous)] == previous
        previous = sent
    assert steps > 0


def test_a_memo_budget_bounds_what_memos_keep_and_changes_no_byte() -> None:
    """Memos only save work: with every memo emptied and capped at nothing, or at a
    small budget, the engine gives the bytes and reports it gives with its default
    bounds, and the memos together stay within the budget."""
    from ctxwarden.memo import DEFAULT_MEMO_BUDGET, memo_weight, set_memo_budget

    workloads = [_requests(p) for p in SESSIONS[:4]]

    def run() -> list[bytes]:
        engine = make_engine(pipeline=FORCE)
        return [
            dumps([engine.condense(r, session=f"s{k}").request for r in workload])
            for k, workload in enumerate(workloads)
        ]

    default = run()
    try:
        set_memo_budget(0)
        assert memo_weight() == 0
        assert run() == default
        assert memo_weight() == 0
        budget = 2 * 1024 * 1024
        set_memo_budget(budget)
        assert run() == default
        assert 0 < memo_weight() <= budget
    finally:
        set_memo_budget(DEFAULT_MEMO_BUDGET)


def _sessions_in_turn(count: int) -> dict[str, list[dict[str, Any]]]:
    return {f"s{k}": _requests(path) for k, path in enumerate(SESSIONS[:count])}


def test_several_threads_on_one_engine_give_the_bytes_of_one_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Library callers may share an engine between threads: it condenses one request
    at a time, and each session's requests, condensed concurrently with the others',
    give the bytes they give alone."""
    sessions = _sessions_in_turn(3)
    alone = make_engine("balanced", FORCE)
    expected = {s: [dumps(alone.condense(r, session=s).request) for r in rs]
                for s, rs in sessions.items()}  # fmt: skip
    shared = make_engine("balanced", FORCE)
    inside, most = 0, 0
    count = threading.Lock()
    condense = shared._condense

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.001)  # a window for another thread to come in, were it let
        try:
            return condense(*args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(shared, "_condense", counted)
    got: dict[str, list[bytes]] = {}
    start = threading.Barrier(len(sessions))

    def run(name: str) -> None:
        start.wait()
        got[name] = [dumps(shared.condense(r, session=name).request) for r in sessions[name]]

    threads = [threading.Thread(target=run, args=(name,)) for name in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert most == 1  # never two condenses at once
    assert got == expected
    assert any(g != dumps(r) for s in got for g, r in zip(got[s], sessions[s], strict=True))


def test_threads_opening_a_fresh_engine_share_one_store(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxwarden.engine as engine_module

    opened = engine_module.open_store

    def slow_open(*args: Any) -> Any:  # a server store takes a while to connect
        time.sleep(0.05)
        return opened(*args)

    monkeypatch.setattr(engine_module, "open_store", slow_open)
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    start = threading.Barrier(4)
    seen: list[object] = []

    def first_use() -> None:
        start.wait()
        seen.append(engine.store)
        seen.append(engine.condenser.store)

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(seen) == 8 and all(store is seen[0] for store in seen)


async def test_acondense_runs_off_the_loop_in_order_with_the_bytes_of_condense() -> None:
    sessions = _sessions_in_turn(2)
    alone = make_engine("balanced", FORCE)
    expected = {s: [dumps(alone.condense(r, session=s).request) for r in rs]
                for s, rs in sessions.items()}  # fmt: skip
    engine = make_engine("balanced", FORCE)
    loop_thread = threading.get_ident()
    threads: set[int] = set()
    condense = engine._locked  # what acondense runs on its thread

    def noted(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return condense(*args, **kwargs)

    engine._locked = noted  # type: ignore[method-assign]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def run(name: str) -> list[bytes]:
        return [dumps((await engine.acondense(r, session=name)).request) for r in sessions[name]]

    tick = asyncio.ensure_future(ticker())
    try:
        results = await asyncio.gather(*(run(name) for name in sessions))
    finally:
        tick.cancel()
        engine.close()
    assert dict(zip(sessions, results, strict=True)) == expected
    assert len(threads) == 1 and loop_thread not in threads  # the engine's own thread
    assert ticks > len(results[0])  # the loop ran on while condensing


def test_a_fresh_engine_pickles_and_the_copy_condenses() -> None:
    """A process pool's initializer may take an engine: its locks are made anew."""
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    for copy in (pickle.loads(pickle.dumps(engine)), deepcopy(engine)):
        result = copy.condense({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
        assert result.report["fallback_reason"] is None


async def test_close_lets_the_calls_made_before_it_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing an engine shared between threads waits for the condense under way (it
    keeps its store to its end) and runs the acondense calls already made."""
    engine = make_engine("balanced", FORCE)
    requests = _requests(SESSIONS[0])[:4]
    condense = engine._condense

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)  # the close comes while a condense is under way
        return condense(*args, **kwargs)

    monkeypatch.setattr(engine, "_condense", slow)
    calls = [asyncio.ensure_future(engine.acondense(r, session="s")) for r in requests]
    await asyncio.sleep(0.01)
    await asyncio.to_thread(engine.close)
    results = await asyncio.gather(*calls)
    assert [r.report["fallback_reason"] for r in results] == [None] * len(requests)


def test_a_native_panic_while_condensing_sends_the_original(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pyo3's PanicException (a Rust library's panic) derives from BaseException: it is
    # a failure of this request, which goes out as sent, not an exit of the program
    import ctxwarden.engine as engine_module

    class Panic(BaseException):
        pass

    def panic(*_args: Any, **_kwargs: Any) -> None:
        raise Panic("native code panicked")

    engine = make_engine("balanced", FORCE)
    request = _requests(SESSIONS[0])[-1]
    monkeypatch.setattr(engine.condenser, "run", panic)
    result = engine.condense(request, session="s")
    assert result.request == request and result.report["fallback_reason"] == "Panic"
    monkeypatch.setattr(engine_module, "element_hashes", panic)
    result = engine.condense(request, session="s")
    assert result.request == request
    assert result.report["fallback_reason"].startswith("unreadable: ")

    def interrupt(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(engine_module, "element_hashes", interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.condense(request, session="s")
