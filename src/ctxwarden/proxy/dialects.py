"""Per-API recall mechanics for whole (non-streamed) bodies.

Each dialect knows how to offer the tool, find its calls in a response, build the
continuation request and strip recall calls from a response the client will see.
Streaming counterparts live in :mod:`ctxwarden.proxy.stream_filters`; both share
:class:`~ctxwarden.proxy.recall.RoundResult` so the loop in the app is one loop.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from ctxwarden.pipeline.thinking import thinking_blocks
from ctxwarden.proxy.reasoning_links import is_recall_call, round_view
from ctxwarden.proxy.recall import (
    RECALL_TOOL_NAME,
    RecallAnswer,
    RecallCall,
    RoundResult,
    tool_description,
    tool_parameters,
)
from ctxwarden.tokens.registry import model_binds_thinking

__all__ = [
    "DIALECTS",
    "MAX_TOOLS",
    "ChoiceKind",
    "Dialect",
    "choice_kind",
    "own_tools",
    "without_recall_tool",
]

_CLIENT_ACTION_ITEMS = frozenset(
    {"function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call",
     "apply_patch_call", "mcp_approval_request"}
)  # fmt: skip


MAX_TOOLS = 128
"""OpenAI's limit on a request's tools: a request that already has this many gets no
recall tool (one more would turn an accepted request into a 400)."""


class Dialect(Protocol):
    """Recall mechanics of one API (see module docstring)."""

    def inject(self, request: dict[str, Any]) -> dict[str, Any] | None: ...
    def last_round(self, request: dict[str, Any]) -> dict[str, Any]:
        """The last round the limit allows, offering no recall call (:func:`_last_round`)."""
        ...

    def find_calls(self, response: dict[str, Any]) -> RoundResult: ...
    def continuation(
        self, request: dict[str, Any], result: RoundResult, answers: list[RecallAnswer]
    ) -> dict[str, Any]: ...
    def strip(self, response: dict[str, Any]) -> dict[str, Any]: ...
    def hide(self, response: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any] | None: ...
    def with_earlier(
        self, response: dict[str, Any], earlier: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """``response``, the answer of a non-streamed turn's last round, with what the
        ``earlier`` rounds (the answers that called recall, stripped of those calls, in
        order) showed before its own output, as a stream of the turn shows them (its
        rounds' text before their recall calls reached the client): ``response``
        itself when they showed nothing."""
        ...


def _tools(request: dict[str, Any]) -> list[Any] | None:
    tools = request.get("tools", [])
    return tools if isinstance(tools, list) else None


ChoiceKind = Literal["auto", "none", "any", "client", "ours"]
"""What a request's ``tool_choice`` lets the model call (:func:`choice_kind`)."""


def choice_kind(choice: Any) -> ChoiceKind:
    """What ``tool_choice`` (any of the three APIs' shapes) lets the model call:

    - ``"auto"``: any tool offered, or none (absent, ``"auto"``, ``{"type": "auto"}``
      with or without ``disable_parallel_tool_use``);
    - ``"none"``: no tool (``"none"``, ``{"type": "none"}``);
    - ``"any"``: some tool it must call, the recall tool included when offered
      (``"required"``, Anthropic's ``{"type": "any"}``; a string or object type no API
      defines too, the cautious reading);
    - ``"client"``: only tools the client names, never ours: one function or custom
      tool (Chat ``{"type": "function", "function": {"name": ...}}``, Responses
      ``{"type": "function", "name": ...}``, Anthropic ``{"type": "tool", "name": ...}``),
      a hosted or MCP tool (Responses), or a list of allowed tools (Chat and Responses
      ``allowed_tools``, in either mode);
    - ``"ours"``: a choice that names the recall tool itself (the client cannot mean
      the proxy's tool: its request goes as sent, for the upstream to judge)."""
    if choice is None or choice == "auto":
        return "auto"
    if choice == "none":
        return "none"
    if not isinstance(choice, dict):
        return "any"
    kind = choice.get("type")
    if kind == "auto":
        return "auto"
    if kind == "none":
        return "none"
    if kind == "any" or kind not in _CLIENT_CHOICES:  # a shape no API defined yet: forced
        return "any"
    if RECALL_TOOL_NAME in _named(choice):
        return "ours"
    return "client"


_CLIENT_CHOICES = frozenset(
    (
        "function", "custom", "tool", "allowed_tools",  # one named tool, or a list
        "file_search", "web_search", "web_search_preview", "web_search_preview_2025_03_11",
        "computer_use", "computer_use_preview", "code_interpreter", "image_generation",
        "mcp", "apply_patch", "shell", "local_shell",  # Responses hosted tools
    )
)  # fmt: skip
"""``tool_choice`` object types that name the client's own tools (never ours). Any
other type counts as forcing some call: the recall tool then goes only next to a
tool of the client's own and is left out of the last round."""


def _named(choice: dict[str, Any]) -> set[Any]:
    """The tool names a ``tool_choice`` object names (one tool, or a list allowed)."""
    allowed = choice.get("allowed_tools")  # Chat nests the list; Responses does not
    listed = allowed.get("tools") if isinstance(allowed, dict) else choice.get("tools")
    tools = [choice, *(listed if isinstance(listed, list) else ())]
    return {name for tool in tools if isinstance(tool, dict) for name in _names_of(tool)}


def _names_of(tool: dict[str, Any]) -> list[Any]:
    """The name a tool (or a choice of one) gives, at the top or in its ``function`` /
    ``custom`` object."""
    inner = [tool.get(key) for key in ("function", "custom")]
    return [tool.get("name"), *(i.get("name") for i in inner if isinstance(i, dict))]


def own_tools(request: dict[str, Any]) -> bool:
    """Whether ``request`` offers a tool of the client's own (any tool but ours)."""
    tools = _tools(request) or []
    return any(not (_is_recall_tool(t) or _is_chat_recall_tool(t)) for t in tools)


def _last_round(request: dict[str, Any], none: Any) -> dict[str, Any]:
    """The last round the limit allows, where a recall call could only be stripped
    (leaving the client an empty turn): a choice the client left to the model
    becomes ``none`` (the API's "call no tool"), so the model answers; a forced one
    ("call some tool") stays, and the round goes without the recall tool, so the model
    calls one of the client's own. A choice the recall tool is outside of (none, one
    of the client's tools) needs nothing: the tool list stays as it was."""
    kind = choice_kind(request.get("tool_choice"))
    if kind == "auto":
        # nothing of the client's choice is kept: Anthropic's {"type": "none"} takes no
        # other key (disable_parallel_tool_use would make the round a 400)
        return {**request, "tool_choice": none}
    tools = _tools(request)
    if kind != "any" or not tools:
        return request
    kept = [t for t in tools if not (_is_recall_tool(t) or _is_chat_recall_tool(t))]
    return request if len(kept) == len(tools) else {**request, "tools": kept}


def _append_named_tool(
    request: dict[str, Any], spec: dict[str, Any], *, limit: int | None = None
) -> dict[str, Any] | None:
    """``request`` with ``spec`` appended to its tools (tools named at the top level, as in
    Responses and Messages); ``None`` when tools are not a list, one is already ours or
    there are ``limit`` already."""
    tools = _tools(request)
    if tools is None or (limit is not None and len(tools) >= limit):
        return None
    if any(_is_recall_tool(t) for t in tools):
        return None
    return {**request, "tools": [*tools, spec]}


def _is_recall_tool(tool: Any) -> bool:
    """A tool named at the top level (Responses, Messages) that is ours."""
    return isinstance(tool, dict) and tool.get("name") == RECALL_TOOL_NAME


def without_recall_tool(response: Any) -> dict[str, Any] | None:
    """A stored Responses response read back (``GET /v1/responses/{id}``) with
    ``ctxwarden_recall`` gone from its echoed ``tools``, as the answer to its
    ``create`` showed them (:func:`hide_recall_tool`, whose ``tool_choice`` and
    ``parallel_tool_calls`` need the request, which a read does not carry); ``None``
    when it shows no such tool."""
    tools = response.get("tools") if isinstance(response, dict) else None
    if not isinstance(tools, list) or not any(_is_recall_tool(t) for t in tools):
        return None
    return {**response, "tools": [t for t in tools if not _is_recall_tool(t)]}


def _is_chat_recall_tool(tool: Any) -> bool:
    """A Chat tool (named in its ``function``) that is ours."""
    fn = tool.get("function") if isinstance(tool, dict) else None
    return isinstance(fn, dict) and fn.get("name") == RECALL_TOOL_NAME


def _no_echo(response: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any] | None:
    """An API whose answers do not echo the request's tools: nothing to hide."""
    return None


def hide_recall_tool(response: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any] | None:
    """A Responses answer (or its ``response`` object) without the traces of the
    injected tool: the echoed ``tools`` lose it, and ``tool_choice`` and
    ``parallel_tool_calls`` are the client's own (the last round may have asked for no
    call, a round asked again for one call at a time); ``None`` when nothing shows."""
    parallel = asked.get("parallel_tool_calls")
    own = {"tool_choice": asked.get("tool_choice") or "auto",
           "parallel_tool_calls": True if parallel is None else parallel}  # fmt: skip
    changed = {k: v for k, v in own.items() if k in response and response[k] != v}
    stripped = without_recall_tool(response)
    if stripped is None and not changed:
        return None
    return {**(response if stripped is None else stripped), **changed}


class ChatDialect:
    hide = staticmethod(_no_echo)

    def inject(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Not with ``n`` > 1: recall calls would come per choice, and the loop can
        answer one assistant message only (the client would see the calls). Not with
        ``prediction`` (Predicted Outputs take no function calling) nor when the request
        has as many tools as OpenAI allows."""
        tools = _tools(request)
        if tools is None or "functions" in request or request.get("n") not in (None, 1):
            return None
        if "prediction" in request or len(tools) >= MAX_TOOLS:
            return None
        if any(RECALL_TOOL_NAME in _names_of(tool) for tool in tools if isinstance(tool, dict)):
            return None  # ours already, or a client tool of that name (never two)
        spec = {"name": RECALL_TOOL_NAME, "description": tool_description,
                "parameters": tool_parameters}  # fmt: skip
        return {**request, "tools": [*tools, {"type": "function", "function": spec}]}

    def last_round(self, request: dict[str, Any]) -> dict[str, Any]:
        return _last_round(request, "none")

    def find_calls(self, response: dict[str, Any]) -> RoundResult:
        choices = response.get("choices")
        if not isinstance(choices, list) or len(choices) != 1:
            return RoundResult()
        message = choices[0].get("message") or {}
        result = RoundResult()
        recall_calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            if fn.get("name") == RECALL_TOOL_NAME:
                recall_calls.append(call)
                result.calls.append(RecallCall(str(call.get("id")), fn.get("arguments") or ""))
            else:
                result.other_calls += 1
        result.assistant = {"role": "assistant", "content": message.get("content"),
                            "tool_calls": recall_calls}  # fmt: skip
        return result

    def continuation(
        self, request: dict[str, Any], result: RoundResult, answers: list[RecallAnswer]
    ) -> dict[str, Any]:
        tool_msgs = [
            {"role": "tool", "tool_call_id": a.call_id, "content": a.text} for a in answers
        ]
        return {**request, "messages": [*request["messages"], result.assistant, *tool_msgs]}

    def with_earlier(
        self, response: dict[str, Any], earlier: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The earlier rounds' text before the message's own, joined as a stream's
        deltas join (nothing in between). Only the text: an earlier round's refusal,
        audio, annotations or logprobs are not carried over."""
        shown = "".join(_chat_text(r) for r in earlier)
        choices = response.get("choices")
        if not shown or not isinstance(choices, list) or len(choices) != 1:
            return response
        choice = dict(choices[0])
        message = dict(choice.get("message") or {})
        own = message.get("content")
        message["content"] = shown + (own if isinstance(own, str) else "")
        choice["message"] = message
        return {**response, "choices": [choice]}

    def strip(self, response: dict[str, Any]) -> dict[str, Any]:
        choices = []
        for choice in response.get("choices") or []:
            message = dict(choice.get("message") or {})
            kept = [
                c for c in message.get("tool_calls") or []
                if (c.get("function") or {}).get("name") != RECALL_TOOL_NAME
            ]  # fmt: skip
            choice = dict(choice)
            if kept:
                message["tool_calls"] = kept
            else:
                message.pop("tool_calls", None)
                if choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
            choice["message"] = message
            choices.append(choice)
        return {**response, "choices": choices}


def _chat_text(response: dict[str, Any]) -> str:
    """The text of a chat answer's one message ("" when none)."""
    choices = response.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return ""
    message = choices[0].get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _listed(response: dict[str, Any], key: str) -> list[Any]:
    """``response[key]`` when it is a list, else no items."""
    value = response.get(key)
    return value if isinstance(value, list) else []


def _with_earlier_items(
    response: dict[str, Any], earlier: list[dict[str, Any]], key: str
) -> dict[str, Any]:
    """``response`` with the ``earlier`` answers' items under ``key`` (Responses output
    items, Messages content blocks) before its own."""
    shown = [item for answer in earlier for item in _listed(answer, key)]
    if not shown:
        return response
    return {**response, key: [*shown, *_listed(response, key)]}


class ResponsesDialect:
    hide = staticmethod(hide_recall_tool)

    def inject(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Not for a ``background`` response (polled later: nobody would answer a recall
        call) nor one in a ``conversation`` (OpenAI appends each request's input and
        output to the conversation: a continuation round would add the input and the
        earlier rounds' items again, and a recall call left for the next turn would
        stay unanswered in it); not when the request has as many tools as OpenAI
        allows."""
        # strict: false said outright: Responses function tools may default to strict,
        # which would refuse a schema with an optional property (a 400 for every request)
        spec = {"type": "function", "name": RECALL_TOOL_NAME, "description": tool_description,
                "parameters": tool_parameters, "strict": False}  # fmt: skip
        if request.get("background") or request.get("conversation"):
            return None
        return _append_named_tool(request, spec, limit=MAX_TOOLS)

    def last_round(self, request: dict[str, Any]) -> dict[str, Any]:
        return _last_round(request, "none")

    def find_calls(self, response: dict[str, Any]) -> RoundResult:
        output = response.get("output")
        result = RoundResult(assistant=output if isinstance(output, list) else [])
        for item in result.assistant:
            if not isinstance(item, dict):
                continue
            if is_recall_call(item):
                result.calls.append(RecallCall(str(item.get("call_id")), item.get("arguments", "")))
            elif str(item.get("type")) in _CLIENT_ACTION_ITEMS:
                result.other_calls += 1
        result.tangled = bool(result.calls) and round_view(result.assistant).tangled
        return result

    def continuation(
        self, request: dict[str, Any], result: RoundResult, answers: list[RecallAnswer]
    ) -> dict[str, Any]:
        given = request.get("input", [])
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        outputs = [
            {"type": "function_call_output", "call_id": a.call_id, "output": a.text}
            for a in answers
        ]
        echoed = result.assistant
        if request.get("store") is False:
            echoed = _stateless(echoed)
        return {**request, "input": [*items, *echoed, *outputs]}

    def with_earlier(
        self, response: dict[str, Any], earlier: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The earlier rounds' output items (messages, reasoning, hosted tool calls)
        before the response's own, as a stream's ``response.completed`` lists them."""
        return _with_earlier_items(response, earlier, "output")

    def strip(self, response: dict[str, Any]) -> dict[str, Any]:
        """Without its recall calls and the reasoning items right before them (the
        client could not send those back: :mod:`.reasoning_links`)."""
        output = _listed(response, "output")
        hidden = round_view(output).hidden
        return {**response, "output": [x for i, x in enumerate(output) if i not in hidden]}


def _stateless(items: list[Any]) -> list[Any]:
    """The round's output items as a ``store: false`` request can carry them: nothing
    was persisted, so an item's ``id`` names nothing upstream ("Item with id ... not
    found") and goes, and a reasoning item without its ``encrypted_content`` (the
    client did not ask for it) cannot be sent back at all."""
    out = []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "reasoning" and not item.get("encrypted_content"):
            continue
        if kind in _ECHOED_WITHOUT_ID:
            item = {k: v for k, v in item.items() if k != "id"}
        out.append(item)  # other items (server tool calls) as they came
    return out


_ECHOED_WITHOUT_ID = frozenset({"reasoning", "message", "function_call", "custom_tool_call"})


class MessagesDialect:
    hide = staticmethod(_no_echo)

    def inject(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Not to a model that binds thinking blocks to their prefix (registry
        ``binds_thinking``; one the registry does not know), nor when the request asks
        for thinking: the rounds that call recall would be spliced into one assistant
        message, and a signed thinking block comes back valid only in the message, and
        after the prefix, it was produced in (Anthropic refuses a rebuilt latest
        assistant message, and a binding model the later rounds' blocks). A binding
        model may think unasked (Claude Opus 5.5 always does), so for it the choice
        goes by the model alone, the same on every turn: its tool list never changes."""
        if thinks(request) or model_binds_thinking(request.get("model")):
            return None
        spec = {"name": RECALL_TOOL_NAME, "description": tool_description,
                "input_schema": tool_parameters}  # fmt: skip
        return _append_named_tool(request, spec)

    def last_round(self, request: dict[str, Any]) -> dict[str, Any]:
        return _last_round(request, {"type": "none"})

    def find_calls(self, response: dict[str, Any]) -> RoundResult:
        content = response.get("content")
        result = RoundResult(assistant=content if isinstance(content, list) else [])
        for block in result.assistant:
            if not isinstance(block, dict) or block.get("type") != "tool_use":
                continue
            if block.get("name") == RECALL_TOOL_NAME:
                raw = block.get("input")
                args = raw if isinstance(raw, str) else _dumps(raw)
                result.calls.append(RecallCall(str(block.get("id")), args))
            else:
                result.other_calls += 1
        return result

    def continuation(
        self, request: dict[str, Any], result: RoundResult, answers: list[RecallAnswer]
    ) -> dict[str, Any]:
        results = [
            {"type": "tool_result", "tool_use_id": a.call_id, "content": a.text,
             **({} if a.ok else {"is_error": True})}
            for a in answers
        ]  # fmt: skip
        assistant = {"role": "assistant", "content": result.assistant}
        user = {"role": "user", "content": results}
        return {**request, "messages": [*request["messages"], assistant, user]}

    def with_earlier(
        self, response: dict[str, Any], earlier: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The earlier rounds' content blocks (text, thinking, server tool blocks)
        before the message's own, as a stream shows them."""
        return _with_earlier_items(response, earlier, "content")

    def strip(self, response: dict[str, Any]) -> dict[str, Any]:
        content = [
            b for b in response.get("content") or []
            if not (isinstance(b, dict) and b.get("type") == "tool_use"
                    and b.get("name") == RECALL_TOOL_NAME)
        ]  # fmt: skip
        out = {**response, "content": content}
        if out.get("stop_reason") == "tool_use" and not any(
            isinstance(b, dict) and b.get("type") == "tool_use" for b in content
        ):
            out["stop_reason"] = "end_turn"
        return out


def bound_thinking(api: str, request: dict[str, Any]) -> bool:
    """Whether ``request`` is a Messages request to a model that binds thinking to its
    prefix: a thinking block it carries, or the one its answer may bring (such a model
    may think unasked), is valid only after what the model saw when it was produced,
    the session's adopted replacements included."""
    return api == "anthropic.messages" and model_binds_thinking(request.get("model"))


def carries_thinking(request: dict[str, Any]) -> bool:
    """Whether a Messages request sends back a thinking block (``thinking`` or
    ``redacted_thinking``) in one of its assistant messages."""
    return next(thinking_blocks(request, "messages"), None) is not None


def thinks(request: dict[str, Any]) -> bool:
    """Whether a Messages request asks for thinking (``thinking`` set to anything but
    ``{"type": "disabled"}``)."""
    thinking = request.get("thinking")
    if thinking is None:
        return False
    return not (isinstance(thinking, dict) and thinking.get("type") == "disabled")


def _dumps(value: Any) -> str:
    import orjson

    return orjson.dumps(value).decode()


DIALECTS: dict[str, Dialect] = {
    "openai.chat": ChatDialect(),
    "openai.responses": ResponsesDialect(),
    "anthropic.messages": MessagesDialect(),
}
