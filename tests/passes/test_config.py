"""Each pass's config model is strict and bounded; the pipeline names bad keys."""

from __future__ import annotations

import math
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
from ctxwarden.pipeline.presets import (
    PRESETS,
    PipelineConfig,
    PlannerConfig,
    ToolPolicy,
    build_passes,
    resolve_pipeline,
)

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


# --- settings that could never take effect are refused by key ---------------------


@pytest.mark.parametrize(
    ("preset", "overrides", "key", "message"),
    [
        (  # outputs were masked, not stubbed as the policy says
            "balanced",
            {"tools": {"bash": {"suppress": True}}, "suppress": {"enabled": False}},
            "pipeline.tools.bash.suppress",
            "the suppress pass is disabled",
        ),
        (  # exclude won silently
            "balanced",
            {"tools": {"bash": {"exclude": True, "suppress": True}}},
            "pipeline.tools.bash.suppress",
            "exclude keeps this tool's outputs whole",
        ),
        (  # conservative's order leaves summarize out: the key did nothing
            "conservative",
            {"summarize": {"keep_sentences": 3}},
            "pipeline.summarize.keep_sentences",
            "the summarize pass is not in pipeline.order (the conservative preset's)",
        ),
        (
            "conservative",
            {"trim_args": {"max_value_chars": 80, "enabled": False}},
            "pipeline.trim_args.enabled",
            "the trim_args pass is not in pipeline.order",
        ),
        (  # as an empty order is refused: no pass ran
            "balanced",
            {"order": ["truncate"], "truncate": {"enabled": False}},
            "pipeline.order",
            "every pass in it is disabled",
        ),
        ("balanced", {"suppress": {"min_tokens": 1_000_000}}, "pipeline.suppress.min_tokens",
         "unknown key"),  # was accepted: 5 outputs still suppressed
        ("balanced", {"truncate": {"min_tokens": 10}}, "pipeline.truncate.min_tokens",
         "unknown key"),  # was accepted and never read
    ],
)  # fmt: skip
def test_a_setting_that_would_do_nothing_is_refused_by_key(
    preset: str, overrides: dict[str, Any], key: str, message: str
) -> None:
    from ctxwarden.config import validated_config

    with pytest.raises(ConfigError) as info:
        validated_config({"preset": preset, "pipeline": overrides}, "ctxwarden.toml")
    assert info.value.key == key and info.value.source == "ctxwarden.toml"
    assert message in info.value.reason
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        # an order given with a table is taken as meant: the table waits for the pass
        ("balanced", {"order": ["dedupe", "mask"], "summarize": {"keep_sentences": 3}}),
        ("conservative", {"tools": {"beat": {"suppress": True}}}),
        ("balanced", {"mask": {"enabled": False, "min_tokens": 5}}),  # parked settings
        ("balanced", {"tools": {"bash": {"exclude": True, "suppress": False}}}),
        ("balanced", {"order": ["truncate", "mask"], "truncate": {"enabled": False}}),
        ("conservative", {"mask": {"min_tokens": 100}}),
    ],
)
def test_settings_that_can_take_effect_are_still_accepted(
    preset: str, overrides: dict[str, Any]
) -> None:
    resolve_pipeline(preset, overrides)


@pytest.mark.parametrize("base", sorted(PRESETS))
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_presets_own_tables_never_trip_the_checks(name: str, base: str) -> None:
    """Conservative's summarize table (enabled, outside its order) is its own: given
    whole as the pipeline over another preset, it is that preset."""
    assert resolve_pipeline(base, PRESETS[name].model_dump()) == PRESETS[name]
    assert resolve_pipeline(name, {}) == PRESETS[name]


def test_the_passes_that_read_no_size_threshold_have_none() -> None:
    from ctxwarden.passes.config import SuppressConfig

    for model in (SuppressConfig, TruncateConfig):
        assert "min_tokens" not in model.model_fields
    assert {"min_tokens"} <= set(MaskConfig.model_fields) & set(SummarizeConfig.model_fields)


