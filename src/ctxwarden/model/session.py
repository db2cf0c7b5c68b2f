"""Session keys: explicit, or derived from the stable head of the conversation.

The head is the system content and the first user message: agents resend them
unchanged every turn, so every request of one session derives the same key.
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
    seen_user = False
    for message in conversation.messages:
        if message.role in ("system", "developer"):
            for text in message.text_parts():
                h.update(b"\x00sys\x00" + text.text.encode())
        elif message.role == "user":
            for text in message.text_parts():
                h.update(b"\x00user\x00" + text.text.encode())
            seen_user = True
        if seen_user:
            break
    return "s-" + h.hexdigest()
