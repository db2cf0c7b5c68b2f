"""A token count goes as the session's turns go: a session outside the canary (its
turns sent as the client sends them, at once) has its count relayed as sent, without
waiting for a busy engine thread."""

from __future__ import annotations

import threading

import aiohttp
import orjson
import pytest

from tests.proxy.conftest import KEY_A, ProxyFactory

_HEADERS = {"x-api-key": KEY_A, "anthropic-version": "2023-06-01",
            "Content-Type": "application/json"}  # fmt: skip


@pytest.mark.parametrize("named", [False, True], ids=["derived-key", "session-header"])
async def test_a_count_outside_the_canary_never_waits_for_the_engine_thread(
    make_proxy: ProxyFactory, named: bool
) -> None:
    body = {"model": "claude-newmodel-9",  # unknown: taken to bind thinking
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    headers = {**_HEADERS, **({"x-ctxwarden-session": "s-out"} if named else {})}
    async with make_proxy(mode="active", canary_percent=0, max_bound_wait=60.0) as proxy:
        hold = threading.Event()
        busy = proxy.state.executor.submit(hold.wait, 60)  # a long condense
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
                http.post(
                    f"{proxy.url}/v1/messages/count_tokens",
                    data=orjson.dumps(body),
                    headers=headers,
                ) as r,  # fmt: skip
            ):
                assert r.status == 200, await r.text()
            assert not busy.done()  # answered while the engine thread was still busy
        finally:
            hold.set()
    assert proxy.fake.received[-1].json() == body
