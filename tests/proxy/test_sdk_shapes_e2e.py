"""The newer request shapes, end to end: the real SDKs, the proxy, the fake upstream.

Long agent histories (32 turns of large tool output, so the engine really condenses)
built from the request types of openai 3.57 and anthropic 2.14, sent with the SDK
clients through a live proxy:

- Responses: built-in ``shell_call`` / ``shell_call_output`` (stdout and stderr chunks)
  and ``apply_patch_call`` / ``apply_patch_call_output`` items, reasoning items with
  ``encrypted_content``, an untyped item reference (``{"id": ...}``, the SDK's
  ``ItemReference``) to a call stored upstream, continued with ``previous_response_id``;
  streamed and not;
- Chat Completions: ``custom`` tool calls (``custom.input``) and tool messages whose
  content is an array of text parts;
- Messages (the beta client, which types them): ``tool_result`` content arrays (text,
  image, ``search_result``), files written through a ``tool_use`` ``input`` object,
  thinking blocks with signatures, ``server_tool_use`` and ``web_search_tool_result``
  blocks in assistant messages, ``system`` messages in
  ``messages``, one with ``output_config`` and no content, and the client's cache
  breakpoints.

In active mode the client gets a 200 and the fake's answer intact, and what reached
the upstream (the proxy's recall tool and cache breakpoints taken off) is smaller than
what the SDK sent, differs from it only in text leaves (every id, ``call_id``,
``tool_use_id``, signature and ``encrypted_content`` kept, every item in its place),
keeps the first message and the messages after the last assistant message byte for
byte, and every ``cw:`` reference in it recalls from the tenant's store, each rewritten
text's original among them. On the next turn the model calls the recall tool on one of
them and gets that original through the proxy's recall path. In shadow mode the
upstream receives the SDK's bytes exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from ctxwarden.proxy import RECALL_TOOL_NAME, Received, Reply, ToolCall
from ctxwarden.proxy.fake_events import BODIES, Answer
from ctxwarden.store.base import REF_PATTERN
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory
from tests.wire_diff import changed_texts, value_at

TEXT = "Hello from the fake upstream."
FINAL = "Read it again, all good."
TASK = "The tests in tests/ fail; find out why and fix src/."
SYSTEM = "You are a coding agent. Use the tools."
TURNS = 32

SIG = "EqQBCkgIARABGAIiQ" + "s" * 60
ENC = "gAAAAABo" + "Z" * 200
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"

Item = dict[str, Any]
Path = tuple[Any, ...]

CONTROL_KEYS = frozenset(
    {"id", "call_id", "tool_use_id", "tool_call_id", "signature", "encrypted_content",
     "type", "name", "role", "status", "path", "data", "cache_control"}
)  # fmt: skip
"""Keys whose values the proxy must never change (ids, pairing, signatures, kinds)."""


def _lines(tag: str, n: int = 120) -> str:
    """``n`` distinct lines: enough tokens that a condensing pass takes them."""
    return "\n".join(
        f"{tag} line {i}: checked src/{tag}/mod_{i}.py value={i * 7} ok" for i in range(n)
    )


def _diff(k: int) -> str:
    return "\n".join(f"+    value_{k}_{i} = compute({i})" for i in range(60))


def _wire(value: Any) -> bytes:
    """``value`` as the SDKs write JSON (compact, non-ASCII kept), as the proxy does."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


# -- the SDK clients, and what they sent and got -----------------------------------------


