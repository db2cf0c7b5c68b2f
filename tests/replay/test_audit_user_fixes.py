"""Fixes from a user audit of ``ctxwarden replay``: an Anthropic session file replayed as
Anthropic, a Responses one refused with the way to give it, gates written outside
``[gates]``, a benchmark that wrote into (or silently fell back on) a real store,
duplicate paths, an idle gap that expires nothing, error lines that name the wrong
JSON path or nothing clear, and figures counted from files never read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.cli import main
from ctxwarden.errors import ReplayError
from ctxwarden.replay.inputs import read_sessions
from ctxwarden.replay.runner import run_replay
from tests.cli.failing import fails
from tests.cli.skipped import skips
from tests.replay.conftest import tool_session, write_session

SYSTEM = "You are a coding agent. " * 40
TOOLS = [{"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}]


def anthropic_messages() -> list[dict[str, Any]]:
    """The turns of :func:`tool_session` as Anthropic Messages blocks."""

    def use(i: int, cmd: str) -> dict[str, Any]:
        block = {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"command": cmd}}
        return {"role": "assistant", "content": [block]}

    def result(i: int, text: str) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": f"t{i}", "content": text}
        return {"role": "user", "content": [block]}

    return [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]},
        use(1, "grep -rn widget src"),
        result(1, "src/pkg/widget_core.py:12: x = 1\nValueError: widget broke"),
        use(2, "cat notes.txt"),
        result(2, "see def parse_value here"),
        use(3, "sed -n 1,5p src/pkg/widget_core.py # parse_value"),
    ]


def _anthropic_file(folder: Path, *, system: bool = True) -> Path:
    session: dict[str, Any] = {
        "id": "anth",
        "source": "test",
        "model": "claude-sonnet-4-5",
        "messages": anthropic_messages(),
        "tools": TOOLS,
        "max_tokens": 1024,
    }
    if system:
        session["system"] = SYSTEM
    path = folder / ("anth.json" if system else "anth_nosys.json")
    path.write_text(json.dumps(session))
    return path


def test_an_anthropic_session_file_is_replayed_as_anthropic_with_its_request_fields(
    tmp_path: Path,
) -> None:
    """It was measured as OpenAI Chat, its top-level system (and tools) dropped."""
    (session,) = read_sessions(_anthropic_file(tmp_path))
    assert [r.api for r in session.requests] == ["anthropic.messages"] * 3
    first = session.requests[0].request
    assert first["system"] == SYSTEM and first["tools"] == TOOLS and first["max_tokens"] == 1024
    assert not {"id", "source"} & set(first)  # the recording's keys are no request field
    assert first["messages"] == anthropic_messages()[:1]


def test_the_system_of_an_anthropic_session_counts_in_the_figures(tmp_path: Path) -> None:
    with_system = run_replay([_anthropic_file(tmp_path)], [], baselines=["exact"])
    without = run_replay([_anthropic_file(tmp_path, system=False)], [], baselines=["exact"])
    assert with_system.skipped == without.skipped == []
    tokens = [r.subjects[0].aggregate()["tokens"] for r in (with_system, without)]
    assert tokens[0] > tokens[1] + 3 * 100  # 3 requests, each with a ~200-token system


def test_a_responses_session_file_says_to_give_a_request_log(tmp_path: Path) -> None:
    path = tmp_path / "resp.json"
    path.write_text(json.dumps({"id": "r", "source": "t", "input": tool_session()}))
    with pytest.raises(ReplayError) as info:
        read_sessions(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a session (no messages list")
    assert "a Responses session must be given as a .jsonl request log" in message


def test_a_gate_outside_the_gates_table_is_an_error_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gates = tmp_path / "g.toml"
    gates.write_text("min_reduction = 0.99\n")
    session = write_session(tmp_path, tool_session())
    line = fails(capsys, ["replay", str(session), "--quiet", "--strict", "--gates", str(gates)])
    assert line.endswith(f"{gates}: min_reduction: unknown key (gates go under [gates])")


def test_a_passing_strict_run_names_the_gates_it_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gates = tmp_path / "g.toml"
    gates.write_text("[gates]\nmin_support = 0.1\n")
    session = write_session(tmp_path, tool_session())
    argv = ["replay", str(session), "--quiet", "--strict", "--gates", str(gates)]
    assert main([*argv, "--preset", "balanced"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "ctxwarden replay: strict: gates passed: min_support >= 0.1, "
        "max_integrity_violations <= 0 on balanced"
    ]


def test_a_config_store_is_not_written_unless_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "real" / "store.sqlite3"
    config = tmp_path / "c.toml"
    config.write_text(f'[store]\npath = "{store}"\n')
    session = write_session(tmp_path, tool_session())
    assert main(["replay", str(session), "--quiet", "--config", str(config)]) == 0
    assert not store.exists()
    err = capsys.readouterr().err
    assert f"{config}: [store] not used" in err
    assert main(["replay", str(session), "--quiet", "--config", str(config), "--config-store"]) == 0
    assert store.exists()


def test_a_configuration_whose_every_request_fell_back_is_warned_about(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "down.toml"
    config.write_text('[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:1/0"\n')
    session = write_session(tmp_path, tool_session())
    argv = ["replay", str(session), "--quiet", "--config", str(config), "--config-store"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "ctxwarden replay: warning: down: every request (3) fell back to the original" in err
    assert "exact:" not in err and "mask:10:" not in err  # baselines never fall back


def test_a_file_named_twice_is_replayed_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session = write_session(tmp_path, tool_session())
    report = tmp_path / "r.json"
    argv = ["replay", str(session), str(tmp_path), "--quiet", "--no-baselines"]
    assert main([*argv, "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["files"] == 1
    assert [len(s["sessions"]) for s in data["subjects"]] == [1]
    assert f"{session}: named more than once, replayed once" in capsys.readouterr().err


def test_an_idle_gap_without_times_is_warned_about(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session = write_session(tmp_path, tool_session())
    argv = ["replay", str(session), "--quiet", "--no-baselines", "--idle-gap", "10"]
    assert main(argv) == 0
    assert "--idle-gap 10 expired nothing: no request has a timestamp" in capsys.readouterr().err
    assert main([*argv, "--turn-seconds", "20"]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"request": "str"}', "/request is a string, not a request object"),
        (
            '{"request": {"model": "x"}}',
            "/request/messages is missing (an openai.chat request needs one)",
        ),
        (
            '{"request": {"system": "s"}, "api": "anthropic.messages"}',
            "/request/messages is missing (an anthropic.messages request needs one)",
        ),
        ('{"model": "x"}', "/messages is missing (an openai.chat request needs one)"),
    ],
)
def test_a_log_line_names_the_path_at_fault(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, line: str, message: str
) -> None:
    good = write_session(tmp_path, tool_session(), "a_good")
    log = tmp_path / "b.jsonl"
    log.write_text(line + "\n")
    error = skips(capsys, ["replay", str(good), str(log), "--quiet", "--no-baselines"])
    assert error == f"ctxwarden replay: error: {log}:1: {message} (skipped)"


def test_an_empty_request_log_is_skipped_as_an_empty_session_file_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = write_session(tmp_path, tool_session(), "a_good")
    log = tmp_path / "b.jsonl"
    log.write_text("")
    error = skips(capsys, ["replay", str(good), str(log), "--quiet", "--no-baselines"])
    assert error == f"ctxwarden replay: error: {log}: no request (an empty request log) (skipped)"


def test_scenarios_that_do_not_exist_are_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nothing"
    line = fails(capsys, ["replay", "--scenarios", str(missing)])
    assert line == f"ctxwarden replay: error: {missing}: no such scenario file or directory"


def test_paths_beside_scenarios_are_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session = write_session(tmp_path, tool_session())
    line = fails(capsys, ["replay", str(session), "--scenarios"])
    assert line.startswith(f"ctxwarden replay: error: {session}: --scenarios runs the scenario")


def test_the_json_counts_the_files_read_not_those_matched(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write_session(tmp_path, tool_session(), name)
    report = tmp_path / "r.json"
    argv = ["replay", str(tmp_path), "--quiet", "--no-baselines", "--max-sessions", "1"]
    assert main([*argv, "--json", str(report)]) == 0
    assert json.loads(report.read_text())["files"] == 1
