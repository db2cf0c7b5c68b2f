"""Failures the CLI used to hide (exit 0) or show as a traceback: one line naming what
and where, a non-zero exit, no traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.cli import build_parser, main
from ctxwarden.cli.serve import settings_from_args
from ctxwarden.engine import DEFAULT_TENANT
from ctxwarden.errors import ConfigError
from ctxwarden.store import SqliteStore
from tests.cli.failing import fails
from tests.cli.skipped import skips

REQUEST = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """An argparse error: exit 2, its message on stderr."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


@pytest.fixture
def request_file(tmp_path: Path) -> Path:
    path = tmp_path / "request.json"
    path.write_text(REQUEST)
    return path


def _not_a_directory(tmp_path: Path) -> tuple[list[str], str]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    return ["--data-dir", str(afile)], f"data dir {afile}: not a directory"


def _under_a_file(tmp_path: Path) -> tuple[list[str], str]:
    afile = tmp_path / "afile"
    afile.write_text("x")
    return ["--data-dir", str(afile / "sub")], f"data dir {afile / 'sub'}: Not a directory"


def _not_sqlite(tmp_path: Path) -> tuple[list[str], str]:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "store.sqlite3").write_text("not a database, " * 100)
    return ["--data-dir", str(folder)], f"{folder / 'store.sqlite3'}: sqlite store failed"


def _redis_without_url(tmp_path: Path) -> tuple[list[str], str]:
    config = tmp_path / "redis.toml"
    config.write_text('[store]\nbackend = "redis"\n')
    return ["--config", str(config)], "store.url: the redis store needs a url"


Broken = Callable[[Path], tuple[list[str], str]]
STORES: list[Broken] = [_not_a_directory, _under_a_file, _not_sqlite, _redis_without_url]


@pytest.mark.parametrize("broken", STORES)
def test_condense_fails_when_the_store_cannot_be_opened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request_file: Path, broken: Broken
) -> None:
    """Not the original request with exit 0 (the engine's silent fallback)."""
    flags, message = broken(tmp_path)
    line = fails(capsys, ["condense", str(request_file), *flags])
    assert line.startswith("ctxwarden condense: error: ") and message in line


@pytest.mark.parametrize("broken", STORES[:3])
def test_store_commands_name_the_store_that_cannot_be_opened(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, broken: Broken
) -> None:
    flags, message = broken(tmp_path)
    line = fails(capsys, ["store", "stats", *flags])
    assert message in line and "Errno" not in line


def test_the_engine_itself_still_falls_back(tmp_path: Path) -> None:
    """The library keeps its contract (the proxy relies on it): no raise, the original."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    engine = Engine(EngineConfig(data_dir=str(afile)))
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    result = engine.condense(request)
    engine.close()
    assert result.request == request and result.report["fallbacks"] == 1


@pytest.mark.parametrize("command", ["condense", "inspect", "condense --api openai.chat"])
def test_messages_that_are_not_a_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    request = tmp_path / "m5.json"
    request.write_text('{"model": "gpt-4o", "messages": 5}')
    name, *flags = command.split()
    where = ["--data-dir", str(tmp_path)] if name == "condense" else []  # inspect keeps none
    line = fails(capsys, [name, str(request), *flags, *where])
    assert "expected an array" in line and "/messages" in line


def test_a_replay_log_line_whose_messages_are_not_a_list(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text('{"model": "gpt-4o", "messages": 5}\n')
    line = skips(capsys, ["replay", str(log), "--quiet", "--no-baselines"])
    assert str(log) in line and "expected an array" in line and "/messages" in line


def test_a_block_type_that_is_not_a_string_is_not_a_crash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    request = tmp_path / "odd.json"
    request.write_text(
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": [1]}]}]}'
    )
    assert main(["condense", str(request), "--data-dir", str(tmp_path)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_fake_upstream_refuses_a_port_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    line = fails(capsys, ["fake-upstream", "--port", "99999"])
    assert "port: 99999 is not a TCP port" in line


def test_a_bad_fake_port_variable_fails_only_fake_upstream(
    capsys: pytest.CaptureFixture[str], request_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXWARDEN_FAKE_PORT", "abc")
    data = str(request_file.parent / "data")
    assert main(["condense", str(request_file), "--mode", "exact", "--data-dir", data]) == 0
    capsys.readouterr()
    line = fails(capsys, ["fake-upstream"])
    assert "CTXWARDEN_FAKE_PORT" in line and "'abc'" in line
    monkeypatch.setenv("CTXWARDEN_FAKE_PORT", "70000")
    assert "CTXWARDEN_FAKE_PORT: 70000" in fails(capsys, ["fake-upstream"])


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["replay", "--idle-gap", "-5"], "--idle-gap"),
        (["replay", "--idle-gap", "nan"], "--idle-gap"),
        (["replay", "--turn-seconds", "-1"], "--turn-seconds"),
        (["replay", "--worst", "-1"], "--worst"),
        (["serve", "--read-timeout", "-1"], "--read-timeout"),
        (["serve", "--read-timeout", "0"], "--read-timeout"),
    ],
)
def test_negative_values_are_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    line = _usage_error(capsys, argv)
    assert f"error: argument {flag}: " in line


def test_a_negative_read_timeout_variable_is_refused() -> None:
    args = build_parser().parse_args(["serve"])
    with pytest.raises(ConfigError, match="CTXWARDEN_READ_TIMEOUT"):
        settings_from_args(args, {"CTXWARDEN_READ_TIMEOUT": "-1"})


def test_a_replay_file_that_is_not_json_is_named_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bj.json"
    bad.write_text("nope")
    line = skips(capsys, ["replay", str(bad), "--quiet", "--no-baselines"])
    assert line.count(str(bad)) == 1 and f"{bad}: not JSON" in line


def test_recall_past_the_end_of_a_one_line_original(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = SqliteStore(tmp_path / "store.sqlite3")
    ref = store.put(DEFAULT_TENANT, "one line")
    store.close()
    argv = ["recall", ref, "--lines", "5", "--data-dir", str(tmp_path)]
    line = fails(capsys, argv)
    assert line.endswith(f"{ref} has 1 line")


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[pipeline.mask]\nmin_tokenz = 3\n", "pipeline.mask.min_tokenz"),
        ("[pipeline.planner]\nfloor_ratio = 2\n", "pipeline.planner.floor_ratio"),
        ('preset = "fastest"\n', "preset"),
        ("[budget]\ncontext_window = -1\n", "budget.context_window"),
    ],
)
def test_a_config_error_names_its_file_and_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request_file: Path, toml: str, key: str
) -> None:
    """Whichever command reads it, and the pipeline too (checked when the file is read,
    not later when an engine is built from it)."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text("[pipeline.planner]\nfloor_ratio = 0.05\n")
    bad.write_text(toml)
    expected = f"{bad}: {key}: "
    assert expected in fails(capsys, ["condense", str(request_file), "--config", str(bad)])
    sessions = tmp_path / "none"
    sessions.mkdir()
    argv = ["replay", str(sessions), "--config", str(good), "--config", str(bad)]
    assert expected in fails(capsys, argv)
    with pytest.raises(ConfigError) as info:
        Engine.from_file(bad)
    assert str(info.value).startswith(expected) and info.value.key == key


