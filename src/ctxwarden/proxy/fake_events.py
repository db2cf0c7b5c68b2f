"""Response bodies and SSE event sequences of the fake upstream, per API.

They follow the providers' documented shapes closely enough for the official SDKs
(including their stream accumulators) to parse them: chat chunks ending in a
finish chunk, an optional usage chunk and ``[DONE]``; Responses events with
``sequence_number`` and ``output_index``; Messages' message_start ... message_stop,
a thinking block (``Reply.thinking``) first: its text in ``thinking_delta`` events,
then its signature in one ``signature_delta``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwarden.proxy.sse import encode_event

__all__ = ["BODIES", "EVENTS", "Answer"]


@dataclass(frozen=True, slots=True)
class Answer:
    """A reply resolved for one request: number ``n`` makes ids unique."""

    reply: Any  # fake_upstream.Reply (kept untyped to avoid an import cycle)
    request: dict[str, Any]
    n: int
    prompt_tokens: int
    signature: str = ""
    """The signature of the Messages thinking block (:mod:`.fake_thinking`)."""

    @property
    def model(self) -> str:
        return str(self.request.get("model") or "fake-model")

    def calls(self) -> list[tuple[str, str, str]]:
        """``(call_id, name, arguments JSON)`` per scripted tool call."""
        out = []
        for i, call in enumerate(self.reply.tool_calls):
            call_id = call.call_id or f"call_{self.n}_{i}"
            out.append((call_id, call.name, orjson.dumps(call.arguments).decode()))
        return out

    def words(self, text: str | None = None) -> list[str]:
        """The reply's text (or ``text``) in word-sized pieces."""
        text = self.reply.text if text is None else text
        parts = text.split(" ")
        return (
            [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)] if text else []
        )


def _chat_usage(a: Answer) -> dict[str, Any]:
    c = a.reply.completion_tokens
    return {"prompt_tokens": a.prompt_tokens, "completion_tokens": c,
            "total_tokens": a.prompt_tokens + c,
            "prompt_tokens_details": {"cached_tokens": a.reply.cached_tokens}}  # fmt: skip


def chat_body(a: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": a.reply.text or None,
                               "refusal": None}  # fmt: skip
    calls = a.calls()
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": args}}
            for i, n, args in calls
        ]
    choice = {"index": 0, "message": message, "logprobs": None,
              "finish_reason": "tool_calls" if calls else "stop"}  # fmt: skip
    return {"id": f"chatcmpl-fake{a.n}", "object": "chat.completion", "created": 1700000000,
            "model": a.model, "choices": [choice], "usage": _chat_usage(a)}  # fmt: skip


