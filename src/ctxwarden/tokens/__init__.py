"""Token counting (offline tiktoken), the model registry and budgets."""

from ctxwarden.tokens.budget import BANDS, Band, Budget, make_budget
from ctxwarden.tokens.counter import TokenCounter, TokenizerSpec
from ctxwarden.tokens.encoding import get_encoding
from ctxwarden.tokens.registry import CachePricing, ModelInfo, Registry, load_registry

__all__ = [
    "BANDS",
    "Band",
    "Budget",
    "CachePricing",
    "ModelInfo",
    "Registry",
    "TokenCounter",
    "TokenizerSpec",
    "get_encoding",
    "load_registry",
    "make_budget",
]
