"""The planner's cost helpers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.pipeline.costs import common_prefix

# few distinct values, so that long shared prefixes and late differences both occur
_HASHES = st.lists(st.sampled_from(["a", "b", "c"]), max_size=300)


@given(_HASHES, _HASHES, st.integers(min_value=0, max_value=300))
def test_common_prefix_is_the_longest_shared_start(a: list[str], b: list[str], k: int) -> None:
    b = a[:k] + b  # a shared start of up to k elements, then anything
    n = common_prefix(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]
    assert common_prefix(b, a) == n


def test_conservative_prices_add_the_models_own_when_they_differ_from_both() -> None:
    from ctxwarden.pipeline.costs import price_styles
    from ctxwarden.tokens.registry import load_registry

    registry = load_registry()
    usual = price_styles("conservative", registry.pricing_for(registry.lookup("gpt-4o")))
    assert [s.name for s in usual] == ["openai", "anthropic"]
    cheap_reads = registry.pricing_for(registry.lookup("claude-fable-5-1"))
    styles = price_styles("conservative", cheap_reads)
    assert [s.name for s in styles] == ["openai", "anthropic", "model"]
    assert styles[-1].read == 0.025 and styles[-1].write == 1.25