class Wire:
    """What the SDK's HTTP client sent and, for JSON answers, got (httpx2 hooks)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.answers: list[Any] = []

    async def _request(self, request: httpx2.Request) -> None:
        self.sent.append(request.content)

    async def _response(self, response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").startswith("application/json"):
            self.answers.append(json.loads(await response.aread()))
        else:
            self.answers.append(None)

    def http(self) -> httpx2.AsyncClient:
        hooks = {"request": [self._request], "response": [self._response]}
        return httpx2.AsyncClient(event_hooks=hooks)  # type: ignore[arg-type]


def _openai(proxy: Proxy, wire: Wire) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key=KEY_A, base_url=proxy.openai_url, max_retries=0, http_client=wire.http()
    )


def _anthropic(proxy: Proxy, wire: Wire) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=KEY_A, base_url=proxy.url, max_retries=0, http_client=wire.http()
    )


# -- OpenAI Responses -------------------------------------------------------------------


def _shell_pair(k: int) -> list[Item]:
    call_id = f"call_sh_{k}"
    return [
        {
            "type": "shell_call",
            "id": f"sh_{k}",
            "call_id": call_id,
            "action": {"commands": [f"pytest -q tests/test_m{k}.py"], "timeout_ms": 60000},
            "caller": {"type": "direct"},
            "environment": {"type": "local"},
            "status": "completed",
        },
        {
            "type": "shell_call_output",
            "call_id": call_id,
            "max_output_length": 100000,
            "output": [
                {
                    "stdout": _lines(f"sh{k}"),
                    "stderr": _lines(f"err{k}", 60),
                    "outcome": {"type": "exit", "exit_code": 1},
                },
                {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
            ],
        },
    ]


def _patch_pair(k: int) -> list[Item]:
    call_id = f"call_ap_{k}"
    return [
        {
            "type": "apply_patch_call",
            "id": f"ap_{k}",
            "call_id": call_id,
            "status": "completed",
            "operation": {"type": "update_file", "path": f"src/pkg/mod_{k}.py", "diff": _diff(k)},
        },
        {
            "type": "apply_patch_call_output",
            "id": f"apo_{k}",
            "call_id": call_id,
            "status": "completed",
            "output": _lines(f"ap{k}"),
        },
    ]


def _reasoning(k: int) -> Item:
    return {
        "type": "reasoning",
        "id": f"rs_{k}",
        "summary": [{"type": "summary_text", "text": _lines(f"sum{k}", 40)}],
        "content": [{"type": "reasoning_text", "text": _lines(f"raw{k}", 40)}],
        "encrypted_content": f"{ENC}{k}",
    }


def _responses_history(reference: str, call_id: str) -> tuple[list[Item], int]:
    """A long Responses input and where its newest part (after the last item the model
    produced) starts. It opens on an untyped reference to the call ``reference`` stored
    upstream (as ``call_id``) and that call's output."""
    items: list[Item] = [
        {"role": "user", "content": TASK},
        {"id": reference},
        {"type": "function_call_output", "call_id": call_id, "output": _lines("up")},
    ]
    for k in range(TURNS):
        items.append(_reasoning(k))
        if k % 3 == 0:
            items += _shell_pair(k)
        elif k % 3 == 1:
            items += _patch_pair(k)
        else:
            items += [
                {"type": "function_call", "id": f"fc_{k}", "call_id": f"call_fn_{k}",
                 "name": "read_file", "arguments": json.dumps({"path": f"src/f{k}.py"})},
                {"type": "function_call_output", "call_id": f"call_fn_{k}",
                 "output": _lines(f"fn{k}")},
            ]  # fmt: skip
    items.append(
        {
            "type": "message",
            "id": "msg_note",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Two more checks.", "annotations": []}],
        }
    )
    shell_call, shell_output = _shell_pair(TURNS)
    patch_call, patch_output = _patch_pair(TURNS + 1)
    items += [_reasoning(TURNS), shell_call, patch_call]
    return [*items, shell_output, patch_output], len(items)


RESPONSES_TOOLS: Any = [
    {"type": "shell", "environment": {"type": "local"}},
    {"type": "apply_patch"},
    {"type": "function", "name": "read_file", "parameters": {"type": "object"}, "strict": False},
]


async def _respond(client: openai.AsyncOpenAI, stream: bool, **kwargs: Any) -> Any:
    kwargs = {"model": "gpt-5", "instructions": SYSTEM, "tools": RESPONSES_TOOLS, **kwargs}
    if not stream:
        return await client.responses.create(**kwargs)
    async with client.responses.stream(**kwargs) as s:
        return await s.get_final_response()


# -- OpenAI Chat Completions ------------------------------------------------------------


def _custom_call(k: int) -> Item:
    text = f"*** Begin Patch\n*** Update File: src/pkg/mod_{k}.py\n{_diff(k)}\n*** End Patch"
    return {"id": f"call_cu_{k}", "type": "custom",
            "custom": {"name": "apply_patch", "input": text}}  # fmt: skip


