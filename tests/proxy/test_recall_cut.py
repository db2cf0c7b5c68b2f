"""A recall answer says when the 5,000-line cap cut the range the model asked for, and
which lines to ask for next (the model took the cut range for the whole one)."""

from __future__ import annotations

import functools
from typing import Any

import openai
import pytest

import ctxwarden.engine as engine_module
from ctxwarden import Engine, EngineConfig
from ctxwarden.errors import StoreError
from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.recall import RecallCall, answer_call
from ctxwarden.store import MemoryStore
from ctxwarden.store.recall import recall
from tests.proxy.conftest import KEY_A, ProxyFactory


def _answer(lines: str | None, max_bytes: int = 10_000_000) -> str:
    store = MemoryStore()
    ref = store.put("t", "\n".join(f"line {i}" for i in range(1, 6001)))
    arguments = f'{{"ref": "{ref}"' + (f', "lines": "{lines}"' if lines else "") + "}"
    call = RecallCall("c1", arguments)
    answer = answer_call(functools.partial(recall, store), call, tenant="t", max_bytes=max_bytes)
    assert answer.ok
    return answer.text


def test_a_range_cut_by_the_line_cap_says_so() -> None:
    text = _answer("1-6000")
    *lines, note = text.split("\n")
    assert len(lines) == 5000 and lines[-1] == "line 5000"
    assert note == (
        "[ctxwarden_recall: cut at line 5,000 of 6,000 (5,000 lines at most); "
        "ask for lines 5001-6000]"
    )


def test_a_range_within_the_cap_and_a_whole_original_carry_no_note() -> None:
    assert _answer("10-20").split("\n") == [f"line {i}" for i in range(10, 21)]
    assert _answer(None).endswith("line 6000")


def test_the_byte_cap_note_still_wins() -> None:
    assert "truncated; 6000 lines in all" in _answer("1-6000", max_bytes=1_000)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_recall_while_the_store_cannot_open_is_answered_not_failed(
    make_proxy: ProxyFactory, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """The store opens on first use; while it cannot (a server down), a recall call gets
    'the store is unavailable' and the turn goes on (opening it escaped the answer's
    error handling: a 500 and the client's answer lost)."""

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("redis store failed to connect")

    monkeypatch.setattr(engine_module, "open_store", down)
    engine = Engine(EngineConfig(store={"backend": "memory"}))
    async with make_proxy(engine) as proxy:
        ref = "cw:0123456789ab"
        call = ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1")
        proxy.fake.script(Reply(text="", tool_calls=[call]), Reply(text="FINAL"))
        messages = [{"role": "user", "content": f"[condensed; original {ref}] sum it up"}]
        async with openai.AsyncOpenAI(api_key=KEY_A, base_url=proxy.openai_url, max_retries=0) as c:
            if stream:
                async with c.chat.completions.stream(model="gpt-4o", messages=messages) as s:
                    answer = await s.get_final_completion()
            else:
                answer = await c.chat.completions.create(model="gpt-4o", messages=messages)
        assert answer.choices[0].message.content == "FINAL"
        await proxy.state.drain()
        event = proxy.recorder.last(route="chat")
        assert event["status"] == 200 and event["recall_errors"] == 1
    engine.close()
