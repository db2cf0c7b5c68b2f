"""``condense --api X`` refuses a body that plainly belongs to another API, naming the
JSON path of the evidence and the file; every body an SDK types as valid for X passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.errors import MalformedRequest
from ctxwarden.io import check_api, guess_api
from tests.adapters.test_sdk_shapes import RESPONSES_TOP, SHAPES, Shape, _long, _short
from tests.cli.failing import fails

ANTHROPIC = {
    "model": "claude-sonnet-4",
    "max_tokens": 100,
    "system": "be brief",
    "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "a\nb"}]},
    ],
}  # fmt: skip
NO_SYSTEM = {k: v for k, v in ANTHROPIC.items() if k != "system"}


@pytest.mark.parametrize(
    ("body", "api", "message"),
    [
        (ANTHROPIC, "openai.chat", "a top-level system is not an OpenAI Chat field "
         "(Anthropic Messages has one): anthropic.messages? at /system"),
        (NO_SYSTEM, "openai.chat", "a tool_use block is not an OpenAI Chat content part "
         "(an Anthropic Messages block): anthropic.messages? at /messages/1/content/0/type"),
        ({"model": "m", "input": "hi", "system": "s"}, "openai.responses",
         "a top-level system is not a Responses field"),
        ({"model": "m", "input": "hi"}, "anthropic.messages",
         "input is not an Anthropic Messages field (that is messages): openai.responses? "
         "at /input"),
        ({"model": "m", "input": "hi"}, "openai.chat",
         "input is not an OpenAI Chat field (that is messages)"),
    ],
)  # fmt: skip
def test_a_body_of_another_api_is_refused_naming_the_file_and_where(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    body: dict[str, Any],
    api: str,
    message: str,
) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    line = fails(capsys, ["condense", str(path), "--api", api, "--data-dir", str(tmp_path)])
    assert line.startswith(f"ctxwarden condense: error: {path}: ")
    assert message in line


def test_the_evidence_is_what_the_guess_reads() -> None:
    assert guess_api(ANTHROPIC) == guess_api(NO_SYSTEM) == "anthropic.messages"
    check_api(ANTHROPIC, "anthropic.messages")
    check_api(NO_SYSTEM, "anthropic.messages")


def _bodies(shape: Shape) -> list[dict[str, Any]]:
    return [_short(shape), _long(shape)[0]]


@pytest.mark.parametrize("shape", [pytest.param(s, id=f"{s.api}-{s.id}") for s in SHAPES])
def test_every_sdk_shape_passes_the_check_of_its_own_api(shape: Shape) -> None:
    for body in _bodies(shape):
        check_api(body, shape.api)


@pytest.mark.parametrize(("name", "body"), [pytest.param(n, b, id=n) for n, b in RESPONSES_TOP])
def test_every_responses_top_level_shape_passes(name: str, body: dict[str, Any]) -> None:
    check_api(body, "openai.responses")


def test_an_anthropic_sdk_body_is_refused_as_chat() -> None:
    for shape in (s for s in SHAPES if s.api == "anthropic.messages"):
        with pytest.raises(MalformedRequest) as info:
            check_api(_short(shape), "openai.chat")
        assert info.value.pointer == "/system"
