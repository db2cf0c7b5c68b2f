"""A streamed Anthropic answer that went through a recall round reports the last
round's input tokens, like the same answer not streamed (it kept the first round's,
from the message_start already sent: agents read it as their context size)."""

from __future__ import annotations

import re
from typing import Any

import anthropic

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from tests.proxy.conftest import KEY_A, Proxy

_BIG = "\n".join(f"tests/test_x.py::test_{i} PASSED" for i in range(300))


def _messages() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix"}]
    for t in range(8):
        use = {"type": "tool_use", "id": f"tu{t}", "name": "bash", "input": {}}
        result = {"type": "tool_result", "tool_use_id": f"tu{t}", "content": _BIG + f" run {t}"}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return messages


async def test_a_streamed_answer_reports_the_last_rounds_input_tokens(proxy: Proxy) -> None:
    tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {}}}]
    seen = {}
    async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as c:
        for stream in (False, True):
            session = {"x-ctxwarden-session": f"s{stream}"}
            kw: dict[str, Any] = dict(model="claude-opus-5", max_tokens=10, messages=_messages(),
                                      tools=tools, extra_headers=session)  # fmt: skip
            await c.messages.create(**kw)  # the outputs are condensed: references to recall
            ref = re.findall(r"cw:[0-9a-f]{12}", proxy.fake.received[-1].body.decode())[0]
            call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, call_id="rc")
            proxy.fake.script(
                Reply(text="", tool_calls=[call], prompt_tokens=1000),
                Reply(text="ok", prompt_tokens=7000),
            )
            if stream:
                async with c.messages.stream(**kw) as s:
                    message = await s.get_final_message()
            else:
                message = await c.messages.create(**kw)
            seen[stream] = message.usage.input_tokens
    assert seen == {False: 7000, True: 7000}


def test_a_null_in_the_final_delta_does_not_hide_the_last_rounds_figure() -> None:
    """Some gateways send unset usage fields as null: the last round's figure stays
    (a null merged over it left the client with the first round's count)."""
    from ctxwarden.proxy.sse import SSESplitter, encode_event
    from ctxwarden.proxy.stream_filters import MessagesFilter

    def events(*objs: dict[str, Any]) -> list[Any]:
        return SSESplitter().feed(b"".join(encode_event(o, o["type"]) for o in objs))

    usage = {"input_tokens": 7000, "cache_read_input_tokens": 10, "output_tokens": 1}
    start = {"type": "message_start", "message": {"usage": usage}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"input_tokens": None, "output_tokens": 5}}  # fmt: skip
    stream = MessagesFilter()
    stream.start_round()  # a continuation round, after one that called recall
    for event in events(start, delta, {"type": "message_stop"}):
        stream.process(event)
    (final, _stop) = SSESplitter().feed(b"".join(stream.finish()))
    assert final.json()["usage"] == {"input_tokens": 7000, "cache_read_input_tokens": 10,
                                     "output_tokens": 5}  # fmt: skip
