"""Reasoning items next to hidden recall calls (ctxwarden.proxy.reasoning_links).

OpenAI refuses a stored reasoning item sent back without the item that followed it in
its response, and that item without its reasoning item. A client that keeps its own
history (no ``previous_response_id``) sends back what the proxy showed it, and it is
never shown a recall call: the reasoning right before one is hidden with it, and a
round in which a shown item follows such reasoning is asked again, one call at a time.
The fake upstream checks the rule as OpenAI does (``Reply(reasoning=...)``).
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.dialects import DIALECTS
from ctxwarden.proxy.reasoning_links import round_view
from ctxwarden.proxy.sse import SSESplitter, encode_event
from ctxwarden.proxy.stream_filters import ResponsesFilter
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, openai_client, respond

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3"
TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]


def _asked(proxy: Proxy) -> list[dict[str, Any]]:
    ref = proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)
    return [{"role": "user", "content": f"[output elided; recall {ref}] go on"}]


def _recall(proxy: Proxy, call_id: str = "call_recall_0") -> ToolCall:
    ref = proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)
    return ToolCall(RECALL_TOOL_NAME, {"ref": ref}, call_id)


def _shown(response: Any) -> list[dict[str, Any]]:
    """The response's output as the client keeps it for its next request."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def _ids(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["type"], i["id"]) for i in items]


@pytest.mark.parametrize("stream", [False, True])
async def test_history_replayed_after_a_recall_round_is_accepted(
    proxy: Proxy, stream: bool
) -> None:
    asked = _asked(proxy)
    proxy.fake.script(
        Reply(text="", tool_calls=[_recall(proxy)], reasoning="I need the elided output"),
        Reply(text="Done.", reasoning="now I have it"),
    )
    async with openai_client(proxy) as c:
        first = await respond(c, stream, input=asked, tools=TOOLS)
        shown = _shown(first)
        # the recall round's reasoning went with its call; the last round's is shown
        assert _ids(shown) == [("reasoning", "rs_2"), ("message", "msg_2")]
        later = [*asked, *shown, {"role": "user", "content": "thanks"}]
        second = await respond(c, stream, input=later, tools=TOOLS)
    assert second.output_text == "Hello from the fake upstream."
    assert proxy.fake.received[-1].json()["input"] == later


@pytest.mark.parametrize("stream", [False, True])
async def test_recall_before_a_client_call_is_asked_again_one_call_at_a_time(
    proxy: Proxy, stream: bool
) -> None:
    asked = _asked(proxy)
    both = [_recall(proxy), ToolCall("read", {"path": "a.py"}, "call_read_1")]
    proxy.fake.script(
        Reply(text="", tool_calls=both, reasoning="both at once"),
        Reply(text="", tool_calls=[ToolCall("read", {"path": "a.py"}, "call_read_2")],
              reasoning="one at a time"),
    )  # fmt: skip
    async with openai_client(proxy) as c:
        first = await respond(c, stream, input=asked, tools=TOOLS)
        shown = _shown(first)
        assert _ids(shown) == [("reasoning", "rs_2"), ("function_call", "fc_2_0")]
        assert shown[1]["call_id"] == "call_read_2"
        assert first.parallel_tool_calls is True  # the client's own setting, echoed
        tangled, again = (r.json() for r in proxy.fake.received[:2])
        assert again == {**tangled, "parallel_tool_calls": False}  # the same turn, asked again
        answer = {"type": "function_call_output", "call_id": "call_read_2", "output": "print()"}
        second = await respond(c, stream, input=[*asked, *shown, answer], tools=TOOLS)
    assert second.output_text == "Hello from the fake upstream."
    assert len(proxy.fake.received) == 3


async def test_the_fake_refuses_reasoning_sent_back_without_its_following_item(
    proxy: Proxy,
) -> None:
    """What the tests above rely on: the fake checks the rule."""
    proxy.fake.script(Reply(text="Hi.", reasoning="hm"))
    async with openai_client(proxy) as c:
        first = await respond(c, False, input="hello")
        reasoning = _shown(first)[0]
        refused = None
        try:
            await respond(c, False, input=[reasoning, {"role": "user", "content": "and?"}])
        except Exception as exc:
            refused = exc
    assert refused is not None and "required following item" in str(refused)


