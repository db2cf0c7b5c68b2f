"""A request's size as compact JSON, read off the items' encodings that parsing made,
equals encoding the whole request; the engine's report and validation use it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden import Engine, EngineConfig
from ctxwarden.adapters import get_adapter
from ctxwarden.model.hashing import wire_size
from tests.passes.convo import FORCE, make_engine
from tests.passes.strategies import chat_requests, fresh_session
from tests.pipeline.test_fixture_properties import anthropic_requests, responses_requests

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)
"""Any JSON value orjson encodes: escapes, astral characters, floats, 64-bit ints."""


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    api = draw(st.sampled_from(["openai.chat", "anthropic.messages", "openai.responses"]))
    strategy = {
        "openai.chat": chat_requests(),
        "anthropic.messages": anthropic_requests(),
        "openai.responses": responses_requests(),
    }[api]
    request = draw(strategy)
    key = "input" if api == "openai.responses" else "messages"
    items = request.get(key)
    if isinstance(items, list) and items and draw(st.booleans()):
        # unknown keys with any JSON value ride along in an item and at the top
        index = draw(st.integers(0, len(items) - 1))
        items[index] = {**items[index], "x_extra": draw(_json_values)}
    request = {**request, "metadata": draw(_json_values)}
    if draw(st.booleans()):  # the list first, the other keys after it
        request = {key: request[key], **{k: v for k, v in request.items() if k != key}}
    return api, request


@PROPERTY
@given(case=_requests())
def test_wire_size_is_the_encoded_size(case: tuple[str, dict[str, Any]]) -> None:
    api, request = case
    conversation = get_adapter(api).parse(request)
    assert conversation.item_sizes  # measured while hashing
    assert wire_size(conversation) == len(orjson.dumps(request))


@pytest.mark.parametrize(
    "request_",
    [
        {"model": "gpt-4o", "input": "just a string"},  # no item list
        {"model": "gpt-4o", "input": []},  # an empty one
        {"model": "gpt-4o"},  # none at all
    ],
)
def test_wire_size_without_item_sizes_encodes_the_request(request_: dict[str, Any]) -> None:
    conversation = get_adapter("openai.responses").parse(request_)
    assert wire_size(conversation) == len(orjson.dumps(request_))


def test_wire_size_of_a_request_json_cannot_encode_is_none() -> None:
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "x": {1, 2}}
    conversation = get_adapter("openai.chat").parse(request)
    assert wire_size(conversation) is None


def test_an_item_json_cannot_encode_has_no_size_and_the_request_none() -> None:
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi", "x": {1}}]}
    conversation = get_adapter("openai.chat").parse(request)
    assert conversation.item_sizes == () and conversation.item_hashes == ()
    assert wire_size(conversation) is None


ENGINE = make_engine("aggressive", FORCE)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_requests())
def test_the_report_gives_the_bytes_sent_and_received(case: tuple[str, dict[str, Any]]) -> None:
    api, request = case
    result = ENGINE.condense(request, api, session=fresh_session())
    assert result.report["bytes_before"] == len(orjson.dumps(request))
    assert result.report["bytes_after"] == len(orjson.dumps(result.request))


def test_a_condensed_request_reports_its_smaller_size() -> None:
    text = "\n".join(f"row {i}: checked item_{i} in module.py ok" for i in range(400))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix it."},
    ]
    for k in range(6):
        call = {"id": f"c{k}", "type": "function"}
        call["function"] = {"name": "bash", "arguments": f'{{"command": "cat f{k}.py"}}'}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"{k}\n{text}"})
    request = {"model": "gpt-4o", "messages": messages}
    engine = Engine(EngineConfig(preset="aggressive", store={"backend": "memory"}))
    result = engine.condense(request, session="s")
    assert result.changed
    after = result.report["bytes_after"]
    assert after == len(orjson.dumps(result.request)) < result.report["bytes_before"]
