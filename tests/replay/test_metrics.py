"""Each metric pinned on a hand-made session whose right answer is known."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.replay import ReplayOptions, run_replay
from ctxwarden.replay.subjects import MASK_PLACEHOLDER
from tests.replay.conftest import Scripted, tool_session, write_session


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return list(request["messages"])


def test_exact_sees_everything(session_file: Path) -> None:
    a = run_replay([session_file], (), baselines=["exact"]).subject("exact").aggregate()
    assert a["requests"] == 3
    assert a["reduction"]["total"] == 0
    # request 3's next action: widget_core path (output 1 only) and parse_value (output 2
    # only); numbers 1,5 are not distinctive (one digit)
    assert a["support"]["total"] == 1.0
    assert a["critical"]["total"] == 1.0
    assert a["recoverable"]["total"] is None
    assert a["violations"]["total"] == 0


def test_masking_the_output_with_the_path_lowers_support_by_its_share(session_file: Path) -> None:
    result = run_replay([session_file], (), baselines=["exact", "mask:1"])
    m = result.subject("mask:1").sessions[0]
    # only the last request has next-action strings confined to tool outputs:
    # {src/pkg/widget_core.py, parse_value}; mask:1 hides output 1 -> 1 of 2 visible
    assert (m.support_visible, m.support_total) == (1, 2)
    assert m.support() == 0.5
    # the error line lives in output 1: visible in request 2 (nothing masked yet: one
    # output), masked in request 3 -> 1 of 2 counted lines visible
    assert (m.critical_visible, m.critical_total) == (1, 2)
    # masked content has no reference: nothing recoverable
    assert m.recoverable() == 0.0
    assert m.transforms["observation_mask"]["count"] == 1


def test_mask_shortens_requests_and_breaks_the_prefix(session_file: Path) -> None:
    result = run_replay([session_file], (), baselines=["exact", "mask:1"])
    exact = result.subject("exact").sessions[0]
    mask = result.subject("mask:1").sessions[0]
    assert mask.tokens[:2] == exact.tokens[:2]
    assert mask.tokens[2] < exact.tokens[2]
    assert mask.prefix_breaks == 1
    assert exact.prefix_breaks == 0


def test_a_dropped_tool_result_is_counted(session_file: Path) -> None:
    def drop_first_result(request: dict[str, Any]) -> dict[str, Any]:
        msgs = [m for m in _messages(request) if m.get("tool_call_id") != "c1"]
        return {**request, "messages": msgs}

    subject = Scripted("drop", drop_first_result)
    m = run_replay([session_file], [subject], baselines=[]).subject("drop").sessions[0]
    # requests 2 and 3 contain c1's result; dropping it leaves c1 unanswered in both
    assert m.violations["pairing"] == 2
    assert m.violations["order"] >= 2
    # in request 2 the dropped result is after the last assistant message: protected
    assert m.violations["protected"] >= 1


def test_changed_ids_system_and_fields_are_counted(session_file: Path) -> None:
    def tamper(request: dict[str, Any]) -> dict[str, Any]:
        msgs = _messages(request)
        msgs[0] = {"role": "system", "content": "changed"}
        if len(msgs) > 3:
            msgs[3] = {**msgs[3], "tool_call_id": "zzz"}
        return {**request, "messages": msgs, "model": "other"}

    m = run_replay([session_file], [Scripted("t", tamper)], baselines=[]).subject("t").sessions[0]
    assert m.violations["protected"] >= 3  # the system message, once per request
    assert m.violations["fields"] == 3  # model changed in every request
    assert m.violations["ids"] == 2  # requests 2 and 3 hold the result c1
    assert m.violations["pairing"] >= 2


def test_recoverable_counts_only_references_that_recall_the_original(tmp_path: Path) -> None:
    path = write_session(tmp_path, tool_session())
    original = tool_session()[3]["content"]
    store = {"cw:0123456789ab": original}

    def refer(ref: str) -> Any:
        def fn(request: dict[str, Any]) -> dict[str, Any]:
            msgs = _messages(request)
            if len(msgs) > 4:
                msgs[3] = {**msgs[3], "content": f"[condensed; recall {ref}]"}
            return {**request, "messages": msgs}

        return fn

    good = Scripted("good", refer("cw:0123456789ab"), store)
    bad = Scripted("bad", refer("cw:ffffffffffff"), store)
    result = run_replay([path], [good, bad], baselines=[])
    assert result.subject("good").sessions[0].recoverable() == 1.0
    assert result.subject("bad").sessions[0].recoverable() == 0.0
    # the condensed output held the error line: lost in request 3 (index 3 rewritten)
    assert result.subject("good").sessions[0].critical() == 0.5


def test_cache_prices_follow_the_registry(tmp_path: Path) -> None:
    big = "word " * 3000  # well above 1024 cacheable tokens
    messages = [
        {"role": "system", "content": big},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    path = write_session(tmp_path, messages)
    m = run_replay([path], (), baselines=["exact"]).subject("exact").sessions[0]
    t1, t2 = m.tokens
    cached = m.cached_tokens[1]
    assert m.cached_tokens[0] == 0 and 0 < cached < t2
    assert cached == t1  # the whole first request is the shared prefix
    assert m.cost_openai == [pytest.approx(t1), pytest.approx(t2 - cached + 0.1 * cached)]
    assert m.cost_anthropic == [
        pytest.approx(1.25 * t1),
        pytest.approx(1.25 * (t2 - cached) + 0.1 * cached),
    ]
    assert m.saving("openai") == 0.0


def test_idle_gap_expires_the_cache(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "word " * 3000},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    path = write_session(tmp_path, messages)
    options = ReplayOptions(idle_gap=300, turn_seconds=600)
    m = run_replay([path], (), baselines=["exact"], options=options).subject("exact").sessions[0]
    assert m.cached_tokens == [0, 0]
    assert sum(m.cost_openai) == pytest.approx(sum(m.tokens))


def test_aggregate_median_total_and_worst(tmp_path: Path) -> None:
    write_session(tmp_path, tool_session(), "a")
    write_session(tmp_path, tool_session()[:4], "b")
    result = run_replay([tmp_path], (), baselines=["mask:1"])
    a = result.subject("mask:1").aggregate()
    assert a["sessions"] == 2
    assert a["support"]["worst"] == 0.5
    assert a["support"]["worst_session"] == "a"
    assert a["requests"] == 3 + 1
    assert MASK_PLACEHOLDER  # the placeholder is a fixed, non-empty text


def test_a_request_the_api_rejects_is_counted(session_file: Path) -> None:
    def break_json(request: dict[str, Any]) -> dict[str, Any]:
        msgs = _messages(request)
        if len(msgs) > 4:
            msgs[3] = {**msgs[3], "content": 42}  # not valid chat content
        return {**request, "messages": msgs}

    m = run_replay([session_file], [Scripted("j", break_json)], baselines=[]).subject("j")
    # request 3 only; its content also stopped being text (a shape change)
    assert m.sessions[0].violations == {"json": 1, "shape": 1}


def _edit_first_call(request: dict[str, Any], edit: Any) -> dict[str, Any]:
    msgs = _messages(request)
    for i, m in enumerate(msgs[:-2]):
        if m.get("tool_calls"):
            msgs[i] = edit(copy.deepcopy(m))
            break
    return {**request, "messages": msgs}


def _with_arguments(message: dict[str, Any], change: Any) -> dict[str, Any]:
    """``message`` with its first call's JSON arguments replaced by ``change(args)``."""
    call = message["tool_calls"][0]
    args = json.dumps(change(json.loads(call["function"]["arguments"])))
    return {
        **message,
        "tool_calls": [{**call, "function": {**call["function"], "arguments": args}}],
    }


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: {**m, "name": "someone"},  # a key added to a message
        lambda m: {**m, "tool_calls": [{**m["tool_calls"][0], "type": "custom"}]},
        lambda m: {
            **m,
            "tool_calls": [
                {
                    **m["tool_calls"][0],
                    "function": {
                        **m["tool_calls"][0]["function"],
                        "arguments": '{"command": "cut off',
                    },
                }
            ],
        },
        lambda m: _with_arguments(m, lambda a: {f"x_{k}": v for k, v in a.items()}),
        lambda m: _with_arguments(m, lambda a: {**a, "sudo": True}),
        lambda m: _with_arguments(m, lambda a: json.dumps(a)),
    ],
    ids=[
        "extra-key",
        "call-type",
        "arguments-not-json",
        "arguments-key-renamed",
        "arguments-key-added",
        "arguments-now-a-string",
    ],
)
def test_anything_but_text_changed_in_an_item_is_a_shape_violation(
    session_file: Path, edit: Any
) -> None:
    def subject(request: dict[str, Any]) -> dict[str, Any]:
        return _edit_first_call(request, edit)

    m = run_replay([session_file], [Scripted("s", subject)], baselines=[]).subject("s")
    assert m.sessions[0].violations.get("shape", 0) >= 1