# --- numbers: strict and finite ------------------------------------------------------


@pytest.mark.parametrize("value", ["5", True, "1e3"])
def test_keywords_per_1k_tokens_is_a_number_not_a_string_or_bool(value: Any) -> None:
    """The only float a string or bool was converted to ("5" -> 5.0, true -> 1.0)."""
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {"mask": {"keywords_per_1k_tokens": value}})
    assert info.value.key == "pipeline.mask.keywords_per_1k_tokens"
    whole = resolve_pipeline("balanced", {"mask": {"keywords_per_1k_tokens": 5}})
    assert whole.mask.keywords_per_1k_tokens == 5.0


_NOT_FINITE = [
    ({"planner": {"min_expected_turns": math.inf, "max_expected_turns": math.inf}},
     "pipeline.planner.min_expected_turns"),  # every cut scored inf: it condensed less
    ({"planner": {"lindy_factor": math.inf}}, "pipeline.planner.lindy_factor"),
    ({"mask": {"min_mention_score": math.inf}}, "pipeline.mask.min_mention_score"),
    ({"planner": {"floor_ratio": math.nan}}, "pipeline.planner.floor_ratio"),
    ({"mask": {"max_ratio": math.nan}}, "pipeline.mask.max_ratio"),
    ({"keep_newest_percent": -math.inf}, "pipeline.keep_newest_percent"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "key"), _NOT_FINITE)
def test_a_float_is_finite(overrides: dict[str, Any], key: str) -> None:
    """NaN was refused as "less than or equal to 1", which misdescribes it."""
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", overrides)
    assert info.value.key == key
    assert info.value.reason == "Input should be a finite number"


def test_inf_and_nan_in_a_toml_file_are_refused_by_key(tmp_path: Any) -> None:
    from ctxwarden.config import load_config

    path = tmp_path / "c.toml"
    for text, key in [
        ("[pipeline.planner]\nmin_expected_turns = inf\nmax_expected_turns = inf\n",
         "pipeline.planner.min_expected_turns"),
        ("[pipeline.planner]\nfloor_ratio = nan\n", "pipeline.planner.floor_ratio"),
    ]:  # fmt: skip
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.key == key and info.value.source == str(path)


# --- models built directly: ConfigError, one line naming the key --------------------


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: MaskConfig(min_tokenz=5), "MaskConfig.min_tokenz"),  # type: ignore[call-arg]
        (lambda: TruncateConfig(max_bytes=0), "TruncateConfig.max_bytes"),
        (lambda: PipelineConfig(keep_newest_outputs=-1), "PipelineConfig.keep_newest_outputs"),
        (lambda: PipelineConfig(mask={"min_tokens": -1}), "PipelineConfig.mask.min_tokens"),  # type: ignore[arg-type]
        (lambda: PlannerConfig(floor_ratio=math.nan), "PlannerConfig.floor_ratio"),
        (lambda: ToolPolicy(exclude=True, suppress=True), "ToolPolicy.suppress"),
    ],
)
def test_a_model_built_directly_raises_a_config_error_naming_the_key(build: Any, key: str) -> None:
    """It raised pydantic's four-line ValidationError; only EngineConfig was wrapped."""
    with pytest.raises(ConfigError) as info:
        build()
    assert not isinstance(info.value, ValidationError)
    assert info.value.key == key and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)  # as pydantic's error is: caught as before


def test_validating_a_model_keeps_pydantics_error_and_the_enclosing_key() -> None:
    """model_validate (and a model validated as a field of another) is pydantic's own
    path: its ValidationError, whose location the pipeline's error names in full."""
    with pytest.raises(ValidationError):
        MaskConfig.model_validate({"min_tokens": -1})
    with pytest.raises(ValidationError) as caught:
        PipelineConfig.model_validate({"mask": {"min_tokens": -1}})
    assert caught.value.errors()[0]["loc"] == ("mask", "min_tokens")
