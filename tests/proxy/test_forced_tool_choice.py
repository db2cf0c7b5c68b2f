"""A client that forces a tool call keeps its contract through the recall rounds.

With ``tool_choice: "required"`` (Chat, Responses) or ``{"type": "any"}`` (Messages)
the model must call some tool, and may pick the recall tool every round. The last
round the limit allows is therefore sent without it (the client's choice kept), so
the model calls one of the client's own tools: the client never gets an answer with
neither content nor a call of its own. The fake "model" here reads what it is offered,
as a real one does: forced, it calls recall whenever recall is offered.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from ctxwarden.proxy import RECALL_TOOL_NAME, Reply, ToolCall
from ctxwarden.proxy.dialects import DIALECTS, choice_kind
from ctxwarden.proxy.handlers import _offers_recall
from tests.proxy.conftest import KEY_A, Proxy, ProxyFactory, openai_client, respond

ORIGINAL = "line 1\nline 2 secret-alpha\nline 3 secret-beta\nline 4"
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
]
RESPONSES_TOOLS: Any = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
MESSAGES_TOOLS: Any = [{"name": "read", "input_schema": {"type": "object"}}]


def _offered(body: dict[str, Any]) -> list[str]:
    """The names of the tools a request offers (any of the three APIs)."""
    names = []
    for tool in body.get("tools") or []:
        fn = tool.get("function")
        names.append(fn["name"] if isinstance(fn, dict) else tool.get("name"))
    return names


def _model(ref: str) -> Any:
    """A model made to call a tool that always prefers the recall tool when offered;
    otherwise it calls the tool its choice names, or the first tool offered."""

    def respond(body: Any) -> Reply:
        offered = _offered(body)
        kind = choice_kind(body.get("tool_choice"))
        if kind in ("auto", "none"):
            return Reply(text="an answer")
        if kind == "any" and RECALL_TOOL_NAME in offered:
            return Reply(text="", tool_calls=[ToolCall(RECALL_TOOL_NAME, {"ref": ref})])
        choice = body["tool_choice"]
        named = choice.get("name") if isinstance(choice, dict) else None
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            named = choice["function"]["name"]
        name = named or offered[0]
        assert name in offered, f"{name} called but not offered"
        return Reply(text="", tool_calls=[ToolCall(name, {"path": "a.py"}, "call_own")])

    return respond


def _prompt(ref: str) -> str:
    return f"[output elided by ctxwarden: 4 lines; recall {ref}] read a.py"


async def _forced(proxy: Proxy, api: str, stream: bool, **extra: Any) -> list[str]:
    """One forced request through the proxy; the names of the client's tools called in
    the answer it got."""
    ref = proxy.engine.store.put(proxy.tenant(KEY_A), ORIGINAL)
    proxy.fake.default = _model(ref)
    if api == "anthropic.messages":
        messages: Any = [{"role": "user", "content": _prompt(ref)}]
        kwargs: Any = {
            "model": "claude-opus-5", "max_tokens": 64, "messages": messages,
            "tools": MESSAGES_TOOLS, "tool_choice": {"type": "any"}, **extra,
        }  # fmt: skip
        async with anthropic.AsyncAnthropic(api_key=KEY_A, base_url=proxy.url, max_retries=0) as c:
            if stream:
                async with c.messages.stream(**kwargs) as s:
                    message = await s.get_final_message()
            else:
                message = await c.messages.create(**kwargs)
        assert message.stop_reason == "tool_use"
        return [b.name for b in message.content if b.type == "tool_use"]
    async with openai_client(proxy) as c:
        if api == "openai.responses":
            response = await respond(
                c, stream, input=_prompt(ref), tools=RESPONSES_TOOLS, tool_choice="required",
                **extra,
            )  # fmt: skip
            assert [t.name for t in response.tools] == ["read"]  # type: ignore[union-attr]
            assert response.tool_choice == "required"
            return [i.name for i in response.output if i.type == "function_call"]
        kwargs = {"model": "gpt-4o", "messages": [{"role": "user", "content": _prompt(ref)}],
                  "tools": CHAT_TOOLS, "tool_choice": "required", **extra}  # fmt: skip
        if stream:
            async with c.chat.completions.stream(**kwargs) as s:
                choice = (await s.get_final_completion()).choices[0]
        else:
            choice = (await c.chat.completions.create(**kwargs)).choices[0]
        assert choice.finish_reason == "tool_calls"
        return [call.function.name for call in choice.message.tool_calls or []]  # type: ignore[union-attr]


_ROUTES = {"openai.chat": "chat", "openai.responses": "responses", "anthropic.messages": "messages"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", list(_ROUTES))
async def test_a_forced_choice_ends_with_a_call_of_the_clients_own_tool(
    make_proxy: ProxyFactory, api: str, stream: bool
) -> None:
    async with make_proxy(max_recall_rounds=2) as proxy:
        called = await _forced(proxy, api, stream)
        assert called == ["read"]
        sent = [r.json() for r in proxy.fake.received]
        assert len(sent) == 3  # the first round and two continuations
        # recall offered while the limit allows another round; the last goes without it
        assert [_offered(b) for b in sent] == [["read", RECALL_TOOL_NAME]] * 2 + [["read"]]
        # the client's forced choice is kept in every round
        wanted = {"type": "any"} if api == "anthropic.messages" else "required"
        assert [b["tool_choice"] for b in sent] == [wanted] * 3
        event = proxy.recorder.last(route=_ROUTES[api])
        assert event["recall_rounds"] == 2 and event["recall_calls"] == 2


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", ["openai.chat", "anthropic.messages"])
async def test_a_forced_single_call_keeps_its_parallel_setting(
    make_proxy: ProxyFactory, api: str, stream: bool
) -> None:
    async with make_proxy(max_recall_rounds=1) as proxy:
        if api == "openai.chat":
            extra: Any = {"parallel_tool_calls": False}
        else:
            extra = {"tool_choice": {"type": "any", "disable_parallel_tool_use": True}}
        assert await _forced(proxy, api, stream, **extra) == ["read"]
        sent = [r.json() for r in proxy.fake.received]
        assert [_offered(b) for b in sent] == [["read", RECALL_TOOL_NAME], ["read"]]
        for body in sent:
            assert all(body[key] == value for key, value in extra.items())


@pytest.mark.parametrize("stream", [False, True])
async def test_a_choice_naming_a_client_tool_needs_no_recall_round(
    proxy: Proxy, stream: bool
) -> None:
    """The model cannot call recall there: one round, and the tool list of the agent's
    other turns (recall last) kept, for the prompt cache."""
    named = {"type": "tool", "name": "read"}
    assert await _forced(proxy, "anthropic.messages", stream, tool_choice=named) == ["read"]
    (sent,) = (r.json() for r in proxy.fake.received)
    assert _offered(sent) == ["read", RECALL_TOOL_NAME] and sent["tool_choice"] == named


_CHAT_NAMED = {"type": "function", "function": {"name": "read"}}
_CHAT_ALLOWED = {
    "type": "allowed_tools",
    "allowed_tools": {
        "mode": "required",
        "tools": [{"type": "function", "function": {"name": "x"}}],
    },
}
_RESPONSES_ALLOWED = {"type": "allowed_tools", "mode": "auto",
                      "tools": [{"type": "function", "name": "x"}]}  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "kind"),
    [
        (None, "auto"),
        ("auto", "auto"),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto"),
        ("none", "none"),
        ({"type": "none"}, "none"),
        ("required", "any"),
        ({"type": "any"}, "any"),
        ({"type": "any", "disable_parallel_tool_use": True}, "any"),
        ("something new", "any"),
        ({"function": {"name": "x"}}, "any"),  # no type: read cautiously
        (_CHAT_NAMED, "client"),
        ({"type": "custom", "custom": {"name": "x"}}, "client"),
        (_CHAT_ALLOWED, "client"),
        ({"type": "function", "name": "x"}, "client"),
        (_RESPONSES_ALLOWED, "client"),
        ({"type": "web_search_preview"}, "client"),
        ({"type": "mcp", "server_label": "s", "name": "t"}, "client"),
        ({"type": "tool", "name": "x"}, "client"),
        ({"type": "tool", "name": RECALL_TOOL_NAME}, "ours"),
        ({"type": "function", "function": {"name": RECALL_TOOL_NAME}}, "ours"),
        (_RESPONSES_ALLOWED | {"tools": [{"type": "function", "name": RECALL_TOOL_NAME}]}, "ours"),
    ],
)
def test_choice_kinds_of_every_api(choice: Any, kind: str) -> None:
    assert choice_kind(choice) == kind


def _recall_tool(api: str) -> Any:
    injected = DIALECTS[api].inject(
        {"model": "claude-opus-5", "messages": [], "input": "q", "tools": []}
    )
    assert injected is not None
    return injected["tools"][-1]


@pytest.mark.parametrize(
    ("api", "tools", "choice"),
    [
        ("openai.chat", CHAT_TOOLS, "required"),
        ("openai.responses", RESPONSES_TOOLS, "required"),
        ("anthropic.messages", MESSAGES_TOOLS, {"type": "any"}),
        ("anthropic.messages", MESSAGES_TOOLS, {"type": "any", "disable_parallel_tool_use": True}),
    ],
)
def test_the_last_round_of_a_forced_choice_goes_without_the_recall_tool(
    api: str, tools: Any, choice: Any
) -> None:
    request = {"model": "m", "tools": [*tools, _recall_tool(api)], "tool_choice": choice}
    last = DIALECTS[api].last_round(request)
    assert last["tools"] == tools and last["tool_choice"] == choice


@pytest.mark.parametrize(
    ("api", "tools", "choice"),
    [
        ("openai.chat", CHAT_TOOLS, _CHAT_NAMED),
        ("openai.chat", CHAT_TOOLS, "none"),
        ("openai.responses", RESPONSES_TOOLS, _RESPONSES_ALLOWED),
        ("anthropic.messages", MESSAGES_TOOLS, {"type": "tool", "name": "read"}),
    ],
)
def test_the_last_round_keeps_a_choice_that_leaves_recall_out(
    api: str, tools: Any, choice: Any
) -> None:
    request = {"model": "m", "tools": [*tools, _recall_tool(api)], "tool_choice": choice}
    assert DIALECTS[api].last_round(request) == request


@pytest.mark.parametrize(
    ("tools", "choice", "references", "offered"),
    [
        (CHAT_TOOLS, None, False, True),  # an agent, from its first turn
        (CHAT_TOOLS, "none", False, True),
        (CHAT_TOOLS, _CHAT_NAMED, False, True),  # cannot be called: the list stays
        (CHAT_TOOLS, "required", False, True),  # the list stays as the choice changes
        (CHAT_TOOLS, "required", True, True),
        ([], "required", True, False),  # no tool of its own for the last round
        (None, None, True, True),
        (None, None, False, False),
        (CHAT_TOOLS, {"type": "function", "function": {"name": RECALL_TOOL_NAME}}, True, False),
    ],
)
def test_which_requests_are_offered_the_recall_tool(
    tools: Any, choice: Any, references: bool, offered: bool
) -> None:
    request: dict[str, Any] = {"model": "m", "messages": []}
    if tools is not None:
        request["tools"] = tools
    if choice is not None:
        request["tool_choice"] = choice
    assert _offers_recall(request, references) is offered


@pytest.mark.parametrize("references", [False, True])
def test_an_agents_tool_list_stays_whatever_choice_each_turn_makes(references: bool) -> None:
    """Agents force a call on one turn and leave it to the model on the next (the
    OpenAI Agents SDK resets ``required`` to ``auto`` after a call): the tool list is
    the start of the cached prompt, so recall goes with every one of these turns,
    references or not (it flipped with the choice and re-sent the whole prompt)."""
    choices: list[Any] = [
        None, "auto", "required", "none", {"type": "any"}, {"type": "auto"},
        _CHAT_NAMED, {"type": "tool", "name": "read"}, {"type": "something_new"},
    ]  # fmt: skip
    for choice in choices:
        request: dict[str, Any] = {"model": "m", "messages": [], "tools": CHAT_TOOLS}
        if choice is not None:
            request["tool_choice"] = choice
        assert _offers_recall(request, references), choice


def test_an_object_choice_of_a_type_no_api_defines_counts_as_forced() -> None:
    """Read cautiously: a future shape that forces some call must not let the last
    round end on a stripped recall call."""
    from ctxwarden.proxy.dialects import choice_kind

    assert choice_kind({"type": "something_new"}) == "any"
    assert choice_kind({"type": "required"}) == "any"
    assert choice_kind({"type": "file_search"}) == "client"
    assert choice_kind({"type": "mcp", "server_label": "s"}) == "client"


def test_a_client_tool_named_like_ours_is_never_doubled() -> None:
    """A Chat client's own custom tool called ``ctxwarden_recall``: no second tool of
    that name (the upstream would refuse the request)."""
    custom = {"type": "custom", "custom": {"name": RECALL_TOOL_NAME}}
    request = {"model": "m", "messages": [], "tools": [*CHAT_TOOLS, custom]}
    assert DIALECTS["openai.chat"].inject(request) is None
    assert DIALECTS["openai.chat"].inject({**request, "tools": CHAT_TOOLS}) is not None