@pytest.mark.parametrize(
    ("body", "api", "where"),
    [
        (REQUEST, "openai.responses", "at /messages"),
        ('{"model": "gpt-4o", "input": "hi"}', "openai.chat", "at /input"),
        ('{"model": "m", "input": [{"role": "user", "content": "hi"}]}', "anthropic.messages",
         "at /input"),
        ('{"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "go"}, '
         '{"role": "assistant", "content": null, "tool_calls": []}]}', "anthropic.messages",
         "at /messages/1/tool_calls"),
        ('{"model": "m", "max_tokens": 9, "messages": [{"role": "developer", "content": "s"}]}',
         "anthropic.messages", "at /messages/0/role"),
    ],
)  # fmt: skip
def test_an_explicit_api_the_request_plainly_is_not_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, api: str, where: str
) -> None:
    path = tmp_path / "request.json"
    path.write_text(body)
    line = fails(capsys, ["condense", str(path), "--api", api])
    assert where in line


def test_an_explicit_api_that_fits_is_used(
    capsys: pytest.CaptureFixture[str], request_file: Path
) -> None:
    assert main(["condense", str(request_file), "--api", "anthropic.messages"]) == 0
    assert main(["condense", str(request_file), "--api", "openai.chat"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flag", ["--json", "--html"])
def test_replay_refuses_an_output_it_cannot_write_before_replaying(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ctxwarden.cli.replay as replay_cli

    def no_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("replayed before checking the output")

    monkeypatch.setattr(replay_cli, "run_replay", no_replay)
    for out, message in ((tmp_path / "no" / "r.out", "no such directory"),
                         (tmp_path, "is a directory")):  # fmt: skip
        line = fails(capsys, ["replay", flag, str(out)])
        assert f"{out}: {message}" in line


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from ctxwarden import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"ctxwarden {__version__}\n"


def test_a_preset_flag_overrides_the_config_files_preset(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, request_file: Path
) -> None:
    """The flags override the file's keys before the whole is checked: a file's bad
    preset does not matter when --preset replaces it, and a bad --preset is the flag's
    error, not the file's."""
    config = tmp_path / "c.toml"
    config.write_text('preset = "fast"\n')
    assert main(["condense", str(request_file), "--config", str(config), "--preset",
                 "balanced"]) == 0  # fmt: skip
    capsys.readouterr()
    line = fails(capsys, ["condense", str(request_file), "--config", str(config)])
    assert f"{config}: preset: unknown preset 'fast'" in line
    line = fails(capsys, ["condense", str(request_file), "--preset", "fastest"])
    assert "preset: unknown preset 'fastest'" in line and str(config) not in line


@pytest.mark.parametrize("command", [["store", "stats"], ["store", "gc"],
                                     ["recall", "cw:0123456789ab"]])  # fmt: skip
def test_reading_commands_do_not_make_a_store(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    where = tmp_path / "new" / "dir"
    line = fails(capsys, [*command, "--data-dir", str(where)])
    assert f"no store at {where / 'store.sqlite3'}" in line
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "fast"}, "mode: Input should be 'active', 'shadow' or 'exact'"),
        ({"store": {"backend": "nope"}}, "store.backend: Input should be"),
        ({"budget": {"window": 1}}, "budget.window: unknown key"),
    ],
)
def test_a_library_config_error_is_one_line_naming_the_key(
    values: dict[str, object], message: str
) -> None:
    """``EngineConfig(...)`` in code fails as a config file does, not with pydantic's
    multi-line error."""
    with pytest.raises(ConfigError) as info:
        EngineConfig(**values)  # type: ignore[arg-type]
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
