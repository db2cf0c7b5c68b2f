"""Wire-format adapters, one module per API; :func:`get_adapter` picks one by name."""

from __future__ import annotations

from ctxwarden.adapters import anthropic_messages, openai_chat, openai_responses
from ctxwarden.adapters.base import Adapter
from ctxwarden.errors import ConfigError

__all__ = ["ADAPTERS", "Adapter", "get_adapter"]

ADAPTERS: dict[str, Adapter] = {
    a.api: a for a in (openai_chat.ADAPTER, openai_responses.ADAPTER, anthropic_messages.ADAPTER)
}


def get_adapter(api: str) -> Adapter:
    """The adapter for ``api`` (``openai.chat``, ``openai.responses``, ``anthropic.messages``)."""
    try:
        return ADAPTERS[api]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ConfigError(f"unknown api {api!r} (known: {known})", "api") from None
