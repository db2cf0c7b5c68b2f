"""A setting that turns a pass on must find the pass in ``order`` (else it did nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.errors import ConfigError
from ctxwarden.pipeline.presets import build_passes, resolve_pipeline


@pytest.mark.parametrize(
    ("preset", "overrides", "key"),
    [
        ("balanced", {"order": ["dedupe", "mask"], "tools": {"beat": {"suppress": True}}},
         "pipeline.tools.beat.suppress"),
        ("conservative", {"summarize": {"enabled": True}}, "pipeline.summarize.enabled"),
        ("conservative", {"trim_args": {"enabled": True}}, "pipeline.trim_args.enabled"),
    ],
)  # fmt: skip
def test_a_pass_turned_on_outside_the_order_is_refused_by_key(
    preset: str, overrides: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_pipeline(preset, overrides)
    assert caught.value.key == key


def test_conservative_suppresses_a_tool_it_is_told_to() -> None:
    config = resolve_pipeline("conservative", {"tools": {"beat": {"suppress": True}}})
    assert "suppress" in [p.name for p in build_passes(config)]
    # and turning on a pass that is in the order is fine
    resolve_pipeline("conservative", {"mask": {"enabled": True}})


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"recency_tokens": True}, "pipeline.recency_tokens"),
        ({"mask": {"min_tokens": "60"}}, "pipeline.mask.min_tokens"),
        ({"mask": {"min_tokens": 1e3}}, "pipeline.mask.min_tokens"),
        ({"tools": {"grep": {"min_tokens": 2.5}}}, "pipeline.tools.grep.min_tokens"),
    ],
)
def test_a_count_is_a_whole_number_not_a_bool_string_or_float(
    overrides: dict[str, Any], key: str
) -> None:
    """Counts were coerced (``true`` became 1, "60" and 1e3 were taken)."""
    with pytest.raises(ConfigError) as caught:
        resolve_pipeline("balanced", overrides)
    assert caught.value.key == key
