"""The typed request model: conversations, messages, parts and safety classes."""

from ctxwarden.model.classify import classify
from ctxwarden.model.conversation import API_NAMES, ApiName, Conversation, Message
from ctxwarden.model.parts import (
    ContentPart,
    MediaPart,
    OpaquePart,
    Part,
    Path,
    ReasoningPart,
    SafetyClass,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ctxwarden.model.render import render_conversation

__all__ = [
    "API_NAMES",
    "ApiName",
    "ContentPart",
    "Conversation",
    "MediaPart",
    "Message",
    "OpaquePart",
    "Part",
    "Path",
    "ReasoningPart",
    "SafetyClass",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "classify",
    "render_conversation",
]
