"""The Anthropic cache breakpoint where the previous request ended (library and proxy)."""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import pytest

from ctxwarden.breakpoints import with_step_breakpoint
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory

EPHEMERAL = {"type": "ephemeral"}


def _turns(marker: dict[str, Any] | None = EPHEMERAL) -> dict[str, Any]:
    """Two exchanges of an agent; the client marks the end of its request."""
    last: dict[str, Any] = {"type": "tool_result", "tool_use_id": "t2", "content": "out 2"}
    if marker is not None:
        last["cache_control"] = marker
    return {
        "model": "claude-opus-5",
        "max_tokens": 100,
        "system": "You are a coding agent.",
        "messages": [
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "out 1"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t2", "name": "bash", "input": {"cmd": "cat a"}}]},
            {"role": "user", "content": [last]},
        ],
    }  # fmt: skip


def _without(request: dict[str, Any], index: int) -> dict[str, Any]:
    out = copy.deepcopy(request)
    del out["messages"][index]["content"][-1]["cache_control"]
    return out


@pytest.mark.parametrize("marker", [EPHEMERAL, {"type": "ephemeral", "ttl": "1h"}])
def test_the_previous_requests_end_gets_the_clients_own_marker(marker: dict[str, Any]) -> None:
    request = _turns(marker)
    before = copy.deepcopy(request)
    marked = with_step_breakpoint(request)
    assert marked is not None and request == before  # the input is not modified
    assert marked["messages"][2]["content"][-1]["cache_control"] == marker
    assert _without(marked, 2) == request  # nothing else changed


def test_no_marker_without_client_caching_room_or_a_cacheable_block() -> None:
    assert with_step_breakpoint(_turns(None)) is None  # the client does not cache
    full = _turns()
    full["system"] = [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                      for i in range(3)]  # fmt: skip
    assert with_step_breakpoint(full) is None  # four markers already
    thinking = _turns()
    thinking["messages"][2]["content"].append({"type": "thinking", "thinking": "x"})
    assert with_step_breakpoint(thinking) is None
    plain = _turns()
    plain["messages"][2]["content"] = "out 1"
    assert with_step_breakpoint(plain) is None
    first = _turns()
    first["messages"] = [first["messages"][0], first["messages"][1], first["messages"][2]]
    first["messages"][2]["content"][-1]["cache_control"] = EPHEMERAL
    assert with_step_breakpoint(first) is None  # the message before it is the first


async def test_the_proxy_marks_active_anthropic_requests_only(proxy: Proxy) -> None:
    request = _turns()
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as a:
        await a.messages.create(**request)
        sent = proxy.fake.received[-1].json()
        assert sent["messages"][2]["content"][-1]["cache_control"] == EPHEMERAL
        assert proxy.recorder.last(route="messages")["cache_breakpoint"] is True
        await a.messages.create(**request, extra_headers={"x-ctxwarden-mode": "exact"})
        assert "cache_control" not in proxy.fake.received[-1].json()["messages"][2]["content"][-1]


def test_only_real_markers_count_and_are_copied() -> None:
    # a tool parameter named cache_control is schema, not a marker
    request = _turns(None)
    schema = {"type": "object", "properties": {"cache_control": {"type": "string"}}}
    request["tools"] = [{"name": "http", "input_schema": schema, "cache_control": EPHEMERAL}]
    request["messages"][3]["content"][0]["input"] = {"cache_control": {"type": "x"}}
    marked = with_step_breakpoint(request)
    assert marked is not None
    assert marked["messages"][2]["content"][-1]["cache_control"] == EPHEMERAL
    # a request-level marker (automatic caching) takes one of the four slots
    crowded = _turns()
    crowded["cache_control"] = EPHEMERAL
    crowded["system"] = [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                         for i in range(2)]  # fmt: skip
    assert with_step_breakpoint(crowded) is None
    automatic = _turns(None)
    automatic["cache_control"] = EPHEMERAL
    marked = with_step_breakpoint(automatic)
    assert marked is not None and marked["messages"][2]["content"][-1]["cache_control"] == EPHEMERAL


def test_library_callers_get_the_same_breakpoint() -> None:
    import ctxwarden

    request = _turns()
    assert ctxwarden.with_step_breakpoint(request) == with_step_breakpoint(request)
    assert ctxwarden.with_step_breakpoint(request) != request


def _longer() -> dict[str, Any]:
    """Four exchanges; the client marks the end."""
    request = _turns(None)
    for k in (3, 4):
        request["messages"][-1]["content"][0]["content"] = f"out {k - 1}"
        request["messages"] += [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{k}", "name": "bash", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"out {k}"}]},
        ]  # fmt: skip
    request["messages"][-1]["content"][0]["cache_control"] = EPHEMERAL
    return request


def _marked(request: dict[str, Any]) -> list[int]:
    """Indexes of the messages whose last block carries a breakpoint."""
    return [
        i
        for i, m in enumerate(request["messages"])
        if isinstance(m["content"], list) and "cache_control" in m["content"][-1]
    ]


