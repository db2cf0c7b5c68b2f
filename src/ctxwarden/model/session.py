"""Session keys: explicit, or derived from the stable head of the conversation.

The head is everything before the agent's first reply: system content and every user
message (some agents put a shared demonstration first and the task second, so the first
user message alone would give all their sessions one key). Agents resend it unchanged
every turn, and clients that trim old history keep it, so every request of a session
derives the same key. Two runs on exactly the same prompts share a key: give them
explicit session keys.
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
            break
    return "s-" + h.hexdigest()
