"""The pipeline configuration, its presets, and building passes from it.

Presets are plain :class:`PipelineConfig` instances. An engine config names a preset
and may override any field (``[pipeline]`` table in TOML, deep-merged, strictly
validated; errors name the key, e.g. ``pipeline.mask.min_tokens``). A model given in
place of a table is all of its fields, as it prints; a whole :class:`PipelineConfig`
is the pipeline that runs, the preset unused (:func:`resolve_pipeline`).

A setting that could never take effect is refused, naming its key, rather than
accepted and ignored: a pass's table over a preset whose order leaves the pass out, a
tool's ``suppress`` while the suppress pass is left out or disabled (or with the tool's
``exclude``, which keeps its outputs whole), an order whose every pass is disabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from ctxwarden.config import ConfigModel, config_error, overrides_of
from ctxwarden.errors import ConfigError
from ctxwarden.passes.base import Pass
from ctxwarden.passes.config import (
    DedupeConfig,
    MaskConfig,
    NormalizeConfig,
    SummarizeConfig,
    SupersedeConfig,
    SuppressConfig,
    TrimArgsConfig,
    TruncateConfig,
)
from ctxwarden.passes.dedupe import DedupePass
from ctxwarden.passes.mask import MaskPass
from ctxwarden.passes.normalize import NormalizePass
from ctxwarden.passes.summarize import SummarizePass
from ctxwarden.passes.supersede import SupersedePass
from ctxwarden.passes.suppress import SuppressPass
from ctxwarden.passes.trim_args import TrimArgsPass
from ctxwarden.passes.truncate import TruncatePass

__all__ = [
    "PASS_NAMES",
    "PRESETS",
    "PipelineConfig",
    "PlannerConfig",
    "ToolPolicy",
    "build_passes",
    "resolve_pipeline",
    "unmatched_tool_policies",
]

PassName = Literal[
    "dedupe", "supersede", "normalize", "suppress", "mask", "truncate", "summarize", "trim_args"
]
PASS_NAMES: tuple[PassName, ...] = (
    "dedupe",
    "supersede",
    "normalize",
    "suppress",
    "mask",
    "truncate",
    "summarize",
    "trim_args",
)


class PlannerConfig(ConfigModel):
    """When a compaction step is worth its prompt-cache rewrite."""

    floor_tokens: StrictInt = Field(128, ge=0, description="No step saves fewer tokens than this.")
    floor_ratio: StrictFloat = Field(
        0.01, ge=0, le=1, description="...nor this share of the request."
    )
    price_style: Literal["model", "openai", "anthropic", "conservative"] = Field(
        "conservative",
        description="Cache prices a step is judged by; conservative: both OpenAI and Anthropic, "
        "and the model's own (registry) when they differ from both.",
    )
    min_expected_turns: StrictFloat = Field(
        24,
        ge=0,
        description="Turns a step must pay for itself within. A short fixed horizon bounds "
        "what a session that ends early can lose; longer ones step more and risk more.",
    )
    max_expected_turns: StrictFloat = Field(24, ge=0)
    lindy_factor: StrictFloat = Field(
        0.0, ge=0, description="Expected remaining turns per turn already seen (0: fixed)."
    )
    free_step_cost: StrictFloat = Field(
        0.5,
        ge=0,
        le=1,
        description="A step whose extra cost this turn is at most this share of the exact "
        "request's cost is free: held to free_step_deficit_requests, not the tight "
        "max_session_deficit.",
    )
    free_payback_turns: StrictFloat = Field(
        1,
        ge=0,
        description="A free step that takes longer than this many turns to pay for itself "
        "is a bet on the session going on: while one such bet is unpaid, another is not "
        "free (two at a session's end could make it dearer than exact).",
    )
    risk_window: StrictFloat = Field(
        2, ge=0, description="Turns at most that an unpaid slow step holds back the next."
    )
    max_session_deficit: StrictFloat = Field(
        0.015,
        ge=0,
        le=1,
        description="A step that is not free may not make the session dearer than exact "
        "by more, were the session to end right after it.",
    )
    free_step_deficit_requests: StrictFloat = Field(
        0.4,
        ge=0,
        description="Nor may a free step by more than this share of one of the session's "
        "average requests, were the session to end right after it (the bound shrinks as a "
        "share of the session as it grows; it is never below max_session_deficit).",
    )

    @field_validator("max_expected_turns")
    @classmethod
    def _turns_in_order(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("min_expected_turns")
        if low is not None and low > value:
            raise ValueError(f"{value:g} is below min_expected_turns ({low:g})")
        return value


class ToolPolicy(ConfigModel):
    """A per-tool override: keep the tool's outputs and call arguments as they are
    (``exclude``), reduce old outputs to a stub (``suppress``; not with ``exclude``,
    which would keep them whole), or keep its outputs smaller than ``min_tokens`` whole
    from every pass, the truncation guardrail included (it raises the passes' own
    thresholds, never lowers them; an output at least that large is cut by the
    guardrail when over its limits).

    The name matches a tool's name exactly, case included, as the APIs compare tool
    names: :func:`unmatched_tool_policies` names the policies that match no tool a
    request calls, so that a misspelt name can be shown."""

    exclude: StrictBool = False
    suppress: StrictBool = False
    min_tokens: StrictInt | None = Field(None, ge=0)

    @field_validator("suppress")
    @classmethod
    def _not_excluded(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("exclude"):
            raise ValueError(
                "exclude keeps this tool's outputs whole, so they are never suppressed: "
                "set one of the two"
            )
        return value


TEXT_TOOL_RESULTS: tuple[str, ...] = (
    r"\[(?P<tool>[A-Za-z_][\w.-]*)(?: for (?P<command>[^\n]*?))?\] Result:",
)
"""The default :attr:`PipelineConfig.text_tool_results`: Cline's and Roo Code's result
header (``[execute_command for 'npm test'] Result:``). The environment details block
they append to each result is left as the user's text: it counts as no tool output
(the newest result stays the one kept whole) and a newer one does not stand for an
older one (it may carry a terminal's new output)."""

TEXT_MATCH_CHARS = 4096
"""The characters at a text's start a ``text_tool_results`` pattern is matched
against (a header is at the start: a text's length never slows the match)."""


class PipelineConfig(ConfigModel):
    """Every pass's settings, the recency budget and the planner. The defaults are the
    balanced preset (``PipelineConfig() == PRESETS["balanced"]``), each pass's those of
    its config model."""

    order: tuple[PassName, ...] = Field(
        PASS_NAMES,
        description='The passes in the order they run (each at most once; mode = "exact" '
        "runs none).",
    )
    recency_tokens: StrictInt = Field(
        0,
        ge=0,
        description="The newest tool outputs are kept in full while their tokens, counted "
        "from the newest one on, stay within this many (keep_newest_outputs are kept "
        "whatever their size, and count). Every token here is re-sent uncached at each "
        "step, so the default keeps none beyond keep_newest_outputs and relies on the "
        "mentions a placeholder lists (and recall) instead.",
    )
    keep_newest_outputs: StrictInt = Field(1, ge=0, description="Newest tool outputs kept in full.")
    keep_newest_percent: StrictFloat = Field(
        0, ge=0, le=100, description="This share of all tool outputs, newest first, kept."
    )
    keep_newest_texts: StrictInt = Field(
        1,
        ge=0,
        description="Assistant texts of this many newest turns kept in full (every text block "
        "of a turn). Older ones are condensed as soon as they leave this window, next to the "
        "cached prefix's end, where a rewrite is cheap.",
    )
    keep_newest_calls: StrictInt = Field(
        1,
        ge=0,
        description="Tool-call arguments of this many newest assistant turns kept in full "
        "(every parallel call of a turn).",
    )
    relevance_turns: StrictInt = Field(
        0,
        ge=0,
        description="Outputs about files the last N actions touch stay in full (they are "
        "condensed later, away from the tail, which costs more prompt cache).",
    )
    dedupe: DedupeConfig = DedupeConfig()
    supersede: SupersedeConfig = SupersedeConfig()
    normalize: NormalizeConfig = NormalizeConfig()
    truncate: TruncateConfig = TruncateConfig()
    suppress: SuppressConfig = SuppressConfig()
    mask: MaskConfig = MaskConfig()
    summarize: SummarizeConfig = SummarizeConfig()
    trim_args: TrimArgsConfig = TrimArgsConfig()
    planner: PlannerConfig = PlannerConfig()
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    text_tool_results: tuple[StrictStr, ...] = Field(
        TEXT_TOOL_RESULTS,
        description="Patterns (Python regular expressions, matched at the start of a text) "
        "that mark a text block of a user message after the first as a tool's result, for "
        "agents that send results as user text instead of tool messages (Cline's and Roo "
        "Code's classic protocol). The group 'tool' names the tool, an optional group "
        "'command' what it ran (for supersession). A match whose text is that match alone "
        "(a header block) makes the next text block of the message the result. Such a "
        "result is condensed as a tool output is. Patterns are matched against a text's "
        "first 4,096 characters and may not match an empty text.",
    )

    @field_validator("text_tool_results")
    @classmethod
    def _patterns_name_a_tool(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for i, pattern in enumerate(patterns):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {i} is not a regular expression: {exc}") from None
            if "tool" not in compiled.groupindex:
                raise ValueError(f"pattern {i} has no group named 'tool': (?P<tool>...)")
            if compiled.match("") is not None:
                raise ValueError(
                    f"pattern {i} matches an empty text: every user text would be a result"
                )
        return patterns

    @field_validator("order")
    @classmethod
    def _each_pass_once(cls, order: tuple[PassName, ...]) -> tuple[PassName, ...]:
        if not order:
            raise ValueError(
                'is empty: no pass would run (mode = "exact" sends requests as they are)'
            )
        twice = sorted({name for name in order if order.count(name) > 1})
        if twice:
            raise ValueError(f"names {', '.join(twice)} more than once")
        return order


PRESETS: dict[str, PipelineConfig] = {
    "conservative": PipelineConfig(
        order=("dedupe", "supersede", "normalize", "suppress", "mask", "truncate"),
        recency_tokens=8000,
        relevance_turns=4,
        keep_newest_texts=4,
        keep_newest_calls=2,
        mask=MaskConfig(
            min_tokens=400, head_lines=5, tail_lines=5, head_tail_min_tokens=0, max_keywords=300
        ),
        planner=PlannerConfig(min_expected_turns=8, max_expected_turns=8),
    ),
    "balanced": PipelineConfig(),
    "aggressive": PipelineConfig(
        relevance_turns=0,
        keep_newest_texts=0,
        mask=MaskConfig(min_tokens=40, head_lines=1, tail_lines=1, max_keywords=40),
        summarize=SummarizeConfig(enabled=True, min_tokens=40, keep_sentences=1),
        trim_args=TrimArgsConfig(min_tokens=30, max_value_chars=80),
        planner=PlannerConfig(min_expected_turns=30, max_expected_turns=30, free_step_cost=1.0),
    ),
}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def resolve_pipeline(preset: str, overrides: dict[str, Any]) -> PipelineConfig:
    """The preset with ``overrides`` deep-merged. A model in them (a
    :class:`MaskConfig` for the ``mask`` table) counts as all of its fields, defaults
    included (:func:`~ctxwarden.config.overrides_of`): the table it stands for is
    replaced whole, so a whole :class:`PipelineConfig` given as the overrides is the
    result, whatever the preset (no preset has tool policies to add to its ``tools``).
    :class:`ConfigError` names a bad key (one the overrides give when a value of the
    preset is at odds with it), and a setting that could never take effect
    (:func:`_check_effective`)."""
    base = PRESETS.get(preset)
    if base is None:
        raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})", "preset")
    if not overrides:
        return base
    overrides = overrides_of(overrides)
    try:
        resolved = PipelineConfig.model_validate(_merge(base.model_dump(), overrides))
    except ValidationError as exc:
        raise _as_given(config_error(exc, "pipeline"), overrides, preset, base) from exc
    _check_effective(overrides, resolved, preset)
    return resolved


