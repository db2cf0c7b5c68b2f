"""Session keys: explicit, or derived from the stable head of the conversation.

The head is everything before the agent's first reply (system content and every user
message: some agents put a shared demonstration first and the task second) plus that
first reply (its text and tool calls). Agents resend all of it unchanged every turn, so
every request of a session from its second on derives the same key, and two sessions
of one agent on the same prompts still differ once their first replies do. (A first
request has no reply yet and derives its own key; it holds nothing to condense.)
"""

from __future__ import annotations

import hashlib

from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import TextPart

__all__ = ["derive_session_key"]


def derive_session_key(conversation: Conversation) -> str:
    """A stable key (``s-`` and 20 hex digits) for the session of ``conversation``."""
    h = hashlib.blake2b(digest_size=10)
    h.update(conversation.api.encode())
    for part in conversation.system:
        if isinstance(part, TextPart):
            h.update(b"\x00sys\x00" + part.text.encode())
    for message in conversation.messages:
        if message.role in ("system", "developer"):
            for text in message.text_parts():
                h.update(b"\x00sys\x00" + text.text.encode())
        elif message.role == "user":
            for text in message.text_parts():
                h.update(b"\x00user\x00" + text.text.encode())
        elif message.role == "assistant":
            for text in message.text_parts():
                h.update(b"\x00reply\x00" + text.text.encode())
            for call in message.tool_calls:
                h.update(b"\x00call\x00" + call.name.encode() + b"\x00" + call.arguments.encode())
            break
    return "s-" + h.hexdigest()
