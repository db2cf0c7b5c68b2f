"""The supersede overlap gate and the trim_args saving floor are settings.

``[pipeline.supersede] min_overlap`` (0.2: a share, 0 to 1, finite) and
``[pipeline.trim_args] min_saved_chars`` (128, at least 0) were module constants; bad
values are refused by key, and each setting does what it says.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ctxwarden import ConfigError
from ctxwarden.config import load_config
from ctxwarden.passes.config import SupersedeConfig, TrimArgsConfig
from ctxwarden.passes.supersede import SupersedePass
from ctxwarden.pipeline.presets import PRESETS, resolve_pipeline
from tests.passes.convo import FORCE, call, call_with, context, make_engine, request, result


def test_the_defaults_are_those_the_constants_had_in_every_preset() -> None:
    for preset in PRESETS.values():
        assert preset.supersede.min_overlap == 0.2
        assert preset.trim_args.min_saved_chars == 128


_BAD = [
    ("supersede", "min_overlap", -0.1, "greater than or equal to 0"),
    ("supersede", "min_overlap", 1.5, "less than or equal to 1"),
    ("supersede", "min_overlap", math.nan, "finite"),
    ("supersede", "min_overlap", math.inf, "finite"),
    ("supersede", "min_overlap", "0.2", "number"),
    ("supersede", "min_overlap", True, "number"),
    ("trim_args", "min_saved_chars", -1, "greater than or equal to 0"),
    ("trim_args", "min_saved_chars", 12.5, "integer"),
    ("trim_args", "min_saved_chars", "128", "integer"),
]


@pytest.mark.parametrize(("table", "key", "value", "reason"), _BAD)
def test_a_bad_value_is_refused_by_key(table: str, key: str, value: Any, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_pipeline("balanced", {table: {key: value}})
    assert info.value.key == f"pipeline.{table}.{key}"
    assert reason in str(info.value)
    model = {"supersede": SupersedeConfig, "trim_args": TrimArgsConfig}[table]
    with pytest.raises(ConfigError) as direct:
        model(**{key: value})
    assert direct.value.key == f"{model.__name__}.{key}" and "\n" not in str(direct.value)


def test_the_settings_load_from_a_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        "[pipeline.supersede]\nmin_overlap = 1\n[pipeline.trim_args]\nmin_saved_chars = 0\n"
    )
    config = load_config(path)
    pipeline = resolve_pipeline(config.preset, config.pipeline)
    assert pipeline.supersede.min_overlap == 1.0 and pipeline.trim_args.min_saved_chars == 0
    path.write_text("[pipeline.supersede]\nmin_overlap = nan\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == "pipeline.supersede.min_overlap"


def _log(start: int, stop: int) -> str:
    return "\n".join(f"[server] request {i} handled (user_{i})" for i in range(start, stop))


def _polls() -> dict[str, Any]:
    """Two polls of a background process: the same call, no line in common but the
    wrapper's."""
    poll = {"bash_id": "bash_1"}
    status = "<status>running</status>\n"
    return request(
        call_with("c1", "BashOutput", poll), result("c1", status + _log(0, 40)),
        call_with("c2", "BashOutput", poll), result("c2", status + _log(40, 80)),
        call("cz", "echo done"), result("cz", "done"),
    )  # fmt: skip


def _rerun() -> dict[str, Any]:
    """A test re-run whose output shares 30 of the older one's 40 lines (0.75)."""
    older = [f"tests/test_m.py::test_{i} PASSED" for i in range(30)]
    older += [f"tests/test_m.py::test_x{i} FAILED" for i in range(10)]
    newer = [f"tests/test_m.py::test_{i} PASSED" for i in range(30)]
    newer += [f"tests/test_m.py::test_x{i} PASSED" for i in range(10)]
    return request(
        call("c1", "pytest -v"), result("c1", "\n".join(older)),
        call("c2", "pytest -v"), result("c2", "\n".join(newer)),
        call("cz", "echo done"), result("cz", "done"),
    )  # fmt: skip


def _superseded(wire: dict[str, Any], min_overlap: float) -> set[int]:
    ctx, _ = context(wire)
    out = SupersedePass(SupersedeConfig(min_overlap=min_overlap))(ctx, {})
    return {ctx.by_path[path].message_index for path in out}


def test_min_overlap_is_the_share_of_lines_a_newer_run_must_show() -> None:
    assert _superseded(_polls(), 0.2) == set()  # the default: a poll is no re-run
    assert _superseded(_polls(), 0.0) == {3}  # no gate: the same call is the same action
    assert _superseded(_rerun(), 0.2) == {3}
    assert _superseded(_rerun(), 0.75) == {3}  # 30 of 40 lines: exactly the share asked
    assert _superseded(_rerun(), 0.8) == set()


def test_min_overlap_reaches_the_pass_through_the_pipeline() -> None:
    engine = make_engine("balanced", {**FORCE, "supersede": {"min_overlap": 0}})
    sent = engine.condense(_polls()).request["messages"]
    assert sent[3]["content"].startswith("[ctxwarden: superseded by the same action")
    sent = make_engine("balanced", FORCE).condense(_polls()).request["messages"]
    assert "superseded" not in sent[3]["content"]


_COMMAND = "python -m pytest " + " ".join(f"tests/unit/test_mod_{i}.py" for i in range(8))
"""216 characters: aggressive trims a value over 80 to its first 40 and a 49-character
note, a saving of 127 characters (and of 26 tokens)."""


def _trimmed_command(min_saved_chars: int | None) -> str:
    turns: list[dict[str, Any]] = [call("c1", _COMMAND), result("c1", "FAILED\n" * 30)]
    for i in range(2, 7):
        turns += [call(f"c{i}", f"echo {i}"), result(f"c{i}", f"out {i}\n" * 400)]
    table = {} if min_saved_chars is None else {"min_saved_chars": min_saved_chars}
    engine = make_engine("aggressive", {**FORCE, "trim_args": table})
    sent = engine.condense(request(*turns)).request["messages"]
    command: str = json.loads(sent[2]["tool_calls"][0]["function"]["arguments"])["command"]
    return command


def test_min_saved_chars_is_the_saving_a_trim_must_make() -> None:
    assert _trimmed_command(None) == _COMMAND  # the default, 128
    assert _trimmed_command(128) == _COMMAND
    trimmed = _trimmed_command(127)
    assert trimmed.startswith(_COMMAND[:40]) and "[ctxwarden: 176 more chars in cw:" in trimmed
    assert len(_COMMAND) - len(trimmed) == 127
    assert _trimmed_command(0) == trimmed