def chat_events(a: Answer) -> list[bytes]:
    base = {"id": f"chatcmpl-fake{a.n}", "object": "chat.completion.chunk",
            "created": 1700000000, "model": a.model}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return encode_event({**base, "choices": [choice]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in a.words()]
    calls = a.calls()
    for i, (call_id, name, args) in enumerate(calls):
        first = {"index": i, "id": call_id, "type": "function",
                 "function": {"name": name, "arguments": ""}}  # fmt: skip
        out.append(chunk({"tool_calls": [first]}))
        half = len(args) // 2
        for piece in (args[:half], args[half:]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if (a.request.get("stream_options") or {}).get("include_usage"):
        out.append(encode_event({**base, "choices": [], "usage": _chat_usage(a)}))
    out.append(b"data: [DONE]\n\n")
    return out


def _responses_items(a: Answer) -> list[dict[str, Any]]:
    if a.reply.items is not None:
        return [dict(item) for item in a.reply.items]
    items: list[dict[str, Any]] = []
    if a.reply.reasoning is not None:
        summary = [{"type": "summary_text", "text": a.reply.reasoning}]
        items.append({"type": "reasoning", "id": f"rs_{a.n}", "summary": summary})
    if a.reply.text:
        items.append({"type": "message", "id": f"msg_{a.n}", "status": "completed",
                      "role": "assistant", "content": [{"type": "output_text",
                      "text": a.reply.text, "annotations": [], "logprobs": []}]})  # fmt: skip
    for i, (call_id, name, args) in enumerate(a.calls()):
        items.append({"type": "function_call", "id": f"fc_{a.n}_{i}", "call_id": call_id,
                      "name": name, "arguments": args, "status": "completed"})  # fmt: skip
    return items


def responses_body(a: Answer, status: str = "completed", output: Any = None) -> dict[str, Any]:
    c = a.reply.completion_tokens
    usage = {"input_tokens": a.prompt_tokens,
             "input_tokens_details": {"cached_tokens": a.reply.cached_tokens},
             "output_tokens": c, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": a.prompt_tokens + c}  # fmt: skip
    return {"id": f"resp_fake{a.n}", "object": "response", "created_at": 1700000000,
            "status": status, "model": a.model, "error": None, "incomplete_details": None,
            "instructions": a.request.get("instructions"), "metadata": {},
            "output": _responses_items(a) if output is None else output,
            "parallel_tool_calls": a.request.get("parallel_tool_calls", True),
            "temperature": 1.0, "tool_choice": a.request.get("tool_choice", "auto"),
            "tools": a.request.get("tools", []), "top_p": 1.0,
            "usage": usage if status == "completed" else None}  # fmt: skip


def responses_events(a: Answer) -> list[bytes]:
    seq = iter(range(10**6))
    out: list[bytes] = []

    def ev(kind: str, **fields: Any) -> None:
        out.append(encode_event({"type": kind, "sequence_number": next(seq), **fields}, kind))

    ev("response.created", response=responses_body(a, "in_progress", []))
    ev("response.in_progress", response=responses_body(a, "in_progress", []))
    for index, item in enumerate(_responses_items(a)):
        if item["type"] == "message":
            ev("response.output_item.added", output_index=index,
               item={**item, "status": "in_progress", "content": []})  # fmt: skip
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            ev("response.content_part.added", **common, part=part)
            text = item["content"][0]["text"]
            for w in a.words(text):
                ev("response.output_text.delta", **common, delta=w, logprobs=[])
            ev("response.output_text.done", **common, text=text, logprobs=[])
            ev("response.content_part.done", **common, part=item["content"][0])
        elif item["type"] == "reasoning":
            ev("response.output_item.added", output_index=index, item={**item, "summary": []})
            common = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            ev("response.reasoning_summary_part.added", **common,
               part={"type": "summary_text", "text": ""})  # fmt: skip
            text = "".join(part.get("text", "") for part in item["summary"])
            for w in a.words(text):
                ev("response.reasoning_summary_text.delta", **common, delta=w)
            ev("response.reasoning_summary_text.done", **common, text=text)
            ev("response.reasoning_summary_part.done", **common,
               part={"type": "summary_text", "text": text})  # fmt: skip
        else:
            ev("response.output_item.added", output_index=index,
               item={**item, "status": "in_progress", "arguments": ""})  # fmt: skip
            common = {"item_id": item["id"], "output_index": index}
            ev("response.function_call_arguments.delta", **common, delta=item["arguments"])
            ev("response.function_call_arguments.done", **common, arguments=item["arguments"])
        ev("response.output_item.done", output_index=index, item=item)
    ev("response.completed", response=responses_body(a))
    return out


def _messages_usage(a: Answer, output: int) -> dict[str, Any]:
    return {"input_tokens": a.prompt_tokens, "output_tokens": output,
            "cache_read_input_tokens": a.reply.cached_tokens,
            "cache_creation_input_tokens": 0}  # fmt: skip


def _messages_content(a: Answer) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if a.reply.thinking is not None:
        blocks.append({"type": "thinking", "thinking": a.reply.thinking,
                       "signature": a.signature})  # fmt: skip
    if a.reply.text:
        blocks.append({"type": "text", "text": a.reply.text})
    for call_id, name, args in a.calls():
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": name, "input": orjson.loads(args)}
        )
    return blocks


def messages_body(a: Answer) -> dict[str, Any]:
    return {"id": f"msg_fake{a.n}", "type": "message", "role": "assistant", "model": a.model,
            "content": _messages_content(a),
            "stop_reason": "tool_use" if a.reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": _messages_usage(a, a.reply.completion_tokens)}  # fmt: skip


def messages_events(a: Answer) -> list[bytes]:
    out: list[bytes] = []

    def ev(kind: str, **fields: Any) -> None:
        out.append(encode_event({"type": kind, **fields}, kind))

    start = {**messages_body(a), "content": [], "stop_reason": None,
             "usage": _messages_usage(a, 1)}  # fmt: skip
    ev("message_start", message=start)
    ev("ping")
    for index, block in enumerate(_messages_content(a)):
        if block["type"] == "text":
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
            for w in a.words():
                ev("content_block_delta", index=index, delta={"type": "text_delta", "text": w})
        elif block["type"] == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            ev("content_block_start", index=index, content_block=empty)
            for w in a.words(block["thinking"]):
                delta = {"type": "thinking_delta", "thinking": w}
                ev("content_block_delta", index=index, delta=delta)
            delta = {"type": "signature_delta", "signature": block["signature"]}
            ev("content_block_delta", index=index, delta=delta)
        else:
            ev("content_block_start", index=index, content_block={**block, "input": {}})
            args = orjson.dumps(block["input"]).decode()
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                delta = {"type": "input_json_delta", "partial_json": piece}
                ev("content_block_delta", index=index, delta=delta)
        ev("content_block_stop", index=index)
    stop = "tool_use" if a.reply.tool_calls else "end_turn"
    ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
       usage={"output_tokens": a.reply.completion_tokens})  # fmt: skip
    ev("message_stop")
    return out


BODIES: dict[str, Callable[[Answer], dict[str, Any]]] = {
    "chat": chat_body,
    "responses": responses_body,
    "messages": messages_body,
}
EVENTS: dict[str, Callable[[Answer], list[bytes]]] = {
    "chat": chat_events,
    "responses": responses_events,
    "messages": messages_events,
}
