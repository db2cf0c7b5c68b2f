"""Text that citations index into, or that carries its tokens' logprobs, is never a
part a pass can rewrite."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.model.parts import OpaquePart, TextPart

_LONG = "The answer, with sources. " * 40

CASES: list[tuple[str, dict[str, Any], int]] = [
    (
        "anthropic.messages",
        {"model": "m", "max_tokens": 9, "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "text", "text": _LONG, "citations": [
                {"type": "char_location", "cited_text": "x", "document_index": 0,
                 "start_char_index": 0, "end_char_index": 1}]}]},
            {"role": "user", "content": "more"}]},
        1,
    ),
    (
        "openai.responses",
        {"model": "m", "input": [
            {"role": "user", "content": "q"},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": _LONG, "annotations": [
                    {"type": "url_citation", "start_index": 0, "end_index": 3,
                     "url": "https://example.com", "title": "t"}]}]},
            {"role": "user", "content": "more"}]},
        1,
    ),
    (
        "openai.responses",
        {"model": "m", "input": [
            {"role": "user", "content": "q"},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": _LONG, "annotations": [], "logprobs": [
                    {"token": "The", "bytes": [84, 104, 101], "logprob": -0.1,
                     "top_logprobs": []}]}]},
            {"role": "user", "content": "more"}]},
        1,
    ),
    (
        "openai.chat",
        {"model": "m", "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": _LONG, "annotations": [
                {"type": "url_citation", "url_citation": {
                    "start_index": 0, "end_index": 3, "url": "https://example.com",
                    "title": "t"}}]},
            {"role": "user", "content": "more"}]},
        1,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("api", "request_body", "index"), CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)]
)
def test_cited_text_is_opaque_and_renders_back(
    api: str, request_body: dict[str, Any], index: int
) -> None:
    adapter = get_adapter(api)
    conversation = adapter.parse(request_body)
    parts = conversation.messages[index].parts
    assert not any(isinstance(p, TextPart) for p in parts)
    assert any(isinstance(p, OpaquePart) for p in parts)
    assert adapter.render(conversation) == request_body
