"""Bad input named as the user gave it (audit 97, items 10 and 12): invalid UTF-8 by
the offset of its first bad byte (it was "surrogates not allowed" at char 0), a bad
``--preset`` or ``serve --data-dir`` by its flag (they were named ``preset`` and
``data_dir``), an empty flag as an error (it was taken as no flag), and a gate that is
not a finite number as that."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.errors import ConfigError
from ctxwarden.io import fast_loads, parse_json
from ctxwarden.replay.gates import load_gates
from tests.cli.failing import fails

REQUEST = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "h\xff\xfei"}]}'


@pytest.mark.parametrize("loads", [parse_json, fast_loads])
def test_invalid_utf8_is_named_by_its_byte_offset(loads: Callable[[bytes], Any]) -> None:
    with pytest.raises(ValueError) as info:
        loads(REQUEST)
    assert str(info.value) == "invalid UTF-8 at byte 63" and REQUEST[63:64] == b"\xff"
    assert loads(b'["\\ud800"]') == ["\ud800"]  # a lone surrogate escape is still read
    with pytest.raises(ValueError, match=r"line 1 column 7 \(char 6\)"):  # orjson's message
        loads(b'{"a": nope}')


def test_condense_names_the_first_invalid_byte(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(REQUEST)
    line = fails(capsys, ["condense", str(path), "--data-dir", str(tmp_path / "d")])
    assert f"{path}: not JSON (invalid UTF-8 at byte 63) at /" in line
    assert "surrogates" not in line


@pytest.mark.parametrize(
    "command",
    [["condense", "{request}"], ["demo"], ["inspect", "{request}"], ["replay", "{request}"]],
)
@pytest.mark.parametrize("preset", ["foo", ""])
def test_a_bad_preset_flag_is_named_by_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str], preset: str
) -> None:
    request = tmp_path / "r.json"
    request.write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}')
    argv = [a.replace("{request}", str(request)) for a in command]
    line = fails(capsys, [*argv, "--preset", preset])
    assert f"error: --preset: unknown preset {preset!r} (known: " in line


@pytest.mark.parametrize(
    "argv",
    [
        ["condense", "{request}", "--data-dir", ""],
        ["store", "stats", "--data-dir", " "],
        ["recall", "cw:0123456789ab", "--data-dir", ""],
    ],
)
def test_an_empty_data_dir_flag_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    request = tmp_path / "r.json"
    request.write_text('{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}')
    line = fails(capsys, [a.replace("{request}", str(request)) for a in argv])
    assert line.endswith("error: --data-dir: empty (give a directory, or leave --data-dir out)")


def test_an_empty_tenant_flag_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails(capsys, ["recall", "cw:0123456789ab", "--tenant", ""])
    assert line.endswith("error: --tenant: empty (give a tenant key, or leave --tenant out)")


def test_serve_names_a_data_dir_it_cannot_use_as_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    restored_loggers: None,
) -> None:  # fmt: skip
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.delenv("CTXWARDEN_DATA_DIR", raising=False)
    monkeypatch.delenv("CTXWARDEN_CONFIG", raising=False)
    line = fails(capsys, ["serve", "--data-dir", str(afile), "--port", "0"])
    assert line.endswith(f"error: --data-dir: cannot create {afile} (a file is in the way)")
    monkeypatch.setenv("CTXWARDEN_DATA_DIR", str(afile))
    line = fails(capsys, ["serve", "--port", "0"])
    assert line.endswith(f"error: CTXWARDEN_DATA_DIR: cannot create {afile} (a file is in the way)")
    monkeypatch.delenv("CTXWARDEN_DATA_DIR")
    config = tmp_path / "c.toml"
    config.write_text(f"data_dir = {str(afile)!r}\n")
    line = fails(capsys, ["serve", "--config", str(config), "--port", "0"])
    assert line.endswith(f"error: {config}: data_dir: cannot create {afile} (a file is in the way)")


@pytest.mark.parametrize("key", ["min_reduction", "min_support", "max_p95_ms", "min_cost_saving"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_gate_that_is_not_a_finite_number_says_so(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "gates.toml"
    path.write_text(f"[gates]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_gates(path)
    assert str(info.value) == f"{path}: gates.{key}: Input should be a finite number"