# -- the view, and the stream filter agreeing with it ------------------------------

_KINDS = ("reasoning", "recall", "read", "message")


def _item(kind: str, index: int) -> dict[str, Any]:
    if kind == "reasoning":
        return {"type": "reasoning", "id": f"rs_{index}", "summary": []}
    if kind == "message":
        return {"type": "message", "id": f"msg_{index}", "role": "assistant", "content": []}
    name = RECALL_TOOL_NAME if kind == "recall" else "read"
    return {"type": "function_call", "id": f"fc_{index}", "call_id": f"c{index}",
            "name": name, "arguments": "{}"}  # fmt: skip


def _links_kept(output: list[dict[str, Any]], shown: list[dict[str, Any]]) -> bool:
    """Whether each reasoning item of ``output`` and the item after it are both shown,
    one right after the other, or neither is."""
    ids = [i["id"] for i in shown]
    for before, after in itertools.pairwise(output):
        if before["type"] != "reasoning":
            continue
        if (before["id"] in ids) != (after["id"] in ids):
            return False
        if before["id"] in ids and ids.index(before["id"]) + 1 != ids.index(after["id"]):
            return False
    return True


outputs = st.lists(st.sampled_from(_KINDS), max_size=8).map(
    lambda kinds: [_item(k, i) for i, k in enumerate(kinds)]
)


@given(outputs)
def test_a_round_that_is_shown_keeps_every_reasoning_link(output: list[dict[str, Any]]) -> None:
    view = round_view(output)
    shown = DIALECTS["openai.responses"].strip({"output": output})["output"]
    assert not any(i["name"] == RECALL_TOOL_NAME for i in shown if i["type"] == "function_call")
    assert [x for i, x in enumerate(output) if i not in view.hidden] == shown
    if not view.tangled:
        assert _links_kept(output, shown)


def _events(output: list[dict[str, Any]]) -> list[bytes]:
    events = [{"type": "response.created", "response": {"id": "resp_1", "output": []}}]
    for index, item in enumerate(output):
        events.append({"type": "response.output_item.added", "output_index": index,
                       "item": item})  # fmt: skip
        if item["type"] == "reasoning":
            events.append({"type": "response.reasoning_summary_text.delta",
                           "output_index": index, "delta": "x"})  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": index,
                       "item": item})  # fmt: skip
    events.append({"type": "response.completed", "response": {"id": "resp_1", "output": output}})
    return [encode_event({**e, "sequence_number": n}, str(e["type"])) for n, e in enumerate(events)]


def _streamed(output: list[dict[str, Any]]) -> tuple[ResponsesFilter, list[dict[str, Any]]]:
    flt = ResponsesFilter()
    sent: list[bytes] = []
    for raw in _events(output):
        for event in SSESplitter().feed(raw):
            sent += flt.process(event)
    sent += flt.finish()
    shown = []
    for raw in sent:
        for event in SSESplitter().feed(raw):
            obj = event.json()
            if obj.get("type") == "response.output_item.done":
                shown.append(obj["item"])
                assert obj["output_index"] == len(shown) - 1  # renumbered without gaps
    return flt, shown


def _tangle(output: list[dict[str, Any]], hidden: frozenset[int]) -> int:
    """The position of the first shown item after hidden reasoning (-1: none)."""
    after_hidden = False
    for index, item in enumerate(output):
        if item["type"] == "reasoning":
            after_hidden = index in hidden
        elif index not in hidden and after_hidden:
            return index
    return -1


