"""Registry lookup, window selection order, pressure and bands."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden import Engine, EngineConfig
from ctxwarden.tokens.budget import BANDS, Budget, make_budget
from ctxwarden.tokens.registry import load_registry


def test_registry_lookup_normalizes_names() -> None:
    registry = load_registry()
    assert registry.lookup("gpt-4o-mini-2024-07-18").id == "gpt-4o-mini"  # type: ignore[union-attr]
    assert registry.lookup("openai/gpt-5-mini").id == "gpt-5-mini"  # type: ignore[union-attr]
    assert registry.lookup("openai/Claude-Haiku-4.5").id == "claude-haiku-4-5"  # type: ignore[union-attr]
    # a longer id matches only up to a dash: a dated gpt-5 snapshot is no gpt-5.2
    assert registry.lookup("gpt-5-2025-08-07").id == "gpt-5"  # type: ignore[union-attr]
    assert registry.lookup("gpt-5.2").id == "gpt-5-2"  # type: ignore[union-attr]
    assert registry.lookup("claude-opus-4-1-20250805").id == "claude-opus-4"  # type: ignore[union-attr]
    # Vertex AI (``@``) and Amazon Bedrock (``anthropic.``, ``us.anthropic.``) ids
    for name, found in [
        ("claude-fable-5-1@20260901", "claude-fable-5-1"),
        ("claude-opus-5-5@20261001", "claude-opus-5-5"),
        ("anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4"),
        ("openai/gpt-4o:free", "gpt-4o"),
        # OpenAI fine-tunes name their base model after ``ft:`` (were unknown: a 32k
        # fallback window and estimated counts)
        ("ft:gpt-4o-mini-2024-07-18:my-org::9abcDEF", "gpt-4o-mini"),
        ("ft:gpt-4.1-2025-04-14:acme:custom-suffix:B1c2", "gpt-4.1"),
    ]:
        assert registry.lookup(name).id == found, name  # type: ignore[union-attr]
    assert registry.lookup("deepseek/deepseek-chat").context_window == 128000  # type: ignore[union-attr]
    assert registry.lookup("totally-unknown-model") is None
    assert registry.version


def test_window_selection_order() -> None:
    kw = {"fallback_window": 32768, "fallback_reserve": 4096}
    assert (
        make_budget(
            configured_window=1000,
            configured_reserve=None,
            registry_window=5000,
            registry_reserve=100,
            observed_tokens=None,
            **kw,
        ).window_source
        == "config"
    )
    assert (
        make_budget(
            configured_window=None,
            configured_reserve=None,
            registry_window=5000,
            registry_reserve=100,
            observed_tokens=None,
            **kw,
        ).window_source
        == "registry"
    )
    observed = make_budget(
        configured_window=None,
        configured_reserve=None,
        registry_window=None,
        registry_reserve=None,
        observed_tokens=90_000,
        **kw,
    )
    assert (observed.window_source, observed.context_window) == ("observed", 90_000)
    assert (
        make_budget(
            configured_window=None,
            configured_reserve=None,
            registry_window=None,
            registry_reserve=None,
            observed_tokens=10,
            **kw,
        ).window_source
        == "fallback"
    )


def test_engine_reports_window_source() -> None:
    engine = Engine(EngineConfig(store={"backend": "memory"}))  # type: ignore[arg-type]
    request = {"model": "mystery-1", "messages": [{"role": "user", "content": "hi"}]}
    assert engine.condense(request).report["window_source"] == "fallback"
    engine.observe_usage("mystery-1", 150_000)
    assert engine.condense(request).report["window_source"] == "observed"
    configured = Engine(EngineConfig(store={"backend": "memory"}, budget={"context_window": 16000}))  # type: ignore[arg-type]
    assert configured.condense(request).report["context_window"] == 16000


def test_seed_thresholds() -> None:
    big = Budget(200_000, 16_384, "registry")
    assert big.hard_trigger == 170_000  # 85% cap for >= 200k
    mid = Budget(128_000, 8_192, "registry")
    assert mid.hard_trigger == 112_640  # 88% cap
    assert mid.soft_trigger == max(int(0.7 * 112_640), 112_640 - 6_400)


@given(
    window=st.integers(4096, 2_000_000),
    reserve=st.integers(0, 64_000),
    used=st.integers(0, 3_000_000),
)
def test_bands_are_monotonic(window: int, reserve: int, used: int) -> None:
    budget = Budget(window, reserve, "config")
    assert budget.soft_trigger <= budget.hard_trigger
    assert BANDS.index(budget.band(used)) <= BANDS.index(budget.band(used + 1000))
    assert budget.pressure(used) == used / max(1, window - reserve)


def _chosen(**kw: int | None) -> Budget:
    base: dict[str, int | None] = dict(
        configured_window=None, configured_reserve=None, registry_window=None,
        registry_reserve=None, observed_tokens=None, fallback_window=128_000,
        fallback_reserve=4_096,
    )  # fmt: skip
    return make_budget(**{**base, **kw})  # type: ignore[arg-type]


def test_a_reserve_that_does_not_fit_the_window_is_cut_to_a_quarter() -> None:
    """A small configured window with the model's registry reserve (16K of 8K) made
    every request 'hard' and forced a step on each; so did a configured reserve past
    the model's window."""
    small = _chosen(configured_window=8_000, registry_window=200_000, registry_reserve=16_384)
    assert (small.output_reserve, small.band(100)) == (2_000, "low")
    past = _chosen(configured_reserve=500_000, registry_window=128_000, registry_reserve=16_384)
    assert (past.output_reserve, past.window_source) == (32_000, "registry")
    # a reserve that fits stays as given, a registry one for a configured window only
    # while it leaves half of it
    assert _chosen(configured_window=8_000, registry_reserve=4_000).output_reserve == 4_000
    assert _chosen(configured_window=8_000, registry_reserve=4_001).output_reserve == 2_000
    assert _chosen(configured_window=8_000, configured_reserve=7_000).output_reserve == 7_000
    assert _chosen(registry_window=200_000, registry_reserve=128_000).output_reserve == 128_000


@given(
    st.one_of(st.none(), st.integers(1, 10**6)),
    st.one_of(st.none(), st.integers(0, 10**6)),
    st.one_of(st.none(), st.integers(1, 10**6)),
    st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_the_reserve_always_leaves_room_for_the_request(
    window: int | None,
    reserve: int | None,
    registry_window: int | None,
    registry_reserve: int | None,
) -> None:
    budget = _chosen(
        configured_window=window, configured_reserve=reserve,
        registry_window=registry_window, registry_reserve=registry_reserve,
    )  # fmt: skip
    assert budget.output_reserve < budget.context_window
