"""The configuration example in the README is a valid config, with the defaults it claims."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from ctxwarden.config import EngineConfig
from ctxwarden.pipeline.presets import resolve_pipeline

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_toml_example_validates_and_matches_the_defaults() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "README has a TOML example"
    data = tomllib.loads(blocks[0])
    config = EngineConfig.model_validate(data)
    pipeline = resolve_pipeline(config.preset, config.pipeline)
    default = resolve_pipeline("balanced", {})
    # the example documents the balanced defaults, apart from the tool policies it adds
    assert pipeline.model_copy(update={"tools": {}}) == default
    assert pipeline.tools["heartbeat"].suppress and pipeline.tools["read_secret_file"].exclude
