"""EngineConfig's sections given as models: each is the same config as its values
written as a dict (a ``[pipeline]`` table overrides the preset field by field)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from ctxwarden import ConfigError, Engine, EngineConfig
from ctxwarden.config import BudgetConfig, StoreConfig, validated_config
from ctxwarden.passes.config import MaskConfig, SummarizeConfig, TruncateConfig
from ctxwarden.pipeline.presets import (
    PRESETS,
    PipelineConfig,
    PlannerConfig,
    ToolPolicy,
    resolve_pipeline,
)


def _resolved(config: EngineConfig) -> PipelineConfig:
    return resolve_pipeline(config.preset, config.pipeline)


def test_a_pipeline_model_is_accepted_as_its_values_written_as_a_dict() -> None:
    """It was refused: 'pipeline: Input should be a valid dictionary'."""
    model = PipelineConfig(
        recency_tokens=500,
        mask=MaskConfig(min_tokens=80),
        planner=PlannerConfig(floor_tokens=64),
        tools={"bash": ToolPolicy(exclude=True)},
    )
    table = {
        "recency_tokens": 500,
        "mask": {"min_tokens": 80},
        "planner": {"floor_tokens": 64},
        "tools": {"bash": {"exclude": True}},
    }
    for preset in PRESETS:
        as_model = EngineConfig(preset=preset, pipeline=model)
        assert as_model == EngineConfig(preset=preset, pipeline=table)
        assert _resolved(as_model).mask.max_keywords == PRESETS[preset].mask.max_keywords
        with Engine(as_model.model_copy(update={"store": StoreConfig(backend="memory")})):
            pass


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_given_as_the_pipeline_model_is_that_preset(name: str) -> None:
    config = EngineConfig(preset="balanced", pipeline=PRESETS[name])
    assert _resolved(config) == PRESETS[name]


def test_models_inside_the_pipeline_dict_override_only_what_they_were_given() -> None:
    """A MaskConfig in the dict replaced the preset's whole mask table with the
    model's defaults (aggressive's max_keywords = 40 became 100), and a pass enabled
    by a model escaped the check that it is in the order."""
    config = EngineConfig(preset="aggressive", pipeline={"mask": MaskConfig(min_tokens=90)})
    assert config == EngineConfig(preset="aggressive", pipeline={"mask": {"min_tokens": 90}})
    mask = _resolved(config).mask
    assert (mask.min_tokens, mask.max_keywords) == (90, PRESETS["aggressive"].mask.max_keywords)
    with pytest.raises(ConfigError) as info:
        validated_config(
            {"preset": "conservative", "pipeline": {"summarize": SummarizeConfig(enabled=True)}}
        )
    assert info.value.key == "pipeline.summarize.enabled"


def test_a_bad_value_in_a_pipeline_model_is_named_as_in_a_dict() -> None:
    wrong = EngineConfig(pipeline=TruncateConfig(max_bytes=10))
    with pytest.raises(ConfigError) as info:
        _resolved(wrong)  # a pass's settings are not the whole pipeline
    assert info.value.key == "pipeline.max_bytes" and info.value.reason == "unknown key"


@pytest.mark.parametrize(
    ("section", "model", "table"),
    [
        ("budget", BudgetConfig(context_window=9000, style="openai"), {"context_window": 9000,
                                                                        "style": "openai"}),
        ("store", StoreConfig(backend="memory", ttl_seconds=60), {"backend": "memory",
                                                                  "ttl_seconds": 60}),
    ],
)  # fmt: skip
def test_the_other_sections_take_a_model_too(
    section: str, model: BaseModel, table: dict[str, Any]
) -> None:
    assert EngineConfig(**{section: model}) == EngineConfig(**{section: table})


_SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "recency_tokens": st.integers(0, 9000),
        "keep_newest_outputs": st.integers(0, 5),
        "mask": st.fixed_dictionaries(
            {},
            optional={
                "min_tokens": st.integers(0, 500),
                "max_keywords": st.integers(0, 300),
                "keywords_per_1k_tokens": st.floats(0, 100),
            },
        ),
        "truncate": st.fixed_dictionaries({}, optional={"max_lines": st.integers(1, 5000)}),
        "planner": st.fixed_dictionaries({}, optional={"floor_tokens": st.integers(0, 500)}),
    },
)


@given(preset=st.sampled_from(sorted(PRESETS)), table=_SETTINGS)
def test_a_pipeline_model_resolves_as_its_table(preset: str, table: dict[str, Any]) -> None:
    model = PipelineConfig.model_validate(table)
    as_model = EngineConfig(preset=preset, pipeline=model)
    assert as_model.pipeline == table
    assert _resolved(as_model) == resolve_pipeline(preset, table)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"store": {"ttl_seconds": True}}, "store.ttl_seconds"),  # was 1 second: gc dropped all
        ({"store": {"max_bytes": True}}, "store.max_bytes"),
        ({"store": {"max_bytes": "5"}}, "store.max_bytes"),
        ({"store": {"timeout_seconds": "5"}}, "store.timeout_seconds"),
        ({"store": {"breaker_seconds": False}}, "store.breaker_seconds"),
        ({"budget": {"context_window": True}}, "budget.context_window"),  # was a 1-token window
        ({"budget": {"context_window": "128000"}}, "budget.context_window"),
        ({"pipeline": {"planner": {"floor_ratio": True}}}, "pipeline.planner.floor_ratio"),
        ({"pipeline": {"mask": {"max_ratio": "0.5"}}}, "pipeline.mask.max_ratio"),
    ],
)
def test_a_number_of_the_wrong_type_is_refused_not_converted(
    data: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        validated_config(data)
    assert caught.value.key == key


def test_a_whole_number_is_a_number_of_seconds() -> None:
    config = validated_config({"store": {"timeout_seconds": 5, "gc_interval_seconds": 0}})
    assert config.store.timeout_seconds == 5.0 and isinstance(config.store.timeout_seconds, float)


def test_a_gate_of_the_wrong_type_is_refused(tmp_path: Any) -> None:
    from ctxwarden.replay.gates import load_gates

    path = tmp_path / "gates.toml"
    path.write_text("[gates]\nmax_integrity_violations = true\n")  # was <= 1: a looser gate
    with pytest.raises(ConfigError) as caught:
        load_gates(path)
    assert caught.value.key == "gates.max_integrity_violations"
    path.write_text("[gates]\nmin_reduction = 0\nmax_p95_ms = 10\n")  # whole numbers are fine
    assert load_gates(path).max_p95_ms == 10.0
