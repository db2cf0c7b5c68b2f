"""Review 7: the proxy's OpenAI Responses handling.

- a request in a ``conversation`` gets no recall tool (OpenAI appends every request's
  input and output to the conversation: a continuation round would add them twice);
- what a streamed response owes is kept as soon as it is known, so a stream the client
  stops, or a continuation that fails, leaves it answerable;
- a request forwarded without condensing (exact mode, kill switch, JSON only the
  stdlib reads, integers past 64 bits) still gets what the response it continues owes,
  and goes out as sent when nothing is owed;
- with a canary split, a Responses session stays on one side on every turn.

The fake upstream checks call pairing on ``previous_response_id`` as OpenAI does.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from typing import Any

import aiohttp
import orjson
import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.dialects import DIALECTS
from ctxwarden.proxy.rollout import KillSwitch, canary_key, decide
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, openai_client, respond

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3 secret-beta\nline 4"
TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


def _ref(proxy: Proxy) -> str:
    return proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)


def _prompt(ref: str) -> str:
    return f"[output elided by ctxwarden: 4 lines; recall {ref}] read a.py too"


def _outputs(items: list[Any]) -> dict[str, Any]:
    return {
        i["call_id"]: i["output"]
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") for t in body.get("tools") or []]


# -- 1. conversation ---------------------------------------------------------------


def test_no_recall_tool_is_offered_in_a_conversation() -> None:
    responses = DIALECTS["openai.responses"]
    base = {"model": "m", "input": "q", "tools": TOOLS}
    assert responses.inject(base) is not None
    for conversation in ("conv_123", {"id": "conv_123"}):
        assert responses.inject({**base, "conversation": conversation}) is None


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_in_a_conversation_is_sent_once_without_the_recall_tool(
    proxy: Proxy, stream: bool
) -> None:
    """With the tool, a recall call would make the proxy send a continuation that
    repeats the input and the first round's items, all appended to the conversation
    a second time upstream."""
    ref = _ref(proxy)
    proxy.fake.script(
        Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_r")]),
        Reply(text="done"),
    )
    async with openai_client(proxy) as c:
        await respond(
            c, stream, input=_prompt(ref), tools=TOOLS, extra_body={"conversation": "conv_123"}
        )
    assert len(proxy.fake.received) == 1
    sent = proxy.fake.received[0].json()
    assert sent["conversation"] == "conv_123"
    assert _tool_names(sent) == ["read"]


# -- 2. what a stream owes, kept as soon as it is known ----------------------------


async def _stream_until_shown(proxy: Proxy, body: dict[str, Any], stop: Any) -> str:
    """Stream ``body`` through the proxy and leave once ``stop(event)`` is true (or the
    stream ends); the response id the client was shown."""
    seen = None
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.openai_url + "/responses", json=body, headers=AUTH) as r,
    ):
        assert r.status == 200
        try:
            async for line in r.content:
                if not line.startswith(b"data:"):
                    continue
                event = orjson.loads(line[5:])
                if event.get("type") == "response.created":
                    seen = event["response"]["id"]
                if await stop(event):
                    break
        except aiohttp.ClientPayloadError:
            pass  # a stream the proxy cut after its error event
    assert seen is not None
    return seen


async def _continue(proxy: Proxy, previous: str) -> Any:
    async with openai_client(proxy) as c:
        return await c.responses.create(
            model="gpt-4o", input="continue", previous_response_id=previous, tools=TOOLS
        )


@pytest.mark.parametrize("cut", ["client_leaves_next_round", "client_leaves_while_answering",
                                 "continuation_fails"])  # fmt: skip
async def test_a_stream_cut_after_its_id_was_shown_can_be_continued(
    proxy: Proxy, cut: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 0 shows text, then calls recall: its id is the client's. The client
    stops the stream in round 1, or while the proxy answers the recall call (the
    handler is cancelled), or round 1 fails: the stored response of that id still
    holds the recall call, so its answer must be kept before anything can fail."""
    ref = _ref(proxy)
    recall = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_0")
    later = {
        "client_leaves_next_round": Reply(text="a long answer " * 40, chunk_delay=0.02),
        "client_leaves_while_answering": None,  # no round 1: the handler is cancelled
        "continuation_fails": Reply(status=500, error="overloaded"),
    }[cut]
    proxy.fake.script(Reply(text="Let me look.", tool_calls=[recall]), *([later] if later else []))
    slowed: list[int] = []
    if cut == "client_leaves_while_answering":
        slow_recall = proxy.engine.recalled

        def slow(*args: Any, **kwargs: Any) -> Any:
            slowed.append(1)
            time.sleep(0.6)
            return slow_recall(*args, **kwargs)

        monkeypatch.setattr(proxy.engine, "recalled", slow)

    async def stop(event: dict[str, Any]) -> bool:
        if cut == "client_leaves_next_round":  # the user presses stop in round 1
            return (
                event.get("type") == "response.output_text.delta" and len(proxy.fake.received) == 2
            )
        if cut == "client_leaves_while_answering" and event.get("type") == (
            "response.output_text.delta"
        ):
            await asyncio.sleep(0.2)  # round 0 is over: the proxy answers recall
            return True
        return False

    body = {"model": "gpt-4o", "tools": TOOLS, "stream": True, "input": _prompt(ref)}
    seen = await _stream_until_shown(proxy, body, stop)
    assert seen == "resp_fake1"
    await asyncio.sleep(0.8)  # the proxy notices the client left
    second = await _continue(proxy, seen)
    assert second.output_text == "Hello from the fake upstream."
    sent = proxy.fake.received[-1].json()
    assert sent["previous_response_id"] == seen
    assert _outputs(sent["input"]) == {"call_recall_0": ORIGINAL}
    if cut == "client_leaves_while_answering":
        assert slowed  # the answer was under way when the client left