def test_a_step_also_marks_the_last_message_it_kept() -> None:
    request = _longer()  # messages 0..8; the previous request ended with message 6
    marked = with_step_breakpoint(request, step_start=3)
    assert marked is not None
    assert _marked(marked) == [2, 6, 8]  # before the rewrite, the previous end, the client's
    # no step, a step at the head, or a step past the previous end: no extra marker
    for start in (None, 0, 7):
        plain = with_step_breakpoint(request, step_start=start)
        assert plain is not None and _marked(plain) == [6, 8]


def test_with_room_for_one_the_step_marker_wins() -> None:
    request = _longer()
    request["system"] = [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                         for i in range(2)]  # fmt: skip
    marked = with_step_breakpoint(request, step_start=3)
    assert marked is not None
    assert "cache_control" in marked["messages"][2]["content"][-1]
    assert "cache_control" not in marked["messages"][6]["content"][-1]


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(message)
    if isinstance(out["content"], list):
        for block in out["content"]:
            block.pop("cache_control", None)
    return out


async def test_the_proxy_marks_the_last_message_a_step_kept(make_proxy: ProxyFactory) -> None:
    from tests.passes.convo import FORCE, make_engine

    # outputs stay whole while in the recency budget (about four of them), so each
    # step rewrites an output four exchanges behind the previous request's end
    engine = make_engine("balanced", {**FORCE, "recency_tokens": 5000})
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing tests."}]
    step_marks = 0
    async with make_proxy(engine) as proxy:
        client = anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0)
        async with client:
            previous: list[dict[str, Any]] | None = None
            for k in range(30):
                # the same file read twice: the later read supersedes the earlier one,
                # a rewrite far behind the previous request's end
                command = "cat src/app.py" if k in (1, 8) else f"pytest tests/test_{k}.py"
                lines = "\n".join(f"line {i} of {command} output {k}" for i in range(80))
                messages += [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}",
                     "name": "bash", "input": {"command": command}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}",
                     "content": lines, "cache_control": EPHEMERAL}]},
                ]  # fmt: skip
                if len(messages) > 3:  # the client marks only its newest message
                    del messages[-3]["content"][-1]["cache_control"]
                await client.messages.create(
                    model="claude-opus-5", max_tokens=100, messages=messages
                )
                sent = proxy.fake.received[-1].json()["messages"]
                plain = [_unmarked(m) for m in sent]
                if previous is not None:
                    start = next(
                        (
                            i
                            for i, (a, b) in enumerate(zip(previous, plain, strict=False))
                            if a != b
                        ),
                        None,
                    )
                    if start is not None and start < len(previous) - 2:  # a step far back
                        assert "cache_control" in sent[start - 1]["content"][-1]
                        step_marks += 1
                previous = plain
    assert step_marks > 0


def _nested(where: str, marker: dict[str, Any]) -> dict[str, Any]:
    """A block holding a client marker below its top level, as the API takes them."""
    text = {"type": "text", "text": "found", "cache_control": marker}
    if where == "search_result":
        return {"type": "search_result", "source": "s", "title": "t", "content": [text]}
    if where == "document":
        return {"type": "document", "source": {"type": "content", "content": [text]}}
    if where == "tool_result_search":
        inner = {"type": "search_result", "source": "s", "title": "t", "content": [text]}
        return {"type": "tool_result", "tool_use_id": "t1", "content": [inner]}
    return {"type": "mcp_tool_result", "tool_use_id": "t1", "content": [text]}


@pytest.mark.parametrize("where", ["search_result", "document", "tool_result_search", "mcp"])
def test_a_marker_below_a_blocks_top_level_counts_too(where: str) -> None:
    """helper-102's review: a client using four markers, one nested, got a fifth (the
    API refuses it), and a copied 5-minute marker could precede its nested 1-hour one."""
    request = _turns()
    request["system"] = [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                         for i in range(2)]  # fmt: skip
    request["messages"][0]["content"] = [
        {"type": "text", "text": "Fix the bug."},
        _nested(where, EPHEMERAL),
    ]
    assert with_step_breakpoint(request) is None  # four already: 2 system, nested, last
    hour = {"type": "ephemeral", "ttl": "1h"}
    later = _turns()
    later["messages"][4]["content"].append(_nested(where, hour))
    del later["messages"][4]["content"][0]["cache_control"]
    marked = with_step_breakpoint(later)
    assert marked is not None  # the copy takes the TTL of the client's next marker
    assert marked["messages"][2]["content"][-1]["cache_control"] == hour


def test_tool_inputs_and_schemas_are_data_not_markers() -> None:
    request = _turns()
    data = {"cache_control": EPHEMERAL, "x": [{"cache_control": EPHEMERAL}]}
    request["messages"][1]["content"][0]["input"] = data
    request["tools"] = [{"name": "bash", "input_schema": {"cache_control": EPHEMERAL}}]
    request["system"] = [{"type": "text", "text": f"s{i}", "cache_control": EPHEMERAL}
                         for i in range(2)]  # fmt: skip
    assert with_step_breakpoint(request) is not None  # 3 real markers: room for one


def test_a_deeply_nested_body_costs_no_stack() -> None:
    deep: Any = {"type": "text", "text": "x"}
    for _ in range(5000):
        deep = {"type": "document", "source": {"type": "content", "content": [deep]}}
    request = _turns()
    request["messages"][0]["content"] = [deep]
    assert with_step_breakpoint(request) is not None
