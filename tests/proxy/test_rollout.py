"""Modes, canary buckets, the kill switch (admin endpoint and SIGUSR1)."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import ADMIN_PATH, KillSwitch, canary_bucket
from ctxwarden.proxy.rollout import decide, header_mode
from ctxwarden.proxy.server import install_kill_switch_signal
from tests.proxy.conftest import KEY_A, ProxyFactory

TOKEN = "admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


def _chat(content: str) -> bytes:
    return orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": content}]})


async def _send(url: str, body: bytes, **headers: str) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", data=body, headers={**AUTH, **headers}) as r,
    ):
        await r.read()
        return r.status


def test_canary_bucket_is_deterministic_and_splits_sessions() -> None:
    keys = [f"session-{i}" for i in range(1000)]
    assert [canary_bucket(k) for k in keys] == [canary_bucket(k) for k in keys]
    modes = [decide(kill_switch=KillSwitch(), header=None, server_mode="active",
                    canary_percent=25, session=k).mode for k in keys]  # fmt: skip
    assert 150 < modes.count("active") < 350 and set(modes) == {"active", "shadow"}
    engaged = decide(kill_switch=KillSwitch(True), header="active", server_mode="active",
                     canary_percent=100, session="s")  # fmt: skip
    assert (engaged.mode, engaged.reason) == ("exact", "kill_switch")


async def test_header_mode_and_canary_out_are_logged(make_proxy: ProxyFactory) -> None:
    async with make_proxy(canary_percent=50) as proxy:
        results: dict[str, Any] = {}
        for i in range(40):
            session = f"sess-{i}"
            assert await _send(proxy.url, _chat("x"), **{"x-ctxwarden-session": session}) == 200
            await proxy.state.drain()  # a canary-out event waits for its condense
            event = proxy.recorder.events[-1]
            expect = "canary_in" if canary_bucket(session) < 50 else "canary_out"
            assert event["rollout_reason"] == expect
            assert event["mode"] == ("active" if expect == "canary_in" else "shadow")
            results[expect] = True
        assert set(results) == {"canary_in", "canary_out"}
        assert await _send(proxy.url, _chat("x"), **{"x-ctxwarden-mode": "shadow"}) == 200
        await proxy.state.drain()  # a shadow request's event waits for its condense
        assert proxy.recorder.events[-1]["rollout_reason"] == "header"
        assert proxy.recorder.events[-1]["mode"] == "shadow"
        # a derived session (no header) also buckets the same way every time
        await _send(proxy.url, _chat("same head"))
        await _send(proxy.url, _chat("same head"))
        a, b = proxy.recorder.events[-2:]
        assert a["canary_bucket"] == b["canary_bucket"] and a["session"] == b["session"]


async def test_shadow_mode_sends_the_original_bytes(make_proxy: ProxyFactory) -> None:
    async with make_proxy(mode="shadow") as proxy:
        body = b'{"model":"gpt-4o",  "messages":[{"role":"user","content":"hi"}]}'
        assert await _send(proxy.url, body) == 200
        assert proxy.fake.received[-1].body == body
        await proxy.state.drain()  # a shadow request's event waits for its condense
        event = proxy.recorder.last(route="chat")
        assert event["mode"] == "shadow" and event["tokens_before"] > 0


async def test_admin_endpoint_is_off_without_a_token(make_proxy: ProxyFactory) -> None:
    """Off, and answered by the proxy: an admin call (its headers, a token) never goes
    to the provider; neither does any other ``/_ctxwarden/`` path."""
    async with make_proxy() as proxy, aiohttp.ClientSession() as s:
        token = {"x-ctxwarden-admin-token": TOKEN}
        async with s.post(proxy.url + ADMIN_PATH, json={"engaged": True}, headers=token) as r:
            assert r.status == 404
            assert "--admin-token" in (await r.json())["error"]
        async with s.get(proxy.url + ADMIN_PATH) as r:
            assert r.status == 404
        for path in ("/_ctxwarden/other", "/_ctxwarden"):
            async with s.get(proxy.url + path) as r:
                assert r.status == 404 and path in (await r.json())["error"]
        assert proxy.state.kill_switch.engaged is False
        assert not any(q.path.startswith("/_ctxwarden") for q in proxy.fake.received)


async def test_admin_kill_switch_needs_the_token_and_forces_exact(
    make_proxy: ProxyFactory,
) -> None:
    async with make_proxy(admin_token=TOKEN) as proxy, aiohttp.ClientSession() as s:
        async with s.post(proxy.url + ADMIN_PATH, json={"engaged": True}) as r:
            assert r.status == 401
        wrong = {"x-ctxwarden-admin-token": "x" * len(TOKEN)}
        async with s.post(proxy.url + ADMIN_PATH, json={"engaged": True}, headers=wrong) as r:
            assert r.status == 401
        good = {"x-ctxwarden-admin-token": TOKEN}
        async with s.post(proxy.url + ADMIN_PATH, json={"engaged": True}, headers=good) as r:
            assert r.status == 200 and (await r.json()) == {"engaged": True}
        await _send(proxy.url, _chat("x"), **{"x-ctxwarden-mode": "active"})
        event = proxy.recorder.last(route="chat")
        assert (event["mode"], event["rollout_reason"]) == ("exact", "kill_switch")
        async with s.post(proxy.url + ADMIN_PATH, json={"engaged": False}, headers=good) as r:
            assert (await r.json()) == {"engaged": False}
        await _send(proxy.url, _chat("x"))
        assert proxy.recorder.last(route="chat")["mode"] == "active"
        assert proxy.fake.received[-1].path == "/v1/chat/completions"  # admin never forwarded


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
async def test_sigusr1_toggles_the_kill_switch(make_proxy: ProxyFactory) -> None:
    async with make_proxy() as proxy:
        loop = asyncio.get_running_loop()
        install_kill_switch_signal(proxy.state.kill_switch, loop)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(50):
                if proxy.state.kill_switch.engaged:
                    break
                await asyncio.sleep(0.01)
            assert proxy.state.kill_switch.engaged
            await _send(proxy.url, _chat("x"))
            assert proxy.recorder.last(route="chat")["mode"] == "exact"
            os.kill(os.getpid(), signal.SIGUSR1)
            await asyncio.sleep(0.05)
            assert not proxy.state.kill_switch.engaged
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (None, None),
        ("active", "active"),
        (" Shadow ", "shadow"),
        ("EXACT", "exact"),
        ("activ", "exact"),
        ("", "exact"),
    ],
)
def test_a_header_naming_no_mode_means_exact(value: str | None, mode: str | None) -> None:
    assert header_mode(value) == mode