# -- 3. requests forwarded uncondensed still get what is owed ----------------------


def _mixed(ref: str) -> Reply:
    """One answer calling recall and the client's ``read`` tool: the recall call is
    hidden and owed to the request that continues it."""
    calls = [ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1"),
             ToolCall("read", {"path": "a.py"}, "call_read_1")]  # fmt: skip
    return Reply(text="", tool_calls=calls)


_GIVEN = {"type": "function_call_output", "call_id": "call_read_1", "output": "print()"}


async def _owed_first(proxy: Proxy) -> str:
    ref = _ref(proxy)
    proxy.fake.script(_mixed(ref))
    async with openai_client(proxy) as c:
        first = await c.responses.create(model="gpt-4o", input=_prompt(ref), tools=TOOLS)
    assert [i.call_id for i in first.output if i.type == "function_call"] == ["call_read_1"]
    return str(first.id)


async def _post(proxy: Proxy, raw: bytes, **headers: str) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.post(proxy.openai_url + "/responses", data=raw, headers={**AUTH, **headers}) as r,
    ):
        await r.read()
        return r.status


@pytest.mark.parametrize("how", ["kill_switch", "header", "header_gzip"])
async def test_an_exact_continuation_gets_what_is_owed(proxy: Proxy, how: str) -> None:
    first = await _owed_first(proxy)
    headers: dict[str, str] = {}
    if how == "kill_switch":
        proxy.state.kill_switch.set(True, "test")
    else:
        headers["x-ctxwarden-mode"] = "exact"
    raw = orjson.dumps({"model": "gpt-4o", "input": [_GIVEN], "previous_response_id": first,
                        "tools": TOOLS})  # fmt: skip
    if how == "header_gzip":
        headers["Content-Encoding"] = "gzip"
        raw = gzip.compress(raw)
    assert await _post(proxy, raw, **headers) == 200
    sent = proxy.fake.received[-1]
    assert "Content-Encoding" not in sent.headers
    assert _outputs(sent.json()["input"]) == {"call_recall_1": ORIGINAL, "call_read_1": "print()"}
    assert sent.json()["input"][-1] == _GIVEN
    assert proxy.recorder.events[-1]["mode"] == "exact"


@pytest.mark.parametrize("previous", [False, True])
async def test_an_exact_request_that_owes_nothing_goes_out_as_sent(
    proxy: Proxy, previous: bool
) -> None:
    proxy.fake.script(Reply(text="hi"))
    async with openai_client(proxy) as c:
        first = await c.responses.create(model="gpt-4o", input="hi")
    extra = f', "previous_response_id": "{first.id}"' if previous else ""
    raw = ('{"model":  "gpt-4o", "input": "go on\\u00e9", "n": 1.50' + extra + "}").encode()
    assert await _post(proxy, raw, **{"x-ctxwarden-mode": "exact"}) == 200
    assert proxy.fake.received[-1].body == raw


