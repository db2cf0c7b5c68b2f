"""A conversation: the typed view of one request, with the original wire kept beside it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxwarden.model.parts import Part, Path, TextPart, ToolCallPart, ToolResultPart

__all__ = ["API_NAMES", "ApiName", "Conversation", "Message", "newest_start"]

ApiName = Literal["openai.chat", "openai.responses", "anthropic.messages"]
API_NAMES: tuple[ApiName, ...] = ("openai.chat", "openai.responses", "anthropic.messages")


_PART_BYTES = 120
"""About what a part object and its path cost besides its strings
(:meth:`Message.footprint`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One turn item: a role and its parts. ``path`` points at the wire item.

    ``role`` is the wire role, or for OpenAI Responses items without a role the role
    the item plays: ``assistant`` for calls and reasoning, ``tool`` for call outputs.
    """

    role: str
    parts: tuple[Part, ...]
    path: Path
    item_type: str = "message"
    _tool_calls: tuple[ToolCallPart, ...] = field(init=False, repr=False, compare=False)
    _tool_results: tuple[ToolResultPart, ...] = field(init=False, repr=False, compare=False)
    _result_texts: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _edited: bool = field(init=False, repr=False, compare=False)
    _footprint: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # computed once: parsed messages are memoized and read every turn after
        calls = tuple(p for p in self.parts if isinstance(p, ToolCallPart))
        object.__setattr__(self, "_tool_calls", calls)
        results = tuple(p for p in self.parts if isinstance(p, ToolResultPart))
        object.__setattr__(self, "_tool_results", results)
        texts = tuple(c.text for r in results for c in r.content if isinstance(c, TextPart))
        object.__setattr__(self, "_result_texts", texts)
        edited = any(c.edited for c in calls) or any(t.edited for t in self.text_parts())
        object.__setattr__(self, "_edited", edited)
        object.__setattr__(self, "_footprint", -1)  # measured on first use

    def footprint(self) -> int:
        """An estimate of the bytes the message keeps alive (its texts, arguments and
        opaque JSON, plus a small object's size per part): what a memo holding it
        weighs. Measured once (each memo that keeps the message asks)."""
        if self._footprint < 0:
            object.__setattr__(self, "_footprint", self._measured())
        return self._footprint

    def _measured(self) -> int:
        total = _PART_BYTES
        for part in self.parts:
            total += _PART_BYTES
            if isinstance(part, ToolResultPart):
                for sub in part.content:
                    total += _PART_BYTES + len(
                        getattr(sub, "text", "") or getattr(sub, "raw_json", "")
                    )
                continue
            for name in ("text", "arguments", "raw_json", "name"):
                value = getattr(part, name, None)
                if isinstance(value, str):
                    total += len(value)
        return total

    def text_parts(self) -> Iterator[TextPart]:
        """Every text part, including those nested in tool results."""
        for part in self.parts:
            if isinstance(part, TextPart):
                yield part
            elif isinstance(part, ToolResultPart):
                for sub in part.content:
                    if isinstance(sub, TextPart):
                        yield sub

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        return self._tool_calls

    @property
    def tool_results(self) -> tuple[ToolResultPart, ...]:
        return self._tool_results

    @property
    def result_texts(self) -> tuple[str, ...]:
        """The texts of its tool results, in order (media and opaque parts omitted)."""
        return self._result_texts

    @property
    def edited(self) -> bool:
        """Whether a pass rewrote any of its texts or tool-call arguments."""
        return self._edited


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversation:
    """The typed model of one request.

    ``wire`` is the original request and is never mutated; everything not represented
    by an edited text part renders from it byte for byte. ``system`` holds system
    content that is not a message (Anthropic ``system``, Responses ``instructions``).
    """

    api: ApiName
    wire: Mapping[str, Any]
    messages: tuple[Message, ...]
    system: tuple[Part, ...] = ()
    model: str | None = None
    tool_names: tuple[str, ...] = ()
    previous_response_id: str | None = None
    messages_key: str = "messages"
    extra: Mapping[str, Any] = field(default_factory=dict)
    item_hashes: tuple[str, ...] = ()
    """Content hashes of the wire's message items, in order, when the adapter computed
    them while parsing (:func:`ctxwarden.model.hashing.element_hashes` reuses them;
    they describe ``wire``, which every derived copy shares)."""
    item_sizes: tuple[int, ...] = ()
    """Compact-JSON sizes of the same items, in bytes, when the hashes are there."""

    def edited_texts(self, messages: Iterable[Message] | None = None) -> Iterator[TextPart]:
        """Every text part a pass has rewritten: of the system parts and of ``messages``
        (default: all of this conversation's)."""
        for part in self.system:
            if isinstance(part, TextPart) and part.edited:
                yield part
        for message in self.messages if messages is None else messages:
            if not message.edited:
                continue
            for text in message.text_parts():
                if text.edited:
                    yield text

    def edits(self) -> Iterator[tuple[Path, str, bool]]:
        """``(path, new text, as_object)`` of every rewritten text and tool-call
        arguments; ``as_object``: the text is JSON written at ``path`` as the value it
        reads as (arguments the wire keeps as an object, see
        :attr:`~ctxwarden.model.parts.ToolCallPart.arguments_object`)."""
        for part in self.edited_texts():
            yield part.path, part.text, False
        for message in self.messages:
            if not message.edited:
                continue
            for call in message.tool_calls:
                if call.edited and call.arguments_path is not None:
                    yield call.arguments_path, call.arguments, call.arguments_object

    @property
    def last_assistant_index(self) -> int:
        """Index in ``messages`` of the last assistant message, or -1."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].role == "assistant":
                return i
        return -1

    @property
    def newest_start(self) -> int:
        """Index of the first of the newest messages, which stay exact: everything after
        the last assistant message; when the request ends with assistant messages (a
        prefill the model is to continue), those and everything after the assistant
        message before them."""
        return newest_start([m.role for m in self.messages])


def newest_start(roles: Sequence[str]) -> int:
    """:attr:`Conversation.newest_start` for a list of message roles."""
    i = len(roles) - 1
    while i >= 0 and roles[i] == "assistant":  # a trailing prefill
        i -= 1
    while i >= 0 and roles[i] != "assistant":
        i -= 1
    return i + 1
