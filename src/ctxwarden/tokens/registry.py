"""The versioned model registry (``models.json``): windows, reserves, tokenizers, prices.

``binds_thinking`` marks models whose thinking blocks are bound to what preceded them
(Anthropic's "preserved thinking": the API refuses, or silently drops, a returned
thinking block whose prefix - system, tools and the messages before it - differs from
the one it was produced for). A model the registry does not know is taken to bind
(:meth:`Registry.binds_thinking`): the safe guess for one newer than this file.

Model names are matched after normalisation (lower case, provider prefixes such as
``openai/`` dropped, dots read as dashes), exactly first and then by the longest
registry id the name starts with where the name goes on with no letter or digit, so
``gpt-4o-mini-2024-07-18`` finds ``gpt-4o-mini``, ``claude-opus-5-5@20261001`` finds
``claude-opus-5-5``, and ``gpt-5-2025-08-07`` finds ``gpt-5``, not ``gpt-5-2``.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from ctxwarden.tokens.counter import TokenizerSpec

__all__ = [
    "CachePricing",
    "ModelInfo",
    "Registry",
    "load_registry",
    "model_binds_thinking",
    "normalize_model_name",
]


class CachePricing(BaseModel):
    """Prompt-cache price multipliers relative to the uncached input price."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    uncached: float = Field(1.0, gt=0)
    cached_read: float = Field(0.1, ge=0)
    cache_write: float = Field(1.0, ge=0)
    min_cacheable_tokens: int = Field(1024, ge=0)


class ModelInfo(BaseModel):
    """One registry entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    provider: str
    context_window: int = Field(gt=0)
    max_output: int = Field(gt=0)
    output_reserve: int = Field(ge=0)
    tokenizer: str
    cache: str
    binds_thinking: bool = False


class _Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    fallback_context_window: int = Field(gt=0)
    fallback_output_reserve: int = Field(ge=0)


class Registry(BaseModel):
    """The whole registry file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str
    defaults: _Defaults
    models: tuple[ModelInfo, ...]
    tokenizers: dict[str, TokenizerSpecModel]
    cache_pricing: dict[str, CachePricing]

    _by_id: dict[str, ModelInfo] = PrivateAttr(default_factory=dict)
    """The entries by normalized id, built once (a lookup runs on every request)."""

    def model_post_init(self, context: object, /) -> None:
        self._by_id = {normalize_model_name(m.id): m for m in self.models}

    def lookup(self, name: str | None) -> ModelInfo | None:
        """The entry for a model name, or ``None`` when the registry does not know it."""
        if not name:
            return None
        return _lookup(self._by_id, normalize_model_name(name))

    def binds_thinking(self, info: ModelInfo | None) -> bool:
        """Whether a model's thinking blocks are bound to their prefix (module doc);
        ``True`` for a model the registry does not know."""
        return True if info is None else info.binds_thinking

    def tokenizer_for(self, info: ModelInfo | None) -> TokenizerSpec:
        """The tokenizer spec of a model (unknown models: an o200k estimate)."""
        key = info.tokenizer if info else "estimate:other"
        spec = self.tokenizers[key]
        return TokenizerSpec(encoding=spec.encoding, scale=spec.scale, confidence=spec.confidence)

    def pricing_for(self, info: ModelInfo | None, style: str | None = None) -> CachePricing:
        """Cache pricing by explicit style (``openai`` / ``anthropic``) or the model's own."""
        key = style or (info.cache if info else "openai")
        return self.cache_pricing[key]


class TokenizerSpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    encoding: str
    scale: float = Field(1.0, gt=0)
    confidence: float = Field(1.0, gt=0, le=1)


Registry.model_rebuild()


_PROVIDER_PREFIX = re.compile(r"^(?:[a-z]{2,6}-)?anthropic-(?=claude)|^ft:")
"""Amazon Bedrock's ``anthropic.`` and cross-region ``us.anthropic.`` id prefixes (after
dots became dashes), and OpenAI's ``ft:`` of a fine-tuned model
(``ft:gpt-4o-mini-2024-07-18:org::id`` has its base model's window and tokenizer)."""


def normalize_model_name(name: str) -> str:
    """Lower case, last path segment (``openai/gpt-5-mini`` -> ``gpt-5-mini``), dots as
    dashes, a Bedrock provider prefix or a fine-tune's ``ft:`` dropped
    (``us.anthropic.claude-...``, ``ft:gpt-4o-mini-...:org::id``)."""
    base = name.strip().lower().rsplit("/", 1)[-1].replace(".", "-")
    return _PROVIDER_PREFIX.sub("", base)


def _lookup(by_id: dict[str, ModelInfo], name: str) -> ModelInfo | None:
    """The entry named exactly, else the longest id the name starts with where the
    name goes on with no letter or digit (``gpt-5-2025-08-07`` is ``gpt-5``, not
    ``gpt-5-2``; ``claude-fable-5-1@20260101`` is ``claude-fable-5-1``)."""
    if name in by_id:
        return by_id[name]
    best: ModelInfo | None = None
    best_len = 0
    for key, info in by_id.items():
        if len(key) > best_len and name.startswith(key) and not name[len(key)].isalnum():
            best, best_len = info, len(key)
    return best


def model_binds_thinking(model: object) -> bool:
    """Whether the shipped registry takes ``model`` (a request's ``model`` value) to bind
    its thinking blocks to their prefix (a model it does not know, or none named, does)."""
    registry = load_registry()
    return registry.binds_thinking(registry.lookup(model if isinstance(model, str) else None))


@functools.cache
def load_registry() -> Registry:
    """The registry shipped with the package."""
    data = resources.files("ctxwarden.tokens").joinpath("models.json").read_bytes()
    return Registry.model_validate(orjson.loads(data))
