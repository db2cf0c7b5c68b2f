"""An integer past 64 bits (valid JSON) reaches the upstream exactly: the fast parser
would read it as a float, so such a request is forwarded as sent, never rewritten."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from ctxwarden import Engine, EngineConfig
from ctxwarden.store import MemoryStore
from tests.passes.convo import FORCE, call, lines_of, request, result


async def test_an_integer_past_64_bits_is_forwarded_exactly(make_proxy: Any) -> None:
    engine = Engine(EngineConfig(preset="balanced", pipeline=FORCE), store=MemoryStore())
    wire = request(
        call("c1", "cat big.txt"),
        result("c1", lines_of("big", 120)),
        call("c2", "cat other.txt"),
        result("c2", lines_of("other", 120)),
    )
    raw = (json.dumps(wire)[:-1] + ', "seed": 18446744073709551616}').encode()
    async with make_proxy(engine=engine, mode="active") as proxy:
        async with aiohttp.ClientSession() as session:
            response = await session.post(
                proxy.openai_url + "/chat/completions",
                data=raw,
                headers={"Authorization": "Bearer sk-x", "Content-Type": "application/json"},
            )
            assert response.status == 200
            await response.read()
        assert proxy.fake.received[-1].body == raw
        event = proxy.recorder.last(route="chat")
        assert "64 bits" in str(event.get("fallback_reason"))
