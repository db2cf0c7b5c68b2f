"""Typed parts of a conversation: pure, tagged, immutable values.

Every part records ``path``: where it lives in the wire request, as a tuple of keys and
indexes (a JSON pointer in tuple form). Text-bearing parts record the path of the text
string itself, so a pass that rewrites text can be rendered back without touching any
other byte of the request. Each part carries one of the seven safety classes; the
adapters give a natural class and :mod:`ctxwarden.model.classify` refines it by position.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

__all__ = [
    "ContentPart",
    "MediaPart",
    "OpaquePart",
    "Part",
    "Path",
    "ReasoningPart",
    "SafetyClass",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
]

Path = tuple[str | int, ...]


class SafetyClass(StrEnum):
    """How much freedom a pass has over a part (seed 000's seven classes)."""

    PROTOCOL_EXACT = "protocol_exact"
    """Ids, tool calls, opaque protocol items: never changed."""
    CONTINUATION_EXACT = "continuation_exact"
    """Reasoning with signatures / encrypted content: needed to continue a turn."""
    CRITICAL_EXACT = "critical_exact"
    """System prompt, first user message, the newest messages: never changed."""
    REHYDRATABLE_EXACT = "rehydratable_exact"
    """References to external content (images, files): kept as they are."""
    LOSSLESS_TRANSFORMABLE = "lossless_transformable"
    """May be rewritten only if the information is fully kept (in place or by reference)."""
    CONDENSABLE = "condensable"
    """Payload that may be condensed lossily, with the original kept in the store."""
    DROPPABLE_DUPLICATE = "droppable_duplicate"
    """An exact repeat of earlier content: may become a reference to it."""

    @property
    def editable(self) -> bool:
        """True when some pass may rewrite a part of this class."""
        return self in _EDITABLE


_EDITABLE = frozenset(
    {
        SafetyClass.LOSSLESS_TRANSFORMABLE,
        SafetyClass.CONDENSABLE,
        SafetyClass.DROPPABLE_DUPLICATE,
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """Plain text; ``path`` points at the text string itself."""

    text: str
    path: Path
    safety: SafetyClass = SafetyClass.LOSSLESS_TRANSFORMABLE
    edited: bool = False
    kind: Literal["text"] = "text"

    def with_text(self, text: str) -> TextPart:
        """A copy carrying ``text``, marked edited so the renderer writes it back."""
        return replace(self, text=text, edited=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class MediaPart:
    """An image, audio or file reference, kept as it is."""

    media_type: str
    path: Path
    ref: str | None = None
    safety: SafetyClass = SafetyClass.REHYDRATABLE_EXACT
    kind: Literal["media"] = "media"


@dataclass(frozen=True, slots=True, kw_only=True)
class OpaquePart:
    """Anything the model does not know; rendered from the wire untouched."""

    wire_type: str
    path: Path
    raw_json: str = ""
    """The wire value as JSON text (for counting tokens; never rendered from)."""
    safety: SafetyClass = SafetyClass.PROTOCOL_EXACT
    kind: Literal["opaque"] = "opaque"


ContentPart = TextPart | MediaPart | OpaquePart


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallPart:
    """A tool call made by the assistant: id, name and arguments (JSON text)."""

    call_id: str
    name: str
    arguments: str
    path: Path
    arguments_path: Path | None = None
    """Where the arguments live, when a pass may condense them (old calls' arguments
    are payload; the id and name never change): a string on the wire, or a JSON object
    when :attr:`arguments_object` is set."""
    arguments_object: bool = False
    """The wire keeps the arguments as a JSON object at :attr:`arguments_path` (an
    Anthropic ``tool_use`` ``input``), not as text: :attr:`arguments` is its compact
    JSON, and an edit (JSON text of an object) is written back as the object it reads
    as."""
    command: str | None = None
    """What the call does, when its arguments do not say it (a built-in patch: its
    operation and file); ``None``: read from the arguments
    (:func:`ctxwarden.commands.command_of`)."""
    edited: bool = False
    safety: SafetyClass = SafetyClass.PROTOCOL_EXACT
    kind: Literal["tool_call"] = "tool_call"

    def with_arguments(self, arguments: str) -> ToolCallPart:
        """A copy carrying new arguments text, marked edited for the renderer."""
        if self.arguments_path is None:
            raise ValueError("these arguments are not editable on the wire")
        return replace(self, arguments=arguments, edited=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultPart:
    """The result of one tool call: the call id, its content parts, an error flag."""

    call_id: str
    content: tuple[ContentPart, ...]
    path: Path
    is_error: bool = False
    safety: SafetyClass = SafetyClass.CONDENSABLE
    kind: Literal["tool_result"] = "tool_result"

    @property
    def text(self) -> str:
        """The text content joined by newlines (media and opaque parts omitted)."""
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningPart:
    """Reasoning / thinking; signatures and encrypted content stay opaque in the wire."""

    text: str
    path: Path
    signed: bool = False
    redacted: bool = False
    safety: SafetyClass = SafetyClass.CONTINUATION_EXACT
    kind: Literal["reasoning"] = "reasoning"


Part = TextPart | MediaPart | OpaquePart | ToolCallPart | ToolResultPart | ReasoningPart