def test_critical_counts_tool_output_error_lines_visible_anywhere(tmp_path: Path) -> None:
    script = "cat > t.py <<'EOF'\ntry:\n    run()\nexcept ValueError:\n    print('x')\nEOF"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": script})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "KeyError: 'database_url'"},
        {"role": "assistant", "content": "The run failed:\nKeyError: 'database_url'"},
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": "done"},
    ]
    path = write_session(tmp_path, messages)

    def drop_output_and_script(request: dict[str, Any]) -> dict[str, Any]:
        msgs = _messages(request)
        if len(msgs) > 5:
            msgs[3] = {**msgs[3], "content": "[condensed]"}
            call = msgs[2]["tool_calls"][0]
            trimmed = {**call, "function": {**call["function"], "arguments": "{}"}}
            msgs[2] = {**msgs[2], "tool_calls": [trimmed]}
        return {**request, "messages": msgs}

    subject = Scripted("drop", drop_output_and_script)
    m = run_replay([path], [subject], baselines=[]).subject("drop").sessions[0]
    # only the tool output's line is counted (the script's `except ValueError:` is not an
    # error the agent saw); it stays visible through the assistant's quote of it
    assert m.critical_total == m.requests - 1  # every request holding the output
    assert m.critical_visible == m.critical_total
