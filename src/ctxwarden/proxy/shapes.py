"""Wire details the proxy needs per API: routes, upstream choice, error bodies.

Errors the proxy itself produces look like the provider's own, so SDKs raise
their usual exception types: OpenAI ``{"error": {"message", "type", "param",
"code"}}``, Anthropic ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Literal

import orjson

__all__ = [
    "CONDENSED_ROUTES",
    "Family",
    "error_body",
    "family_for",
    "is_own_path",
    "route_label",
]

Family = Literal["openai", "anthropic"]

#: Condensed routes: path -> (engine api name, route label).
CONDENSED_ROUTES: Mapping[str, tuple[str, str]] = {
    "/v1/chat/completions": ("openai.chat", "chat"),
    "/v1/responses": ("openai.responses", "responses"),
    "/v1/messages": ("anthropic.messages", "messages"),
}

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    502: "upstream_error",
    503: "server_error",
    504: "timeout",
}


def family_for(path: str, headers: Mapping[str, str]) -> Family:
    """Anthropic for ``/v1/messages*``, ``/v1/complete`` or any request that carries
    ``anthropic-version`` (so ``GET /v1/models`` goes where the SDK meant it); else OpenAI."""
    if path.startswith(("/v1/messages", "/v1/complete")) or "anthropic-version" in headers:
        return "anthropic"
    return "openai"


def is_own_path(path: str) -> bool:
    """Whether ``path`` (decoded) names a ``/_ctxwarden`` path once its slashes are
    collapsed and its dot segments resolved, as an upstream or its client would read
    it: ``//_ctxwarden/x`` and ``/v1/../_ctxwarden/x`` are never forwarded either."""
    collapsed = posixpath.normpath(re.sub(r"/+", "/", path))
    return collapsed == "/_ctxwarden" or collapsed.startswith("/_ctxwarden/")


def route_label(path: str) -> str:
    """A bounded metrics label for a path."""
    hit = CONDENSED_ROUTES.get(path)
    if hit:
        return hit[1]
    if path == "/v1/messages/count_tokens":
        return "count_tokens"
    if path.startswith("/v1/models"):
        return "models"
    return "other"


def error_body(
    family: Family, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> bytes:
    """A JSON error body in the shape of ``family``'s API."""
    if family == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    kind = _OPENAI_TYPES.get(status, "server_error")
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})
