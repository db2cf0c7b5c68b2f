"""``ctxwarden config show`` prints the pipeline that runs, as TOML that loads back to
the same pipeline (over any preset)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.cli import build_parser, main
from ctxwarden.cli.config_show import pipeline_toml
from ctxwarden.config import load_config, validated_config
from ctxwarden.errors import ConfigError
from ctxwarden.pipeline.presets import PASS_NAMES, PRESETS, PipelineConfig, resolve_pipeline

_FILE = """\
preset = "conservative"
mode = "shadow"
[pipeline]
recency_tokens = 100
[pipeline.mask]
min_tokens = 90
[pipeline.planner]
lindy_factor = 0.25
[pipeline.tools.bash]
suppress = true
[pipeline.tools."mcp.read \\"file\\""]
exclude = true
"""


def _show(capsysbinary: pytest.CaptureFixture[bytes], *argv: str) -> tuple[int, str, str]:
    status = main(["config", "show", *argv])
    out, err = capsysbinary.readouterr()
    return status, out.decode(), err.decode()


def _loaded_back(text: str, preset: str | None = None) -> PipelineConfig:
    data = tomllib.loads(text)
    if preset is not None:
        data["preset"] = preset
    config = validated_config(data)
    return resolve_pipeline(config.preset, config.pipeline)


@pytest.mark.parametrize("flag", [None, *sorted(PRESETS)])
def test_the_shown_pipeline_is_the_one_that_runs_and_loads_back(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes], flag: str | None
) -> None:
    path = tmp_path / "ctxwarden.toml"
    path.write_text(_FILE)
    status, out, err = _show(
        capsysbinary, "--config", str(path), *(["--preset", flag] * bool(flag))
    )
    assert (status, err) == (0, "")
    config = load_config(path)  # what condense makes of the file and the flag
    if flag:
        config = config.model_copy(update={"preset": flag})
    running = resolve_pipeline(config.preset, config.pipeline)
    assert running.mask.min_tokens == 90 and running.tools["bash"].suppress
    assert running.planner == PRESETS[config.preset].planner.model_copy(
        update={"lindy_factor": 0.25}
    )
    assert out.startswith(f"# the pipeline ctxwarden runs: [pipeline] of {path} over the ")
    assert f'\npreset = "{config.preset}"\n' in out
    for base in PRESETS:  # every key is written: the same pipeline over any preset
        assert _loaded_back(out, base) == running
    shown = tmp_path / "shown.toml"
    shown.write_text(out)
    again = tmp_path / "again.toml"
    assert main(["config", "show", "--config", str(shown)]) == 0
    again.write_bytes(capsysbinary.readouterr().out)
    assert _loaded_back(again.read_text()) == running
    assert again.read_text().split("\n", 1)[1] == out.split("\n", 1)[1]  # a fixed point


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_without_a_file_it_shows_the_preset(
    capsysbinary: pytest.CaptureFixture[bytes], preset: str
) -> None:
    status, out, _ = _show(capsysbinary, "--preset", preset)
    assert status == 0 and out.startswith(f"# the pipeline ctxwarden runs: the {preset} preset")
    assert _loaded_back(out) == PRESETS[preset]
    status, out, _ = _show(capsysbinary)
    assert status == 0 and _loaded_back(out) == PRESETS["balanced"]


def test_a_bad_config_is_one_error_line_naming_the_file_and_key(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[pipeline.truncate]\nmin_tokens = 3\n")
    status, out, err = _show(capsysbinary, "--config", str(path))
    assert (status, out) == (2, "")
    assert (
        err == f"ctxwarden config show: error: {path}: pipeline.truncate.min_tokens: unknown key\n"
    )
    status, _, err = _show(capsysbinary, "--preset", "reckless")
    assert status == 2 and err.startswith("ctxwarden config show: error: --preset: unknown preset")


def test_config_show_is_registered_like_the_other_commands() -> None:
    parser = build_parser()
    assert "config" in parser.format_help()
    args = parser.parse_args(["config", "show", "--preset", "aggressive"])
    assert (args.command, args.config_command, args.preset) == ("config", "show", "aggressive")


_FLOATS = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
_OVERRIDES = st.fixed_dictionaries(
    {},
    optional={
        "order": st.permutations(PASS_NAMES).flatmap(
            lambda names: st.integers(1, len(names)).map(lambda n: names[:n])
        ),
        "keep_newest_percent": st.floats(0, 100, allow_nan=False),
        "mask": st.fixed_dictionaries(
            {},
            optional={
                "keywords_per_1k_tokens": st.floats(0, 1000, allow_nan=False),
                "min_mention_score": _FLOATS,
                "min_band": st.sampled_from(["low", "soft", "hard"]),
            },
        ),
        "planner": st.fixed_dictionaries(
            {},
            optional={
                "floor_ratio": st.floats(0, 1, allow_nan=False),
                "lindy_factor": _FLOATS,
                "price_style": st.sampled_from(["model", "openai", "anthropic"]),
            },
        ),
        "tools": st.dictionaries(
            st.text(max_size=12),
            st.fixed_dictionaries(
                {},
                optional={"exclude": st.booleans(), "min_tokens": st.integers(0, 10**6)},
            ),
            max_size=3,
        ),
    },
)


@given(preset=st.sampled_from(sorted(PRESETS)), overrides=_OVERRIDES)
def test_any_resolved_pipeline_round_trips_through_its_toml(
    preset: str, overrides: dict[str, Any]
) -> None:
    """Any tool name (dots, quotes, control characters, none at all), any finite
    float, a band set or not."""
    try:
        running = resolve_pipeline(preset, overrides)
    except ConfigError:
        return  # refused configs have nothing to show
    text = pipeline_toml(running, preset)
    assert _loaded_back(text) == running
    assert _loaded_back(text, "conservative") == running
