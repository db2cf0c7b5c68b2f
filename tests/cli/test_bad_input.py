"""Bad input to the CLI: one line naming what and where, exit status 2, no traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwarden import ConfigError, Engine, EngineConfig
from ctxwarden.cli import main
from ctxwarden.io import bundled_sessions
from tests.cli.failing import fails
from tests.cli.skipped import skips

SESSION = str(bundled_sessions()[0])


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"pipeline": {"mask": {"min_tokens": "x"}}}, "pipeline.mask.min_tokens"),
        ({"preset": "nope"}, "preset"),
    ],
)
def test_an_invalid_pipeline_fails_when_the_engine_is_made(
    config: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Engine(EngineConfig.model_validate(config))
    assert info.value.key == key


def test_condense_with_an_invalid_pipeline_key_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[pipeline.mask]\nmin_tokens = "x"\n')
    line = fails(
        capsys, ["condense", SESSION, "--config", str(config), "--data-dir", str(tmp_path)]
    )
    assert "pipeline.mask.min_tokens" in line


def _broken_gzip(path: Path) -> Path:
    data = gzip.compress(b'{"messages": []}' * 20)
    path.write_bytes(data[:10] + b"\xff" * 20 + data[30:])
    return path


@pytest.mark.parametrize("name", ["corrupt.json.gz", "corrupt.jsonl.gz"])
def test_a_broken_gzip_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    bad = _broken_gzip(tmp_path / name)
    if name.endswith(".jsonl.gz"):
        line = skips(capsys, ["replay", str(bad), "--quiet"])
    else:
        line = fails(capsys, ["condense", str(bad), "--data-dir", str(tmp_path)])
    assert f"{bad}: broken gzip data" in line


def test_a_config_that_is_not_utf8_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes(b'mode = "\xff"\n')
    line = fails(capsys, ["condense", SESSION, "--config", str(config)])
    assert f"{config}: not UTF-8 text" in line


def test_gates_in_a_replay_config_name_the_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gated.toml"
    config.write_text('[gates]\nmin_reduction = "abc"\n')
    line = fails(capsys, ["replay", SESSION, "--config", str(config), "--quiet"])
    assert f"{config}: gates.min_reduction" in line


def test_strict_gates_fail_when_nothing_was_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gates = tmp_path / "gates.toml"
    gates.write_text("[gates]\nmin_reduction = 0.5\n")
    unusable = tmp_path / "unusable.json"
    unusable.write_text("[]")  # skipped (exit 2): the gates still say what they found
    argv = ["replay", str(unusable), "--strict", "--gates", str(gates), "--quiet"]
    assert main(argv) == 2
    assert "nothing was replayed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["replay", SESSION, "--max-sessions", "0", "--quiet"])
    assert info.value.code == 2


def test_a_replay_error_names_the_file_and_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = tmp_path / "shape.json"
    shape.write_text('{"messages": [1, {"role": "assistant", "content": "x"}]}')
    line = skips(capsys, ["replay", SESSION, str(shape), "--quiet", "--no-baselines"])
    assert f"{shape}: " in line and "/messages/0" in line
    empty = tmp_path / "empty.json"
    empty.write_text("")
    # the limit is reached before the next file is read
    assert main(["replay", SESSION, str(empty), "--max-sessions", "1", "--quiet"]) == 0


def test_serve_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails(capsys, ["serve", "--port", "99999"])
    assert "port" in line and "99999" in line


def test_serve_refuses_an_unknown_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails(capsys, ["serve", "--log-level", "bogus"])
    assert "--log-level" in line


def test_a_closed_output_pipe_is_not_reported_as_a_failed_gate() -> None:
    """``ctxwarden replay ... | head``: status 141 (SIGPIPE's), not 1 (a failed gate)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "replay", SESSION, "--quiet", "--no-baselines"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err


def test_store_commands_refuse_two_different_stores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``store gc --data-dir X`` with a config naming another store file: refused, so gc
    never trims a store the user did not mean."""
    config = tmp_path / "c.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "a.sqlite3"}"\n')
    line = fails(
        capsys, ["store", "gc", "--config", str(config), "--data-dir", str(tmp_path / "b")]
    )
    assert "store.path" in line


def test_a_large_output_to_a_pipe_closed_midway_is_status_141(tmp_path: Path) -> None:
    """``ctxwarden condense big.json | head -1``: the pipe takes part of the one large
    write before its reader goes; the output must not end short with status 0."""
    rows = "\n".join(f"row {i}: checked item_{i}" for i in range(20_000))
    request = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "go"}, {"role": "user", "content": rows}],
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(request))
    # unbuffered, the pipe takes part of the one large write and reports it done
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for unbuffered, read_first in ((True, True), (False, True), (True, False), (False, False)):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwarden", "condense", str(path), "--data-dir",
             str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env if unbuffered else {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"},
        )  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        if read_first:
            assert proc.stdout.read(10)  # the output has begun: the reader goes midway
        proc.stdout.close()  # (else before anything is written)
        with proc.stderr:
            err = proc.stderr.read().decode()
        assert (proc.wait(timeout=120), err) == (141, ""), (unbuffered, read_first)


def test_a_small_output_to_a_pipe_closed_before_it_is_status_141(tmp_path: Path) -> None:
    """A small output waits in the buffer: its flush fails, and the one at exit must not
    fail again (status 120, 'Exception ignored')."""
    path = tmp_path / "small.json"
    path.write_text(
        json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "condense", str(path), "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert (proc.wait(timeout=120), err) == (141, "")