def unmatched_tool_policies(config: PipelineConfig, tool_names: Iterable[str]) -> list[str]:
    """The names of ``config``'s tool policies that match none of ``tool_names`` (the
    tools a request calls), sorted: a policy name matches a tool's name exactly, case
    included, so a misspelt one (``Bash`` for ``bash``) stays unmatched on every
    request; a right one is unmatched only until the tool is first called."""
    called = set(tool_names)
    return sorted(name for name in config.tools if name not in called)


def _as_given(
    error: ConfigError, overrides: dict[str, Any], preset: str, base: PipelineConfig
) -> ConfigError:
    """``error`` naming the key the overrides gave. The planner's check blames
    ``max_expected_turns`` when it is below ``min_expected_turns``; when the overrides
    set only ``min_expected_turns`` (over the preset's maximum), that is the key to
    change, or to give with a maximum."""
    if error.key != "pipeline.planner.max_expected_turns":
        return error
    planner = overrides.get("planner")
    if (
        not isinstance(planner, dict)
        or "max_expected_turns" in planner
        or "min_expected_turns" not in planner
    ):
        return error
    low, high = float(planner["min_expected_turns"]), base.planner.max_expected_turns
    return ConfigError(
        f"{low:g} is above max_expected_turns ({high:g} in the "
        f"{preset} preset): lower it, or set max_expected_turns too",
        "pipeline.planner.min_expected_turns",
    )


