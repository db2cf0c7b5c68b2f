"""What is owed reaches a Responses continuation whose body the proxy does not condense
because it cannot read it within ``max_body_bytes``.

A response the proxy answered recall calls in owes their answers to the request that
continues it (``proxy/owed.py``); without them the upstream refuses the continuation
("No tool output found for function call ..."), a request that would have succeeded
without the proxy (no recall call then). So a body over ``max_body_bytes`` (sent so,
or inflating past it from ``gzip``/``deflate``) is read whole, up to
``max_owed_body_bytes``, when its tenant has owed answers; it is parsed only when the
response it names owes some, then goes out with them, nothing else changed. A body in
a coding the proxy cannot read goes as sent, with a warning and a counter (no
contents) when its tenant has owed answers. The fake upstream checks call pairing on
``previous_response_id`` as OpenAI does (gzip and deflate bodies too: its server
decodes them).
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.owed import previous_ids
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, openai_client

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3 secret-beta\nline 4"
TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}
CAP = 10_000
_GIVEN = {"type": "function_call_output", "call_id": "call_read_1", "output": "print()"}


def _outputs(items: list[Any]) -> dict[str, Any]:
    return {
        i["call_id"]: i["output"]
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


async def _owed_first(proxy: Proxy) -> str:
    """A response whose recall call (next to the client's ``read`` call) was hidden: it
    owes the recall answer to the request that continues it."""
    ref = proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)
    calls = [ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1"),
             ToolCall("read", {"path": "a.py"}, "call_read_1")]  # fmt: skip
    proxy.fake.script(Reply(text="", tool_calls=calls))
    prompt = f"[output elided by ctxwarden: 4 lines; recall {ref}] read a.py too"
    async with openai_client(proxy) as c:
        first = await c.responses.create(model="gpt-4o", input=prompt, tools=TOOLS)
    assert [i.call_id for i in first.output if i.type == "function_call"] == ["call_read_1"]
    return str(first.id)


async def _plain_first(proxy: Proxy) -> str:
    """A response that owes nothing."""
    proxy.fake.script(Reply(text="hi"))
    async with openai_client(proxy) as c:
        first = await c.responses.create(model="gpt-4o", input="hi")
    return str(first.id)


def _big(previous: str, filler: str, **extra: Any) -> dict[str, Any]:
    """A continuation far over the cap; ``previous_response_id`` after the input, as
    the OpenAI SDK orders it (the key cannot be found from the body's head)."""
    return {"model": "gpt-4o", "input": [_GIVEN, {"role": "user", "content": filler}],
            "tools": TOOLS, **extra, "previous_response_id": previous}  # fmt: skip


async def _post(proxy: Proxy, body: Any, **headers: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(auto_decompress=False) as s,
        s.post(proxy.openai_url + "/responses", data=body, headers={**AUTH, **headers}) as r,
    ):
        data = await r.read()
        return r.status, orjson.loads(data) if r.content_type == "application/json" else data


def _chunks(raw: bytes) -> Any:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the cap is found reading
        for i in range(0, len(raw), 3_000):
            yield raw[i : i + 3_000]

    return chunks()


def _unsettled(proxy: Proxy, reason: str) -> float:
    value = proxy.state.metrics.registry.get_sample_value(
        "ctxwarden_owed_unsettled_total", {"reason": reason}
    )
    return value or 0.0


def _no_contents(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    text = "\n".join(r.getMessage() for r in caplog.records)
    for secret in ("secret-alpha", KEY_A, *secrets):
        assert secret not in text


# -- a body over max_body_bytes ----------------------------------------------------


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("how", ["sized", "chunked", "gzip_inflates", "deflate_inflates",
                                 "gzip_over_cap"])  # fmt: skip
async def test_an_over_cap_continuation_gets_what_is_owed(
    make_proxy: ProxyFactory, how: str, exact: bool
) -> None:
    async with make_proxy(max_body_bytes=CAP) as proxy:
        first = await _owed_first(proxy)
        filler = os.urandom(3 * CAP).hex() if how == "gzip_over_cap" else "x " * (2 * CAP)
        raw = orjson.dumps(_big(first, filler), option=orjson.OPT_INDENT_2)
        headers = {"x-ctxwarden-mode": "exact"} if exact else {}
        body: Any = raw
        if how.startswith("gzip"):
            body = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        elif how == "deflate_inflates":
            body = zlib.compress(raw)
            headers["Content-Encoding"] = "deflate"
        elif how == "chunked":
            body = _chunks(raw)
        if how != "chunked":  # over the cap as sent, or only once inflated
            assert (len(body) > CAP) == (how in ("sized", "gzip_over_cap"))
        status, answer = await _post(proxy, body, **headers)
        assert status == 200, answer
        sent = proxy.fake.received[-1]
        assert "Content-Encoding" not in sent.headers
        items = sent.json()["input"]
        assert _outputs(items) == {"call_recall_1": ORIGINAL, "call_read_1": "print()"}
        assert items[-2:] == [_GIVEN, {"role": "user", "content": filler}]  # as sent, last
        event = proxy.recorder.last(route="responses")
        assert event["status"] == 200
        if not (exact and how.endswith("_inflates")):  # exact mode: no fallback to name
            assert event["fallback_reason"].endswith(f"limit: body over {CAP} bytes")
        assert event["bytes_after"] == len(sent.body)
        assert _unsettled(proxy, "over_limit") == _unsettled(proxy, "coding") == 0


@pytest.mark.parametrize("how", ["sized", "chunked", "gzip_inflates"])
async def test_an_over_cap_continuation_owing_nothing_goes_out_as_sent(
    make_proxy: ProxyFactory, how: str
) -> None:
    """The tenant has owed answers, but not for the response this request continues
    (a nested ``previous_response_id`` naming one that owes does not count)."""
    async with make_proxy(max_body_bytes=CAP) as proxy:
        owing = await _owed_first(proxy)
        plain = await _plain_first(proxy)
        big = _big(plain, "x " * (2 * CAP), metadata={"previous_response_id": owing})
        big["input"] = big["input"][1:]  # the plain response has no call to answer
        raw = orjson.dumps(big, option=orjson.OPT_INDENT_2)  # any rewrite would show
        headers: dict[str, str] = {}
        body: Any = raw if how == "sized" else _chunks(raw)
        if how == "gzip_inflates":
            body = gzip.compress(raw)
            headers["Content-Encoding"] = "gzip"
        status, answer = await _post(proxy, body, **headers)
        assert status == 200, answer
        assert proxy.fake.received[-1].body == raw
        event = proxy.recorder.last(route="responses")
        assert event["fallback_reason"].endswith(f"limit: body over {CAP} bytes")


async def test_an_over_cap_body_of_a_tenant_owing_nothing_is_streamed_through(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No owed answers for the tenant: the body streams upstream as before, and no
    owed item of any response is looked up."""
    async with make_proxy(max_body_bytes=CAP) as proxy:
        plain = await _plain_first(proxy)
        names: list[str] = []
        store = proxy.engine.store
        get_state = store.get_state

        def spy(tenant: str, session: str) -> bytes | None:
            names.append(session)
            return get_state(tenant, session)

        monkeypatch.setattr(store, "get_state", spy)
        raw = orjson.dumps(_big(plain, "x " * (2 * CAP)) | {"input": "go on " * CAP})
        for body in (raw, _chunks(raw)):
            status, _ = await _post(proxy, body)
            assert status == 200
            assert proxy.fake.received[-1].body == raw
        assert not [n for n in names if "owed:" in n], names


async def test_an_over_cap_body_past_the_owed_limit_is_streamed_with_a_warning(
    make_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Past ``max_owed_body_bytes`` too the body streams through as sent (what is owed,
    if anything, is not added: the upstream then refuses it); a warning and a counter
    say so, without contents."""
    async with make_proxy(max_body_bytes=CAP, max_owed_body_bytes=3 * CAP) as proxy:
        first = await _owed_first(proxy)
        raw = orjson.dumps(_big(first, "secret-gamma " * CAP))
        with caplog.at_level(logging.WARNING, logger="ctxwarden"):
            for body in (raw, _chunks(raw)):
                status, answer = await _post(proxy, body)
                assert status == 400  # the upstream's refusal, passed through
                assert answer["error"]["message"].startswith("No tool output found")
                assert proxy.fake.received[-1].body == raw
        assert _unsettled(proxy, "over_limit") == 2
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2
        _no_contents(caplog, "secret-gamma", first)


# -- a body in a coding the proxy cannot read --------------------------------------


@pytest.mark.parametrize("coding", ["compress", "br", "zstd", "gzip, br", "corrupt"])
async def test_a_continuation_in_an_unreadable_coding_goes_as_sent_with_a_warning(
    proxy: Proxy, caplog: pytest.LogCaptureFixture, coding: str
) -> None:
    """Without its body the proxy cannot tell which response a request continues: it
    goes as sent (refusing it could fail a request that owes nothing); when its tenant
    has owed answers, a warning and a counter say they may be missing."""
    first = await _owed_first(proxy)
    raw = orjson.dumps(_big(first, "secret-gamma"))
    body = b"\x1f\x8b not really gzip" if coding == "corrupt" else raw
    header = "gzip" if coding == "corrupt" else coding
    with caplog.at_level(logging.WARNING, logger="ctxwarden"):
        await _post(proxy, body, **{"Content-Encoding": header})
    if coding == "compress":  # a coding the fake's server passes through as is
        sent = proxy.fake.received[-1]
        assert sent.body == raw and sent.headers["Content-Encoding"] == "compress"
    assert _unsettled(proxy, "coding") == 1
    assert [r.levelno for r in caplog.records if r.name.startswith("ctxwarden.proxy")] == [
        logging.WARNING
    ]
    _no_contents(caplog, "secret-gamma", first)


async def test_an_unreadable_coding_of_a_tenant_owing_nothing_goes_as_sent_quietly(
    proxy: Proxy, caplog: pytest.LogCaptureFixture
) -> None:
    plain = await _plain_first(proxy)
    raw = orjson.dumps({"model": "gpt-4o", "input": "go on", "previous_response_id": plain})
    with caplog.at_level(logging.WARNING, logger="ctxwarden"):
        status, _ = await _post(proxy, raw, **{"Content-Encoding": "compress"})
    assert status == 200 and proxy.fake.received[-1].body == raw
    assert _unsettled(proxy, "coding") == 0
    assert not [r for r in caplog.records if r.name.startswith("ctxwarden.proxy")]


# -- finding previous_response_id without parsing ----------------------------------


def test_previous_ids_finds_every_key_that_could_be_the_top_level_one() -> None:
    body = orjson.dumps({"input": [{"content": 'say "previous_response_id": "resp_in_text"'}],
                         "metadata": {"previous_response_id": "resp_nested"},
                         "previous_response_id": "resp_\u00e9"})  # fmt: skip
    assert set(previous_ids(body) or ()) == {"resp_nested", "resp_\u00e9"}
    spaced = b'{"input": "x",\n  "previous_response_id" :\t"resp_\\u0041\\"b"}'
    assert previous_ids(spaced) == ['resp_A"b']
    assert previous_ids(b'{"input": "no continuation"}') == []
    assert previous_ids(b'{"previous_response_id": null}') == []


def test_previous_ids_gives_up_on_a_body_naming_too_many() -> None:
    many = orjson.dumps([{"previous_response_id": f"resp_{i}"} for i in range(100)])
    assert previous_ids(many) is None  # the caller parses the body to know
    same = orjson.dumps([{"previous_response_id": "resp_1"} for _ in range(100)])
    assert previous_ids(same) == ["resp_1"]
