"""Prompt-cache cost model used to judge compaction steps.

A request reuses the longest prefix of elements (head, then messages) it shares with
the previous request of its session, if that prefix is at least the minimum cacheable
length; cached tokens cost ``cached_read``, the rest ``cache_write`` (OpenAI: 1.0,
Anthropic: 1.25), in units of the uncached input price. A request shorter than the
minimum is not cached at all and costs its plain input price.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

from ctxwarden.tokens.registry import CachePricing

__all__ = ["PriceStyle", "common_prefix", "price_styles", "request_cost"]


@dataclass(frozen=True, slots=True)
class PriceStyle:
    name: str
    read: float
    write: float
    min_cacheable: int


def price_styles(kind: str, model_pricing: CachePricing) -> list[PriceStyle]:
    """The styles a step must pay off under: ``conservative`` is OpenAI's and
    Anthropic's usual prices, and the model's own when they differ from both (a model
    whose cached reads cost less, which a step's rewrite takes longer to pay for)."""
    openai = PriceStyle("openai", 0.1, 1.0, 1024)
    anthropic = PriceStyle("anthropic", 0.1, 1.25, 1024)
    p = model_pricing
    model = PriceStyle("model", p.cached_read, p.cache_write, p.min_cacheable_tokens)
    if kind == "openai":
        return [openai]
    if kind == "anthropic":
        return [anthropic]
    if kind == "model":
        return [model]
    usual = [openai, anthropic]
    if any(_same_prices(model, style) for style in usual):
        return usual
    return [*usual, model]


def _same_prices(a: PriceStyle, b: PriceStyle) -> bool:
    return (a.read, a.write, a.min_cacheable) == (b.read, b.write, b.min_cacheable)


_BLOCK = 64


def common_prefix(a: list[str], b: list[str]) -> int:
    """Length of the longest common prefix of two hash lists.

    Compared a block at a time (list equality runs in C): between compaction steps a
    session's lists agree on all but their last few elements, and a history of
    thousands of messages is compared several times per request."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start : start + _BLOCK] == b[start : start + _BLOCK]:
        start += _BLOCK
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return min(i, n)


def prefix_sums(tokens: list[int]) -> list[int]:
    """``sums[k]`` = tokens of the first ``k`` elements."""
    return [0, *accumulate(tokens)]


def request_cost(total: int, cached_prefix_tokens: int, style: PriceStyle) -> float:
    """Cost of one request with ``cached_prefix_tokens`` reusable from the cache."""
    if total < style.min_cacheable:
        return float(total)  # too short to cache: plain input price, no write premium
    cached = cached_prefix_tokens if cached_prefix_tokens >= style.min_cacheable else 0
    return style.read * cached + style.write * (total - cached)