@pytest.mark.parametrize("kind", ["wide_integer", "lone_surrogate"])
async def test_a_continuation_only_the_stdlib_reads_gets_what_is_owed(
    make_proxy: ProxyFactory, kind: str
) -> None:
    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    async with make_proxy(engine=engine, mode="active") as proxy:
        first = await _owed_first(proxy)
        given = dict(_GIVEN, output="caf\u00e9 \\ud800 x" if kind == "lone_surrogate" else "ok")
        text = json.dumps({"model": "gpt-4o", "input": [given], "previous_response_id": first,
                           "tools": TOOLS})  # fmt: skip
        if kind == "lone_surrogate":  # a lone surrogate escape: orjson refuses it
            text = text.replace("\\\\ud800", "\\ud800")
        else:
            text = text[:-1] + ', "x_seed": 18446744073709551617}'
        assert await _post(proxy, text.encode()) == 200
        sent = json.loads(proxy.fake.received[-1].body)
        engine.close()
    assert proxy.recorder.events[-1]["fallback_reason"].startswith("proxy: ")
    assert set(_outputs(sent["input"])) == {"call_recall_1", "call_read_1"}
    assert _outputs(sent["input"])["call_recall_1"] == ORIGINAL
    if kind == "lone_surrogate":
        assert sent["input"][-1]["output"] == "caf\u00e9 \ud800 x"
    else:
        assert sent["x_seed"] == 18446744073709551617


# -- 4. one canary side for every turn of a Responses session ----------------------

_KS = KillSwitch()
_ENGINE = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
_TASK = "fix the bug in a.py"
_GIVEN_READ: Any = [{"type": "function_call_output", "call_id": "call_read_1",
                     "output": "print()"}]  # fmt: skip


def _side(request: dict[str, Any]) -> bool:
    """Whether ``request`` runs active, bucketed by its own text alone."""
    key = canary_key(_ENGINE.parse(request, "openai.responses"))
    return decide(kill_switch=_KS, header=None, server_mode="active", canary_percent=50,
                  session=key).mode == "active"  # fmt: skip


def _split_instructions(first_in: bool) -> str:
    """Instructions under which the first turn (``_TASK``) runs on side ``first_in``
    and its continuation, bucketed by its own text (no history: only the
    instructions), on the other."""
    for i in range(1000):
        instructions = f"You are coding agent {i}."
        first = {"model": "gpt-4o", "instructions": instructions, "input": _TASK}
        later = {"model": "gpt-4o", "instructions": instructions, "input": _GIVEN_READ,
                 "previous_response_id": "resp_x"}  # fmt: skip
        if _side(first) == first_in != _side(later):
            return instructions
    raise AssertionError("no such instructions")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("first_in", [False, True])
async def test_a_responses_session_stays_on_one_canary_side(
    make_proxy: ProxyFactory, stream: bool, first_in: bool
) -> None:
    instructions = _split_instructions(first_in)
    async with make_proxy(canary_percent=50) as proxy:
        proxy.fake.script(
            Reply(text="", tool_calls=[ToolCall("read", {"path": "a.py"}, "call_read_1")]),
            Reply(text="read it"),
            Reply(text="tests pass"),
        )
        kwargs: Any = {"instructions": instructions, "tools": TOOLS}
        async with openai_client(proxy) as c:
            first = await respond(c, stream, input=_TASK, **kwargs)
            second = await respond(
                c, stream, input=_GIVEN_READ, previous_response_id=first.id, **kwargs
            )
            third = await respond(
                c, stream, input="now run the tests", previous_response_id=second.id, **kwargs
            )
        assert third.output_text == "tests pass"
        await proxy.state.drain()  # a canary-out condense runs beside its answer
        reasons = [e["rollout_reason"] for e in proxy.recorder.events]
        tools = [_tool_names(r.json()) for r in proxy.fake.received]
    expected = "canary_in" if first_in else "canary_out"
    assert reasons == [expected] * 3, reasons
    # the tool list (the start of the cached prompt) never changes in the session
    assert tools == [["read", *([RECALL_TOOL_NAME] if first_in else [])]] * 3


async def test_no_canary_key_is_kept_without_a_canary_split(
    proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []
    store = proxy.engine.store
    put_state = store.put_state

    def spy(tenant: str, session: str, state: bytes) -> None:
        names.append(session)
        put_state(tenant, session, state)

    monkeypatch.setattr(store, "put_state", spy)
    async with openai_client(proxy) as c:
        for stream in (False, True):
            first = await respond(c, stream, input="hi", tools=TOOLS)
            await respond(c, stream, input="go on", previous_response_id=first.id, tools=TOOLS)
    assert not [n for n in names if "canary" in n]
