"""Each pass's config model is strict and bounded; the pipeline names bad keys."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from ctxwarden import ConfigError, Engine, EngineConfig
from ctxwarden.passes.config import (
    DedupeConfig,
    MaskConfig,
    NormalizeConfig,
    SummarizeConfig,
    SupersedeConfig,
    TruncateConfig,
)
from ctxwarden.pipeline.presets import PRESETS, PipelineConfig, build_passes, resolve_pipeline

CONFIGS: dict[str, type[BaseModel]] = {
    "dedupe": DedupeConfig,
    "supersede": SupersedeConfig,
    "normalize": NormalizeConfig,
    "truncate": TruncateConfig,
    "mask": MaskConfig,
    "summarize": SummarizeConfig,
}

# (pass, field, bad value): each is out of the field's documented bounds or type.
BAD_VALUES: list[tuple[str, str, Any]] = [
    ("dedupe", "min_tokens", -1),
    ("dedupe", "enabled", "sometimes"),
    ("dedupe", "min_band", "severe"),
    ("dedupe", "min_request_tokens", -1),
    ("supersede", "keep_newest", 0),
    ("supersede", "keep_newest", 21),
    ("supersede", "file_reads", [1]),
    ("normalize", "repeat_run", 1),
    ("normalize", "min_saving_tokens", -5),
    ("truncate", "max_bytes", 0),
    ("truncate", "max_lines", -1),
    ("truncate", "head_lines", -1),
    ("mask", "min_tokens", -1),
    ("mask", "head_lines", 201),
    ("mask", "max_keywords", 2001),
    ("mask", "max_ratio", 0),
    ("mask", "max_ratio", 1.5),
    ("summarize", "keep_sentences", 0),
    ("summarize", "keep_sentences", 21),
    ("summarize", "min_tokens", "many"),
]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_defaults_validate_and_are_frozen(name: str) -> None:
    model = CONFIGS[name]()
    with pytest.raises(ValidationError):
        model.enabled = False  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_unknown_key_is_rejected(name: str) -> None:
    with pytest.raises(ValidationError, match="extra"):
        CONFIGS[name].model_validate({"min_tokenz": 10})


@pytest.mark.parametrize(("name", "key", "value"), BAD_VALUES)
def test_bad_value_is_rejected_by_the_model(name: str, key: str, value: Any) -> None:
    with pytest.raises(ValidationError) as info:
        CONFIGS[name].model_validate({key: value})
    assert info.value.errors()[0]["loc"][0] == key


@pytest.mark.parametrize(("name", "key", "value"), BAD_VALUES)
def test_resolve_pipeline_names_the_bad_key(name: str, key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {name: {key: value}})
    assert info.value.key == f"pipeline.{name}.{key}"
    assert str(info.value).startswith(f"pipeline.{name}.{key}:")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_resolve_pipeline_rejects_unknown_pass_key(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("aggressive", {name: {"no_such_setting": 1}})
    assert info.value.key == f"pipeline.{name}.no_such_setting"


def test_resolve_pipeline_rejects_unknown_top_level_and_planner_keys() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {"maks": {"min_tokens": 1}})
    assert info.value.key == "pipeline.maks"
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {"planner": {"floor_ratio": 2}})
    assert info.value.key == "pipeline.planner.floor_ratio"
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {"order": ["mask", "shrink"]})
    assert info.value.key.startswith("pipeline.order")
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {"tools": {"bash": {"exclude": "yes please"}}})
    assert info.value.key == "pipeline.tools.bash.exclude"


def test_unknown_preset_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("reckless", {})
    assert info.value.key == "preset"


def test_engine_reports_bad_pipeline_config_as_config_error() -> None:
    """When the engine is made, not on its first request (where it would only show as a
    fallback of every request)."""
    config = EngineConfig(store={"backend": "memory"}, pipeline={"mask": {"min_tokens": -3}})  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        Engine(config)
    assert info.value.key == "pipeline.mask.min_tokens"


def test_overrides_deep_merge_into_the_preset() -> None:
    merged = resolve_pipeline("conservative", {"mask": {"head_lines": 9}})
    base = PRESETS["conservative"]
    assert merged.mask.head_lines == 9
    # Untouched siblings keep the preset's values, not the model defaults.
    assert merged.mask.min_tokens == base.mask.min_tokens
    assert merged.mask.tail_lines == base.mask.tail_lines
    assert merged.recency_tokens == base.recency_tokens
    assert merged.order == base.order


def test_no_overrides_returns_the_preset_itself() -> None:
    for name, preset in PRESETS.items():
        assert resolve_pipeline(name, {}) == preset
        assert isinstance(preset, PipelineConfig)


def test_presets_differ_in_aggressiveness() -> None:
    c, b, a = PRESETS["conservative"], PRESETS["balanced"], PRESETS["aggressive"]
    assert c.recency_tokens >= b.recency_tokens >= a.recency_tokens
    assert c.mask.min_tokens >= b.mask.min_tokens >= a.mask.min_tokens
    assert c.mask.min_tokens > a.mask.min_tokens
    assert a.summarize.enabled
    assert c != b != a


def test_build_passes_follows_order_and_enabled() -> None:
    config = resolve_pipeline(
        "balanced",
        {
            "order": ["mask", "dedupe", "summarize"],
            "dedupe": {"enabled": False},
            "summarize": {"enabled": True},
        },
    )
    assert [p.name for p in build_passes(config)] == ["mask", "summarize"]
    off = resolve_pipeline("balanced", {"order": ["summarize"], "summarize": {"enabled": False}})
    assert build_passes(off) == []
    aggressive = build_passes(PRESETS["aggressive"])
    assert [p.name for p in aggressive] == list(PRESETS["aggressive"].order)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"tools": {"bash": {"exclude": "yes"}}}, "pipeline.tools.bash.exclude"),
        ({"mask": {"enabled": 1}}, "pipeline.mask.enabled"),
        ({"normalize": {"minify_json": "false"}}, "pipeline.normalize.minify_json"),
    ],
)
def test_switches_take_true_or_false_only(overrides: dict[str, Any], key: str) -> None:
    # "yes", 1 or "false" would be read as some boolean: a switch is written true / false
    with pytest.raises(ConfigError) as caught:
        resolve_pipeline("balanced", overrides)
    assert key in str(caught.value)


@pytest.mark.parametrize(
    ("data", "key", "message"),
    [
        (
            {"budget": {"context_window": 1000, "output_reserve": 1000}},
            "budget",
            "output_reserve (1,000) leaves no room in context_window (1,000)",
        ),
        (
            {"pipeline": {"planner": {"min_expected_turns": 30, "max_expected_turns": 10}}},
            "pipeline.planner.max_expected_turns",
            "10 is below min_expected_turns (30)",
        ),
        (
            {"pipeline": {"order": ["dedupe", "mask", "dedupe"]}},
            "pipeline.order",
            "names dedupe more than once",
        ),
        ({"pipeline": {"order": []}}, "pipeline.order", "is empty: no pass would run"),
    ],
)
def test_values_that_contradict_each_other_are_refused_by_key(
    data: dict[str, Any], key: str, message: str
) -> None:
    """Each used to be accepted: the larger bound silently won, a pass ran twice, or
    no pass ran at all."""
    from ctxwarden.config import validated_config

    with pytest.raises(ConfigError) as info:
        validated_config(data, "ctxwarden.toml")
    assert info.value.key == key and info.value.source == "ctxwarden.toml"
    assert message in info.value.reason and "Value error" not in str(info.value)


def test_consistent_bounds_and_every_preset_still_validate() -> None:
    from ctxwarden.config import validated_config

    validated_config({"budget": {"context_window": 1000, "output_reserve": 999}})
    validated_config({"pipeline": {"planner": {"min_expected_turns": 8, "max_expected_turns": 8}}})
    for preset in PRESETS:
        validated_config({"preset": preset})


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_min_expected_turns_alone_over_the_presets_maximum_is_named(preset: str) -> None:
    """Only min_expected_turns given, above the preset's max_expected_turns: the
    error named max_expected_turns, a key the file does not hold."""
    from ctxwarden.config import validated_config

    high = PRESETS[preset].planner.max_expected_turns
    data = {"preset": preset, "pipeline": {"planner": {"min_expected_turns": high + 1}}}
    with pytest.raises(ConfigError) as info:
        validated_config(data, "ctxwarden.toml")
    assert info.value.key == "pipeline.planner.min_expected_turns"
    assert info.value.source == "ctxwarden.toml"
    assert f"above max_expected_turns ({high:g} in the {preset} preset)" in info.value.reason
    assert "set max_expected_turns too" in info.value.reason


@given(
    preset=st.sampled_from(sorted(PRESETS)),
    low=st.none() | st.integers(0, 60),
    high=st.none() | st.integers(0, 60),
)
def test_a_turns_error_names_a_key_that_was_given(
    preset: str, low: int | None, high: int | None
) -> None:
    """Whichever of the two bounds are given, a refusal names one of them; what is
    accepted keeps min_expected_turns <= max_expected_turns."""
    planner = {
        key: value
        for key, value in (("min_expected_turns", low), ("max_expected_turns", high))
        if value is not None
    }
    try:
        resolved = resolve_pipeline(preset, {"planner": planner})
    except ConfigError as exc:
        assert exc.key.removeprefix("pipeline.planner.") in planner
    else:
        assert resolved.planner.min_expected_turns <= resolved.planner.max_expected_turns