def _function_call(k: int) -> Item:
    arguments = json.dumps({"command": f"pytest -q tests/test_m{k}.py", "stdin": _diff(k)})
    return {"id": f"call_fn_{k}", "type": "function",
            "function": {"name": "bash", "arguments": arguments}}  # fmt: skip


def _text_parts(k: int) -> list[Item]:
    return [
        {"type": "text", "text": _lines(f"out{k}a", 70)},
        {"type": "text", "text": _lines(f"out{k}b", 70)},
    ]


def _chat_history() -> tuple[list[Item], int]:
    messages: list[Item] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": TASK},
    ]
    for k in range(TURNS):
        call = _custom_call(k) if k % 2 == 0 else _function_call(k)
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": _text_parts(k)},
        ]
    messages.append(
        {
            "role": "assistant",
            "content": "Both at once now.",
            "tool_calls": [_custom_call(TURNS), _function_call(TURNS + 1)],
        }
    )
    newest = len(messages)
    messages += [
        {"role": "tool", "tool_call_id": f"call_cu_{TURNS}", "content": _text_parts(TURNS)},
        {"role": "tool", "tool_call_id": f"call_fn_{TURNS + 1}",
         "content": _text_parts(TURNS + 1)},
    ]  # fmt: skip
    return messages, newest


CHAT_TOOLS: Any = [
    {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch.",
                                  "format": {"type": "text"}}},
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
]  # fmt: skip


CHAT_MODEL = "gpt-4.1"
"""A model whose window the history leaves room in: a step the cost model takes runs
every pass (a step the hard band forces stops once it saved enough, which masking
alone does here, and the calls' arguments would stay as they are)."""


async def _chat(client: openai.AsyncOpenAI, stream: bool, messages: Any) -> Any:
    if not stream:
        return await client.chat.completions.create(
            model=CHAT_MODEL, messages=messages, tools=CHAT_TOOLS
        )
    async with client.chat.completions.stream(
        model=CHAT_MODEL, messages=messages, tools=CHAT_TOOLS
    ) as s:
        return await s.get_final_completion()


# -- Anthropic Messages -----------------------------------------------------------------


def _thinking(k: int) -> Item:
    return {"type": "thinking", "thinking": _lines(f"think{k}", 60), "signature": f"{SIG}{k}"}


def _tool_use(k: int) -> Item:
    if k % 8 == 3:  # a file written through the call's input object (Claude Code's Write)
        content = "\n".join(f"def f{k}_{i}(x):\n    return x + {i}" for i in range(40))
        written = {"file_path": f"src/m{k}.py", "content": content, "mode": 420}
        return {"type": "tool_use", "id": f"toolu_{k}", "name": "write", "input": written}
    return {"type": "tool_use", "id": f"toolu_{k}", "name": "bash",
            "input": {"command": f"pytest -q tests/test_m{k}.py"}}  # fmt: skip


def _tool_result(k: int) -> Item:
    return {
        "type": "tool_result",
        "tool_use_id": f"toolu_{k}",
        "content": [
            {"type": "text", "text": _lines(f"tr{k}")},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "search_result", "source": f"https://kb.example.com/{k}", "title": f"KB {k}",
             "content": [{"type": "text", "text": _lines(f"kb{k}", 30)}],
             "citations": {"enabled": True}},
        ],
    }  # fmt: skip


def _web_search(k: int) -> list[Item]:
    return [
        {"type": "server_tool_use", "id": f"srvtoolu_{k}", "name": "web_search",
         "input": {"query": f"pytest failure {k}"}},
        {"type": "web_search_tool_result", "tool_use_id": f"srvtoolu_{k}",
         "content": [{"type": "web_search_result", "url": f"https://docs.example.com/{k}",
                      "title": f"Docs {k}", "encrypted_content": f"{ENC}{k}",
                      "page_age": "1 day"}]},
    ]  # fmt: skip


