"""Prompt-cache simulation and pricing.

A request reuses the longest prefix it shares with the previous request of the same
session (compared message by message on the rendered request, header first: a
changed system prompt or tool list shares nothing). The prefix counts as cached only
when it reaches the model's ``min_cacheable_tokens``, and not at all when the
previous request was longer ago than the idle gap.

Prices are multiples of the uncached input price (registry ``cache_pricing``):

- OpenAI style: cached tokens at ``cached_read`` (0.1), the rest uncached (1.0);
  there is no write charge.
- Anthropic style: cached tokens at ``cached_read`` (0.1); the rest is written to
  the cache at ``cache_write`` (1.25), assuming the agent puts a cache breakpoint at
  the end of each request (the usual agent setup) - when the request is too short
  to be cached, it is charged as uncached.
"""

from __future__ import annotations

from ctxwarden.tokens.registry import CachePricing

__all__ = ["cache_expired", "effective_cached", "request_cost"]


def cache_expired(prev_ts: float | None, ts: float | None, idle_gap: float | None) -> bool:
    """True when the cache of the previous request expired before this one."""
    if idle_gap is None or prev_ts is None or ts is None:
        return False
    return ts - prev_ts > idle_gap


def effective_cached(shared_tokens: int, pricing: CachePricing) -> int:
    """The shared prefix tokens a provider actually serves from cache."""
    return shared_tokens if shared_tokens >= max(1, pricing.min_cacheable_tokens) else 0


def request_cost(tokens: int, cached: int, pricing: CachePricing, *, writes: bool) -> float:
    """The price of one request of ``tokens`` of which ``cached`` are cache reads."""
    cached = min(cached, tokens)
    fresh = tokens - cached
    if not writes:
        return fresh * pricing.uncached + cached * pricing.cached_read
    if tokens < pricing.min_cacheable_tokens:
        return tokens * pricing.uncached
    return fresh * pricing.cache_write + cached * pricing.cached_read
