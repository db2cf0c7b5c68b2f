"""RequestView: its per-message caches never change what a request is measured as."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.replay.view import MessageInfo, RequestView, describe


def _request(outputs: list[str]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix src/app.py"}]
    for i, out in enumerate(outputs):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": out})
    return {"model": "gpt-4o", "messages": messages}


def _analysis(info: MessageInfo) -> tuple[Any, ...]:
    return (info.key, info.tokens, info.tool_tokens, info.other_tokens, info.errors, info.text)


def _figures(view: RequestView, request: dict[str, Any]) -> tuple[Any, ...]:
    step = view.advance(request, "openai_chat")
    for info, item in zip(step.messages, request["messages"], strict=True):
        assert _analysis(info) == _analysis(describe(item, len))  # as analysed afresh
    return (
        step.tokens,
        step.cached_tokens,
        step.common,
        tuple(m.key for m in step.messages),
        dict(view.tool_tokens),
        dict(view.other_tokens),
        dict(view.errors),
    )


_OUTPUTS = st.lists(
    st.sampled_from(["ok", "parse_header in src/a.py:12", "KeyError: 'k'", "x" * 40]),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_OUTPUTS, min_size=1, max_size=5), st.integers(0, 2**16))
def test_views_measure_recreated_messages_like_fresh_ones(
    turns: list[list[str]], seed: int
) -> None:
    """A condensed message is a new object every turn with the same content: a view
    with warm caches measures every turn exactly as a view built for that turn alone."""
    warm = RequestView(len)
    previous: dict[str, Any] | None = None
    for n, outputs in enumerate(turns):
        request = _request(outputs)
        if previous is not None and seed % (n + 2) == 0:
            # the engine re-renders equal messages as new objects
            request = copy.deepcopy(request)
        cold = RequestView(len)
        if previous is not None:
            cold.advance(copy.deepcopy(previous), "openai_chat")
        assert _figures(warm, request) == _figures(cold, copy.deepcopy(request))
        previous = request


def test_an_equal_message_is_analysed_once() -> None:
    view = RequestView(len)
    first = _request(["KeyError: 'k'"])
    again = copy.deepcopy(first)
    a = view.info(first["messages"][2])
    b = view.info(again["messages"][2])
    assert a is b  # served by content, not analysed twice
    assert a.errors == frozenset({"KeyError: 'k'"})