def _check_effective(overrides: dict[str, Any], resolved: PipelineConfig, preset: str) -> None:
    """Refuse, naming its key, a setting that would be accepted and do nothing:

    - a pass's table (any key of it) over the preset's order when that order leaves the
      pass out (conservative's leaves out summarize and trim_args). An ``order`` given
      with it is taken as meant: the table stays for when the pass is put back;
    - a tool's ``suppress`` while the suppress pass is not in the order or is disabled
      (its outputs would be masked instead, not stubbed);
    - an order whose every pass is disabled (no pass would run, as an empty order).

    A preset's own tables are not checked: only what the overrides give, and the
    resolved result."""
    for name in () if "order" in overrides else PASS_NAMES:
        settings = overrides.get(name)
        if name in resolved.order or not isinstance(settings, dict) or not settings:
            continue
        enabled = settings.get("enabled") is True
        key = "enabled" if "enabled" in settings else next(iter(settings))
        raise ConfigError(
            f"the {name} pass is {'enabled but ' if enabled else ''}not in pipeline.order "
            f"(the {preset} preset's), so this setting would do nothing: give an order "
            f"with {name} in it, or leave the setting out",
            f"pipeline.{name}.{key}",
        )
    for tool, policy in resolved.tools.items():
        if not policy.suppress:
            continue
        if "suppress" not in resolved.order:
            reason = "the suppress pass is not in pipeline.order"
        elif not resolved.suppress.enabled:
            reason = "the suppress pass is disabled (pipeline.suppress.enabled = false)"
        else:
            continue
        raise ConfigError(
            f"{reason}: this tool's old outputs would never become a stub",
            f"pipeline.tools.{tool}.suppress",
        )
    if not any(getattr(resolved, name).enabled for name in resolved.order):
        raise ConfigError(
            "every pass in it is disabled: no pass would run "
            '(mode = "exact" sends requests as they are)',
            "pipeline.order",
        )


def build_passes(config: PipelineConfig) -> list[Pass]:
    """The enabled passes in the configured order."""
    makers: dict[str, Any] = {
        "dedupe": lambda: DedupePass(config.dedupe),
        "supersede": lambda: SupersedePass(config.supersede),
        "normalize": lambda: NormalizePass(config.normalize),
        "truncate": lambda: TruncatePass(config.truncate),
        "suppress": lambda: SuppressPass(
            config.suppress, [name for name, p in config.tools.items() if p.suppress]
        ),
        "mask": lambda: MaskPass(config.mask),
        "summarize": lambda: SummarizePass(config.summarize),
        "trim_args": lambda: TrimArgsPass(config.trim_args),
    }
    return [makers[name]() for name in config.order if getattr(config, name).enabled]
