"""Session keys: explicit, or derived from the stable head of the conversation.

The head is everything up to and including the agent's first reply: system content,
every user message before it (some agents put a shared demonstration first and the
task second, so the first user message alone would give all their sessions one key)
and the reply itself (its text and tool calls: the first assistant item that has
either, since a Responses reasoning item alone carries neither). Agents resend it
unchanged every turn, so every request of a session derives the same key. The reply
tells apart runs of the same task (parallel attempts, a re-run), which would otherwise
share one state and undo each other's compaction steps; it differs run to run (sampled
text, random call ids). Until the agent has replied the key is the prompts' alone, and
nothing can be condensed then. A client that drops its first exchange gets a new key;
its request's prefix changed anyway, and the old state's decisions (by position) no
longer fit.
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
            said = False
            for text in message.text_parts():
                h.update(b"\x00reply\x00" + text.text.encode())
                said = True
            for call in message.tool_calls:
                h.update(
                    b"\x00call\x00"
                    + "\x00".join((call.call_id, call.name, call.arguments)).encode()
                )
                said = True
            if said:  # a reasoning item alone (Responses) says nothing yet: read on
                break
    return "s-" + h.hexdigest()
