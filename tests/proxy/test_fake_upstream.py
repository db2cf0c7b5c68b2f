"""The fake upstream itself: what it records, and how much a long-running one keeps."""

from __future__ import annotations

import gzip
import logging
import zlib

import aiohttp
import orjson
import pytest

from ctxwarden.proxy.fake_upstream import LONG_RUNNING_RECEIVED, FakeUpstream, Reply, ToolCall


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


def _read_call() -> Reply:
    return Reply(text="", tool_calls=[ToolCall("read", {"path": "a.py"}, "c1")])


async def _first(session: aiohttp.ClientSession, fake: FakeUpstream) -> str:
    fake.script(_read_call())
    async with session.post(fake.url + "/v1/responses", json={"model": "m", "input": "hi"}) as r:
        return str((await r.json())["id"])


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_the_fake_checks_a_coded_continuation_as_openai_does(coding: str) -> None:
    """A continuation sent compressed is checked like a plain one: the proxy's tests
    of bodies it forwards as sent rely on it."""
    async with FakeUpstream() as fake, aiohttp.ClientSession() as session:
        first = await _first(session, fake)
        answer = {"type": "function_call_output", "call_id": "c1", "output": "x"}
        for given, status in (("more", 400), ([answer], 200)):
            raw = orjson.dumps({"model": "m", "input": given, "previous_response_id": first})
            data = gzip.compress(raw) if coding == "gzip" else zlib.compress(raw)
            headers = {"Content-Encoding": coding, "Content-Type": "application/json"}
            url = fake.url + "/v1/responses"
            async with session.post(url, data=data, headers=headers) as r:
                assert r.status == status
                if status == 400:
                    message = (await r.json())["error"]["message"]
                    assert message == "No tool output found for function call c1."


async def test_the_fake_checks_a_continuation_only_the_stdlib_reads() -> None:
    """JSON orjson refuses but OpenAI takes (a lone surrogate escape) is checked too."""
    async with FakeUpstream() as fake, aiohttp.ClientSession() as session:
        first = await _first(session, fake)
        raw = '{"model": "m", "input": "a \\ud800 b", "previous_response_id": "' + first + '"}'
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(raw)
        async with session.post(fake.url + "/v1/responses", data=raw.encode()) as r:
            assert r.status == 400
            message = (await r.json())["error"]["message"]
            assert message == "No tool output found for function call c1."


@pytest.mark.parametrize("body", [b'{"not": "gzip"}', b"\x1f\x8bgarbage"])
async def test_a_body_not_in_its_coding_is_refused_400_not_a_crash(
    body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused as a provider refuses it, and quietly: no "Unhandled exception" traceback
    from aiohttp (its server used to read on after the answer, meeting the error again)."""
    async with FakeUpstream() as fake, aiohttp.ClientSession() as session:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        url = fake.url + "/v1/chat/completions"
        with caplog.at_level(logging.DEBUG, logger="aiohttp"):
            async with session.post(url, data=body, headers=headers) as r:
                assert r.status == 400
                assert "could not read the request body" in (await r.json())["error"]["message"]
            await _chat(fake, 1)  # and it goes on serving
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