@given(outputs)
def test_a_stream_shows_what_the_answer_would_show(output: list[dict[str, Any]]) -> None:
    flt, shown = _streamed(output)
    view = round_view(output)
    visible = [x for i, x in enumerate(output) if i not in view.hidden]
    tangle = _tangle(output, view.hidden)
    assert (tangle >= 0) == view.tangled
    if not view.tangled:
        assert not flt.tangled and shown == visible and flt.items == shown
    elif any(i not in view.hidden for i in range(tangle)):  # the round's id went out
        assert not flt.tangled
        assert not any(x.get("name") == RECALL_TOOL_NAME for x in shown)
    else:  # nothing of it was shown: it is asked again
        assert flt.tangled and shown == []


def test_a_stream_that_showed_the_round_already_keeps_its_reasoning_hidden() -> None:
    """Asking again would leave the response the client was shown without an end, so
    the round stands; the reasoning before the recall call stays hidden with it (shown,
    a client keeping its history sent it back without the item that followed it and
    was refused: helper-120's review)."""
    output = [_item("message", 0), _item("reasoning", 1), _item("recall", 2),
              _item("read", 3)]  # fmt: skip
    flt, shown = _streamed(output)
    assert not flt.tangled
    assert [i["id"] for i in shown] == ["msg_0", "fc_3"]


# -- after helper-99's review -----------------------------------------------------


def _reasoning(item_id: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id,
            "summary": [{"type": "summary_text", "text": "hm"}]}  # fmt: skip


def _call(item_id: str, name: str, call_id: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
async def test_a_round_that_showed_items_before_it_tangles_is_never_thrown_away(
    proxy: Proxy, stream: bool
) -> None:
    """Round 2 shows one of the client's calls, then tangles. A stream showed that call
    already: the round stands (the reasoning before its recall call stays hidden) and
    the client can answer what it saw; a whole answer shows nothing of it and asks again."""
    asked = _asked(proxy)
    recall = _recall(proxy)
    arguments = orjson.dumps(recall.arguments).decode()
    proxy.fake.script(
        Reply(text="Let me look.", tool_calls=[recall]),
        Reply(items=(_reasoning("rs_a"), _call("fc_a", "read", "call_read_a"),
                     _reasoning("rs_b"),
                     _call("fc_r", RECALL_TOOL_NAME, "call_recall_b", arguments),
                     _call("fc_b", "read", "call_read_b"))),
        Reply(text="Done."),
    )  # fmt: skip
    async with openai_client(proxy) as c:
        first = await respond(c, stream, input=asked, tools=TOOLS)
        calls = [i.call_id for i in first.output if i.type == "function_call"]
        if not stream:  # asked again: the third answer
            assert calls == [] and first.output_text == "Let me look.Done."
            return
        assert calls == ["call_read_a", "call_read_b"]
        answers = [{"type": "function_call_output", "call_id": c, "output": "x"} for c in calls]
        second = await respond(c, True, input=answers, tools=TOOLS, previous_response_id=first.id)
    assert second.output_text == "Done."  # the third answer: nothing was asked again
    assert len(proxy.fake.received) == 3


@pytest.mark.parametrize("stream", [False, True])
async def test_asking_again_stops_at_the_round_limit(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    """An upstream that tangles every round (it ignores ``parallel_tool_calls`` and
    ``tool_choice``) gets no more rounds than the limit allows."""
    async with make_proxy(max_recall_rounds=2) as proxy:
        proxy.fake.default = Reply(text="", reasoning="hm", tool_calls=[
            _recall(proxy), ToolCall("read", {"path": "a.py"})])  # fmt: skip
        async with openai_client(proxy) as c:
            first = await respond(c, stream, input=_asked(proxy), tools=TOOLS)
        assert len(proxy.fake.received) == 3  # the first round and two more
        assert [i.call_id for i in first.output if i.type == "function_call"] == ["call_3_1"]


async def test_a_null_parallel_tool_calls_is_echoed_as_the_api_echoes_it(proxy: Proxy) -> None:
    proxy.fake.script(
        Reply(text="", tool_calls=[_recall(proxy)], reasoning="hm"), Reply(text="Done.")
    )
    async with openai_client(proxy) as c:
        first = await respond(c, False, input=_asked(proxy), tools=TOOLS,
                              parallel_tool_calls=None)  # fmt: skip
    assert first.parallel_tool_calls is True
