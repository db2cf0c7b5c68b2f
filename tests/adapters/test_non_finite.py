"""A float NaN or infinity in a library caller's Anthropic ``tool_use.input`` is kept as
given (helper-126's review: orjson writes both as ``null``, so trimming the old call's
long values wrote ``null`` in their place, and an item holding ``null`` at the same
position hashed alike and was taken from the parse memo)."""

from __future__ import annotations

import math
import tempfile
from typing import Any

from ctxwarden import Engine, EngineConfig
from tests.passes.convo import FORCE

_BODY = "\n".join(f"line {i} of the file written here" for i in range(400))


def _request(weight: Any) -> dict[str, Any]:
    """Six old ``write`` calls with long contents, each input holding ``weight``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
    for k in range(6):
        tool_input = {"path": f"f{k}.py", "content": f"{_BODY}{k}", "weight": weight}
        messages += [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{k}", "name": "write", "input": tool_input}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{k}", "content": f"{'ok ' * 300}{k}"}]},
        ]  # fmt: skip
    messages += [{"role": "assistant", "content": "Looking."}, {"role": "user", "content": "go"}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}


def _engine() -> Engine:
    return Engine(EngineConfig(preset="aggressive", pipeline=FORCE, data_dir=tempfile.mkdtemp()))


def _inputs(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block["input"]
        for message in request["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]


def test_a_nan_or_infinity_in_a_call_input_is_kept() -> None:
    for weight in (math.nan, math.inf, -math.inf):
        result = _engine().condense(_request(weight), api="anthropic.messages")
        inputs = _inputs(result.request)
        assert all(isinstance(i["weight"], float) for i in inputs), weight
        assert all(math.isnan(i["weight"]) or i["weight"] == weight for i in inputs)
        assert result.report["tokens_after"] < result.report["tokens_before"]  # results went


def test_an_input_holding_null_is_still_trimmed_and_its_memo_not_taken_for_nan() -> None:
    engine = _engine()
    trimmed = _inputs(engine.condense(_request(None), api="anthropic.messages").request)
    assert trimmed[0]["weight"] is None and len(trimmed[0]["content"]) < len(_BODY)
    kept = _inputs(engine.condense(_request(math.nan), api="anthropic.messages").request)
    assert math.isnan(kept[0]["weight"]) and kept[0]["content"] == f"{_BODY}0"
