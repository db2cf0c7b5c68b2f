"""The fake upstream itself: what it records, and how much a long-running one keeps."""

from __future__ import annotations

import aiohttp
import pytest

from ctxwarden.proxy.fake_upstream import LONG_RUNNING_RECEIVED, FakeUpstream, Reply


async def _chat(fake: FakeUpstream, n: int) -> None:
    async with aiohttp.ClientSession() as session:
        for k in range(n):
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"m{k}"}]}
            async with session.post(f"{fake.url}/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()


async def test_a_test_fake_keeps_every_request_in_order() -> None:
    async with FakeUpstream() as fake:
        await _chat(fake, 5)
    assert [r.json()["messages"][0]["content"] for r in fake.received] == [
        f"m{k}" for k in range(5)
    ]


async def test_a_long_running_fake_keeps_only_the_newest_requests() -> None:
    async with FakeUpstream(Reply(text="a"), keep_received=3) as fake:
        await _chat(fake, 7)
    assert [r.json()["messages"][0]["content"] for r in fake.received] == ["m4", "m5", "m6"]
    assert all(r.finished for r in fake.received)


def test_the_cli_fake_is_bounded_and_a_negative_bound_is_refused() -> None:
    assert 0 < LONG_RUNNING_RECEIVED <= 10_000
    with pytest.raises(ValueError, match="keep_received"):
        FakeUpstream(keep_received=-1)
