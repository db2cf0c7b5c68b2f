"""render(parse(x)) == x exactly, for every corpus request and every fixture."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ctxwarden.adapters import get_adapter
from ctxwarden.io import load_session, session_requests
from ctxwarden.model import classify
from tests.conftest import corpus_files, load_fixture

FIXTURES = [
    ("responses_full.json", "openai.responses"),
    ("responses_continuation.json", "openai.responses"),
    ("responses_string_input.json", "openai.responses"),
    ("anthropic_full.json", "anthropic.messages"),
    ("anthropic_string_system.json", "anthropic.messages"),
    ("chat_shapes.json", "openai.chat"),
]


def _assert_exact(request: dict[str, object], api: str) -> None:
    before = orjson.dumps(request)
    adapter = get_adapter(api)
    rendered = adapter.render(classify(adapter.parse(request)))
    assert rendered == request
    assert list(rendered) == list(request)  # same key order
    assert orjson.dumps(rendered) == before  # byte-identical serialization
    assert orjson.dumps(request) == before  # input not mutated


@pytest.mark.parametrize(("name", "api"), FIXTURES)
def test_fixture_round_trip_is_exact(name: str, api: str) -> None:
    _assert_exact(load_fixture(name), api)


def test_fixtures_cover_every_part_kind() -> None:
    kinds: set[str] = set()
    for name, api in FIXTURES:
        conversation = get_adapter(api).parse(load_fixture(name))
        for message in conversation.messages:
            for part in message.parts:
                kinds.add(part.kind)
                kinds.update(p.kind for p in getattr(part, "content", ()))
    assert kinds == {"text", "media", "tool_call", "tool_result", "reasoning", "opaque"}


def _sessions() -> list[Path]:
    from ctxwarden.io import bundled_sessions

    return corpus_files() or bundled_sessions()


@pytest.mark.corpus
def test_every_corpus_request_round_trips_exactly() -> None:
    files = _sessions()
    requests = 0
    for path in files:
        session = load_session(path)
        pairs = session_requests(session)
        # every request is a prefix of the last: checking each prefix parse is the real
        # per-request round trip (the proxy parses each one fresh)
        adapter = get_adapter("openai.chat")
        for request, _ in pairs:
            fresh = orjson.loads(orjson.dumps(request))
            assert adapter.render(classify(adapter.parse(fresh))) == request
            requests += 1
    assert requests > 0
    if corpus_files():
        assert requests > 15_000, "the full corpus has about 18,000 requests"
