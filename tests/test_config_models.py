"""EngineConfig's sections given as models: a model is the config it prints, all of
its fields, defaults included; a dict (a ``[pipeline]`` table) overrides the preset
key by key."""

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
    PASS_NAMES,
    PRESETS,
    PipelineConfig,
    PlannerConfig,
    ToolPolicy,
    resolve_pipeline,
)
from ctxwarden.store import MemoryStore
from tests.passes.convo import call_with, dumps, lines_of, request, result


def _resolved(config: EngineConfig) -> PipelineConfig:
    return resolve_pipeline(config.preset, config.pipeline)


def _conversation() -> dict[str, Any]:
    """Six turns of prose, long call arguments and outputs: each preset condenses it
    differently (checked below)."""
    turns: list[dict[str, Any]] = []
    for t in range(6):
        prose = "I will now inspect the module carefully. " * 30 + f"Turn {t} ends here."
        arguments = {"command": f"cat src/mod{t}.py", "content": "x = 1  # filler\n" * 40}
        turns.append(call_with(f"c{t}", "bash", arguments, prose))
        turns.append(result(f"c{t}", lines_of(f"t{t}", 120, extra=(f"ERROR: mod{t} failed",))))
    return request(*turns)


def _condensed(config: EngineConfig) -> bytes:
    with Engine(config, store=MemoryStore()) as engine:
        return dumps(engine.condense(_conversation(), api="openai.chat", one_shot=True).request)


def test_the_presets_condense_the_test_conversation_differently() -> None:
    outputs = {name: _condensed(EngineConfig(preset=name)) for name in PRESETS}
    assert len(set(outputs.values())) == len(PRESETS)


@pytest.mark.parametrize("base", sorted(PRESETS))
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_config_equal_to_a_preset_condenses_as_that_preset(name: str, base: str) -> None:
    """``preset="aggressive", pipeline=PRESETS["balanced"]`` ran aggressive (a model
    counted as the fields it was given, and a preset's are none); over another preset,
    a mix of the two, or a ConfigError naming a key nobody wrote."""
    expected = _condensed(EngineConfig(preset=name))
    loaded = PipelineConfig.model_validate(PRESETS[name].model_dump())  # every field set
    for equal in (PRESETS[name], loaded, *([PipelineConfig()] if name == "balanced" else [])):
        assert equal == PRESETS[name]
        config = EngineConfig(preset=base, pipeline=equal)
        assert _resolved(config) == PRESETS[name]
        assert _condensed(config) == expected


def test_a_printed_model_is_the_model_that_runs() -> None:
    """The user's model said summarize.enabled=False, min_tokens=300 (SummarizeConfig's
    own defaults); the engine ran the pipeline's enabled=True, min_tokens=40."""
    mine = PipelineConfig(summarize=SummarizeConfig(keep_sentences=3))
    assert _resolved(EngineConfig(pipeline=mine)) == mine
    assert mine.summarize == PRESETS["balanced"].summarize.model_copy(update={"keep_sentences": 3})
    mask = MaskConfig(min_tokens=90)  # aggressive's mask keeps 40 keywords; this one 100
    config = EngineConfig(preset="aggressive", pipeline={"mask": mask})
    assert _resolved(config).mask == mask
    assert _resolved(config).planner == PRESETS["aggressive"].planner  # the rest: aggressive


def test_every_pass_models_defaults_are_the_balanced_table() -> None:
    """So a model built with a few fields is balanced's table with those changed."""
    balanced = PRESETS["balanced"]
    assert PipelineConfig() == balanced
    for name in PASS_NAMES:
        settings = getattr(balanced, name)
        assert settings == type(settings)(), name


def test_a_dict_still_overrides_only_its_keys() -> None:
    config = EngineConfig(preset="aggressive", pipeline={"mask": {"min_tokens": 90}})
    mask = _resolved(config).mask
    assert (mask.min_tokens, mask.max_keywords) == (90, PRESETS["aggressive"].mask.max_keywords)


def test_a_pass_model_enabled_outside_the_order_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        validated_config(
            {"preset": "conservative", "pipeline": {"summarize": SummarizeConfig(enabled=True)}}
        )
    assert info.value.key == "pipeline.summarize.enabled"


def test_a_pass_model_is_not_a_pipeline() -> None:
    wrong = EngineConfig(pipeline=TruncateConfig(max_bytes=10))
    with pytest.raises(ConfigError) as info:
        _resolved(wrong)  # a pass's settings are not the whole pipeline
    assert info.value.key.startswith("pipeline.") and info.value.reason == "unknown key"


def test_the_models_of_the_pipeline_tables_stand_for_all_their_fields() -> None:
    model = PipelineConfig(
        recency_tokens=500,
        mask=MaskConfig(min_tokens=80),
        planner=PlannerConfig(floor_tokens=64),
        tools={"bash": ToolPolicy(exclude=True)},
    )
    for preset in PRESETS:
        as_model = EngineConfig(preset=preset, pipeline=model)
        assert as_model == EngineConfig(preset=preset, pipeline=model.model_dump())
        assert _resolved(as_model) == model
        with Engine(as_model.model_copy(update={"store": StoreConfig(backend="memory")})):
            pass


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
        "summarize": st.fixed_dictionaries({}, optional={"keep_sentences": st.integers(1, 5)}),
        "truncate": st.fixed_dictionaries({}, optional={"max_lines": st.integers(1, 5000)}),
        "planner": st.fixed_dictionaries({}, optional={"floor_tokens": st.integers(0, 500)}),
    },
)


@given(preset=st.sampled_from(sorted(PRESETS)), table=_SETTINGS)
def test_a_pipeline_model_runs_as_it_prints_over_any_preset(
    preset: str, table: dict[str, Any]
) -> None:
    model = PipelineConfig.model_validate(table)
    as_model = EngineConfig(preset=preset, pipeline=model)
    assert _resolved(as_model) == model
    assert resolve_pipeline(preset, model.model_dump()) == model


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