CACHE = {"type": "ephemeral"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy" + "r" * 80}


def _anthropic_history() -> tuple[list[Item], int]:
    messages: list[Item] = [{"role": "user", "content": TASK}]
    for k in range(TURNS):
        blocks = [_thinking(k), REDACTED, *(_web_search(k) if k % 4 == 0 else []),
                  {"type": "text", "text": f"Running test {k}."}, _tool_use(k)]  # fmt: skip
        messages += [
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [_tool_result(k)]},
        ]
        if k == 10:
            messages.append({"role": "system", "content": "From now on, be terse."})
        if k == 20:
            messages.append(
                {
                    "role": "system",
                    "clear_at": "next_user_message",
                    "output_config": {"effort": "low"},
                }
            )
    messages.append(
        {
            "role": "assistant",
            "content": [
                _thinking(TURNS),
                *_web_search(TURNS),
                _tool_use(TURNS),
                _tool_use(TURNS + 1),
            ],
        }
    )
    newest = len(messages)
    messages += [
        {"role": "user",
         "content": [_tool_result(TURNS), {**_tool_result(TURNS + 1), "cache_control": CACHE}]},
        {"role": "system", "output_config": {"effort": "high"}},  # no content: valid
    ]  # fmt: skip
    return messages, newest


ANTHROPIC_TOOLS: Any = [
    {"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]
ANTHROPIC_SYSTEM: Any = [{"type": "text", "text": SYSTEM, "cache_control": CACHE}]


NOT_BINDING = "claude-opus-5"
"""A model that does not bind its thinking blocks to their prefix (the registry's
``binds_thinking``): what precedes them may be condensed."""


async def _message(
    client: anthropic.AsyncAnthropic, stream: bool, messages: list[Item],
    model: str = NOT_BINDING, thinking: bool = False,
) -> Any:  # fmt: skip
    """A Messages call; ``thinking``: the request asks for it (the proxy then offers no
    recall tool, whose rounds it would splice into one signed assistant turn)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "max_tokens": 4096,
        "system": ANTHROPIC_SYSTEM,
        "messages": messages,
        "tools": ANTHROPIC_TOOLS,
    }
    if thinking:
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    if not stream:
        return await client.beta.messages.create(**kwargs)
    async with client.beta.messages.stream(**kwargs) as s:
        return await s.get_final_message()


# -- checks -----------------------------------------------------------------------------


def _control(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every control-plane value with its path, in document order."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in CONTROL_KEYS and not isinstance(v, list):
                yield (*path, k), v
            yield from _control(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _control(v, (*path, i))


def _is_recall_tool(tool: Any) -> bool:
    spec = tool.get("function", tool) if isinstance(tool, dict) else {}
    return isinstance(spec, dict) and spec.get("name") == RECALL_TOOL_NAME


def _without_recall_tool(got: dict[str, Any]) -> dict[str, Any]:
    """``got`` without the recall tool the proxy appends at the end of ``tools``."""
    tools = got.get("tools")
    assert isinstance(tools, list) and tools and _is_recall_tool(tools[-1]), "no recall tool"
    assert not any(_is_recall_tool(t) for t in tools[:-1])
    return {**got, "tools": tools[:-1]}


def _without_added_breakpoints(sent: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    """``got`` without the cache breakpoints the proxy adds for a client that caches (a
    copy of the client's marker on the last block of a message, at most two, at most
    Anthropic's four in all)."""
    if "max_tokens" not in sent:  # not Anthropic
        return got
    out: dict[str, Any] = json.loads(_wire(got))
    added = 0
    for old, new in zip(sent["messages"], out["messages"], strict=True):
        old_blocks, new_blocks = old.get("content"), new.get("content")
        if not isinstance(old_blocks, list) or not isinstance(new_blocks, list):
            continue
        for a, b in zip(old_blocks, new_blocks, strict=True):
            if "cache_control" in b and "cache_control" not in a:
                assert b is new_blocks[-1], "a breakpoint off a message's last block"
                assert b.pop("cache_control") == CACHE
                added += 1
    assert added <= 2
    assert _wire(got).count(b'"cache_control"') <= 4
    return out


def _recall(proxy: Proxy, ref: str) -> str:
    return proxy.engine.recall(ref, tenant=proxy.tenant(KEY_A))


async def _event(proxy: Proxy, exchanges: int) -> dict[str, Any]:
    """The event of the ``exchanges``-th exchange (it is emitted as its relay ends)."""
    for _ in range(500):
        if len(proxy.recorder.events) >= exchanges:
            return proxy.recorder.events[exchanges - 1]
        await asyncio.sleep(0.01)
    raise AssertionError("the request's event was never emitted")


def _fake_answer(proxy: Proxy, api: str) -> dict[str, Any]:
    """The fake's JSON answer to the newest request it got, as the client sees it (a
    Responses answer echoes the request's tools: without the proxy's recall tool)."""
    received = proxy.fake.received[-1]
    body = BODIES[api](
        Answer(Reply(), received.json(), len(proxy.fake.received), max(1, len(received.body) // 4))
    )
    if api == "responses":
        body["tools"] = [t for t in body["tools"] if not _is_recall_tool(t)]
    return body


async def check_condensed(
    proxy: Proxy, raw: bytes, received: Received, key: str, newest: int, kept: tuple[str, ...]
) -> tuple[dict[str, Any], list[Path]]:
    """The checks of an active request whose history is condensed (``raw``: the SDK's
    body; ``received``: what the upstream got for it; ``key``: its history; ``newest``:
    where its messages after the last assistant message start; ``kept``: top-level keys
    that must arrive as sent). What the upstream got, and the paths of the texts the
    proxy rewrote."""
    assert len(received.body) < len(raw), "nothing was condensed"
    sent = json.loads(raw)
    got = _without_added_breakpoints(sent, _without_recall_tool(received.json()))
    assert list(got) == list(sent)
    for name in kept:
        assert got[name] == sent[name], name
    # only text leaves change: ids, pairing, signatures, kinds, item order all kept
    edits = [path for path, _, _ in changed_texts(sent, got)]
    assert edits, "no text was condensed"
    assert list(_control(got)) == list(_control(sent))
    for path in edits:
        assert path[0] == key and isinstance(path[1], int), path
        assert path[-1] not in CONTROL_KEYS, path
        assert 0 < path[1] < newest, f"{path}: a protected message changed"
        if path[-1] == "arguments":  # function arguments stay JSON
            json.loads(value_at(got, path))
    # the first message and everything after the last assistant message: byte for byte
    for item in [sent[key][0], *sent[key][newest:]]:
        assert _wire(item) in received.body
    # every reference recalls from the tenant's store, and each rewritten text names
    # one that recalls its original
    recalled = {ref: _recall(proxy, ref) for ref in set(REF_PATTERN.findall(_wire(got).decode()))}
    for path in edits:
        named = REF_PATTERN.findall(value_at(got, path))
        if not named and value_at(got, path).startswith("[ctxwarden: part "):
            # a later block of an output masked as one: its first block names the output
            named = REF_PATTERN.findall(_wire(got[key][path[1]]).decode())
        assert named, f"{path}: rewritten without a reference"
        assert _recalls(value_at(sent, path), [recalled[ref] for ref in named]), path
    return got, edits


def _recalls(old: str, originals: list[str]) -> bool:
    """Whether ``old`` is one of ``originals``, part of one (a block of an output of
    several, recalled as a whole) or a string value inside one that is a JSON object (a
    Messages call's ``input``, recalled as a whole)."""
    if any(old in o for o in originals):
        return True
    objects = [json.loads(o) for o in originals if o.startswith("{")]
    return any(old in o.values() for o in objects)


async def check_event(proxy: Proxy, exchange: int, mode: str = "active") -> None:
    """The telemetry of the ``exchange``-th request: condensed, and not sent so in
    shadow mode."""
    event = await _event(proxy, exchange)
    assert (event["mode"], event["status"], event["fallback_reason"]) == (mode, 200, None)
    assert event["tokens_after"] < event["tokens_before"]


def _script_recall(proxy: Proxy, got: dict[str, Any], path: Path) -> str:
    """The fake's next answer calls the recall tool on the reference the text at
    ``path`` names, then answers :data:`FINAL`; that reference."""
    ref: str
    (ref,) = REF_PATTERN.findall(value_at(got, path))
    proxy.fake.script(
        Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, {"ref": ref}, "call_recall_1")]),
        Reply(text=FINAL),
    )
    return ref


def _recall_answer(api: str, body: dict[str, Any]) -> Any:
    """The answer to ``call_recall_1`` in a continuation the proxy sent."""
    if api == "chat":
        answers = [m for m in body["messages"] if m.get("tool_call_id") == "call_recall_1"]
        return answers[0]["content"]
    if api == "responses":
        outputs = [i for i in body["input"] if i.get("call_id") == "call_recall_1"]
        assert [i["type"] for i in outputs] == ["function_call", "function_call_output"]
        return outputs[1]["output"]
    (result,) = body["messages"][-1]["content"]
    assert result["tool_use_id"] == "call_recall_1"
    return result["content"]


def _edited(edits: list[Path], *tail: str) -> Path:
    """The first edit whose path's keys (its indexes left out) end in ``tail``."""
    found = [p for p in edits if tuple(k for k in p if isinstance(k, str))[-len(tail) :] == tail]
    assert found, f"no text at {tail} was condensed"
    return found[0]


# -- tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_responses_builtin_tools_reasoning_and_item_reference(
    proxy: Proxy, stream: bool
) -> None:
    wire = Wire()
    kept = ("instructions", "previous_response_id", "tools")
    async with _openai(proxy, wire) as client:
        read = ToolCall("read_file", {"path": "tests/conftest.py"}, "call_up")
        proxy.fake.script(Reply(text="", tool_calls=[read]))
        first = await _respond(client, stream, input=TASK)
        (call,) = first.output
        assert (call.type, call.call_id) == ("function_call", "call_up")
        # a long history continuing it: the untyped reference holds the call upstream
        items, newest = _responses_history(call.id, call.call_id)
        response = await _respond(client, stream, input=items, previous_response_id=first.id)
        assert response.output_text == TEXT and response.id == "resp_fake2"
        answer = _fake_answer(proxy, "responses")  # for what the upstream got
        assert response.usage.input_tokens == answer["usage"]["input_tokens"]
        if not stream:
            assert wire.answers[-1] == answer
        assert json.loads(wire.sent[-1])["input"] == items
        received = proxy.fake.received[-1]
        got, edits = await check_condensed(proxy, wire.sent[-1], received, "input", newest, kept)
        await check_event(proxy, 2)
        assert got["input"][1] == {"id": call.id}  # the untyped reference, as sent
        kinds = {(got["input"][p[1]]["type"], p[-1]) for p in edits}
        assert {("shell_call_output", "stdout"), ("apply_patch_call_output", "output"),
                ("apply_patch_call", "diff")} <= kinds  # fmt: skip
        # the next turn: the model recalls a shell output through the proxy
        path = _edited(edits, "stdout")
        ref = _script_recall(proxy, got, path)
        following = [*items, {"role": "user", "content": "Go on."}]
        again = await _respond(client, stream, input=following, previous_response_id=response.id)
    assert again.output_text == FINAL
    assert [item.type for item in again.output] == ["message"]
    recall_round, answered = proxy.fake.received[-2:]
    await check_condensed(proxy, wire.sent[-1], recall_round, "input", newest, kept)
    await check_event(proxy, 3)
    assert answered.json()["previous_response_id"] == "resp_fake2"
    original = value_at(json.loads(wire.sent[1]), path)  # with its stderr, one output
    recalled = _recall(proxy, ref)
    assert _recall_answer("responses", answered.json()) == recalled
    assert recalled.startswith(original + "\n")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_chat_custom_tool_calls_and_tool_text_parts(proxy: Proxy, stream: bool) -> None:
    wire = Wire()
    messages, newest = _chat_history()
    async with _openai(proxy, wire) as client:
        completion = await _chat(client, stream, messages)
        assert completion.choices[0].message.content == TEXT
        if not stream:
            assert wire.answers[-1] == _fake_answer(proxy, "chat")  # for what the upstream got
        assert json.loads(wire.sent[-1])["messages"] == messages
        received = proxy.fake.received[-1]
        got, edits = await check_condensed(
            proxy, wire.sent[-1], received, "messages", newest, ("tools",)
        )
        await check_event(proxy, 1)
        _edited(edits, "content", "text")  # a tool message's text part
        _edited(edits, "function", "arguments")  # still JSON (check_condensed)
        # the next turn: the model recalls a custom tool call's input through the proxy
        path = _edited(edits, "custom", "input")
        _script_recall(proxy, got, path)
        following = [*messages, {"role": "assistant", "content": TEXT},
                     {"role": "user", "content": "Go on."}]  # fmt: skip
        again = await _chat(client, stream, following)
    assert again.choices[0].message.content == FINAL
    assert not again.choices[0].message.tool_calls
    recall_round, answered = proxy.fake.received[-2:]
    await check_condensed(proxy, wire.sent[-1], recall_round, "messages", newest + 3, ("tools",))
    await check_event(proxy, 2)
    assert _recall_answer("chat", answered.json()) == value_at(json.loads(wire.sent[0]), path)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_anthropic_result_arrays_thinking_server_tools_and_system_messages(
    proxy: Proxy, stream: bool
) -> None:
    wire = Wire()
    messages, newest = _anthropic_history()
    kept = ("system", "tools", "max_tokens")
    async with _anthropic(proxy, wire) as client:
        message = await _message(client, stream, messages)
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == TEXT
        answer = _fake_answer(proxy, "messages")  # for what the upstream got
        assert message.usage.input_tokens == answer["usage"]["input_tokens"]
        if not stream:
            assert wire.answers[-1] == answer
        assert proxy.fake.received[-1].path == "/v1/messages"
        assert json.loads(wire.sent[-1])["messages"] == messages
        received = proxy.fake.received[-1]
        got, edits = await check_condensed(proxy, wire.sent[-1], received, "messages", newest, kept)
        await check_event(proxy, 1)
        # an old call's written file condensed inside its input, which stays an object
        written = _edited(edits, "input", "content")
        assert got["messages"][written[1]]["content"][written[3]]["input"]["mode"] == 420
        # the next turn: the model recalls a tool result's text through the proxy
        path = _edited(edits, "content", "text")
        _script_recall(proxy, got, path)
        following = [*messages, {"role": "assistant", "content": TEXT},
                     {"role": "user", "content": "Go on."}]  # fmt: skip
        again = await _message(client, stream, following)
    assert [b.type for b in again.content] == ["text"] and again.content[0].text == FINAL
    recall_round, answered = proxy.fake.received[-2:]
    await check_condensed(proxy, wire.sent[-1], recall_round, "messages", newest + 3, kept)
    await check_event(proxy, 2)
    assert _recall_answer("messages", answered.json()) == value_at(json.loads(wire.sent[0]), path)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_thinking_bound_to_its_prefix_is_sent_after_what_it_was_produced_for(
    proxy: Proxy, stream: bool
) -> None:
    # a model that binds thinking blocks to their prefix refuses one whose prefix
    # changed: nothing before the newest signed block is rewritten (here: everything
    # the proxy could condense), and a request asking for thinking gets no recall tool
    wire = Wire()
    messages, _ = _anthropic_history()
    async with _anthropic(proxy, wire) as client:
        message = await _message(client, stream, messages, "claude-fable-5-1", thinking=True)
    assert message.content[0].text == TEXT
    sent, got = json.loads(wire.sent[-1]), proxy.fake.received[-1].json()
    assert _without_added_breakpoints(sent, got) == sent
    assert sent["messages"] == messages and sent["thinking"]["type"] == "enabled"
    event = proxy.recorder.last(route="messages")
    assert event["status"] == 200 and not event.get("fallbacks")


@pytest.mark.parametrize("api", ["responses", "chat", "messages"])
async def test_shadow_mode_sends_the_sdks_bytes(make_proxy: ProxyFactory, api: str) -> None:
    wire = Wire()
    async with make_proxy(mode="shadow") as proxy:
        if api == "responses":
            items, _ = _responses_history("fc_upstream", "call_upstream")
            async with _openai(proxy, wire) as client:
                response = await _respond(
                    client, True, input=items, previous_response_id="resp_upstream"
                )
            assert response.output_text == TEXT
        elif api == "chat":
            messages, _ = _chat_history()
            async with _openai(proxy, wire) as client:
                completion = await _chat(client, True, messages)
            assert completion.choices[0].message.content == TEXT
        else:
            messages, _ = _anthropic_history()
            async with _anthropic(proxy, wire) as client:
                message = await _message(client, True, messages)
            assert message.content[0].text == TEXT
        assert [r.body for r in proxy.fake.received] == wire.sent
        await proxy.state.drain()
        await check_event(proxy, 1, mode="shadow")  # condensed beside it, not sent so
        assert len(proxy.recorder.events) == 1
