"""An input with no usable request is skipped like any other unusable input (named on
stderr, in the JSON's ``skipped``, exit status 2), never counted as a session of
nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.errors import ReplayError
from ctxwarden.io import load_session
from tests.cli.skipped import skips
from tests.replay.conftest import tool_session

UNUSABLE = [
    ("array.json", "[1, 2, 3]", "not a session (/0 is a number, not a message object)"),
    ("empty.json", "[]", "not a session (an empty list, no messages)"),
    ("mixed.json", '[{"role": "user", "content": "hi"}, "x"]', "/1 is a string"),
]


def _beside_a_good_session(tmp_path: Path, name: str, text: str) -> tuple[Path, Path, list[str]]:
    """The file ``name`` holding ``text``, the JSON report's path, and the replay
    command over a good session and that file."""
    good = tmp_path / "a_good.json"
    good.write_text(json.dumps({"id": "a_good", "messages": tool_session()}))
    other = tmp_path / name
    other.write_text(text)
    report = tmp_path / "report.json"
    argv = ["replay", str(good), str(other), "--no-baselines", "--quiet", "--json", str(report)]
    return other, report, argv


@pytest.mark.parametrize(("name", "text", "message"), UNUSABLE)
def test_an_input_with_no_usable_request_is_skipped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, message: str
) -> None:
    bad, report, argv = _beside_a_good_session(tmp_path, name, text)
    line = skips(capsys, argv)
    assert line.startswith(f"ctxwarden replay: error: {bad}: ") and message in line
    data = json.loads(report.read_text())
    assert [s["file"] for s in data["skipped"]] == [str(bad)]
    (subject,) = data["subjects"]
    assert [s["session"] for s in subject["sessions"]] == ["a_good"]


@pytest.mark.parametrize("text", ["[]", "[1, 2, 3]", '[{"role": "user"}, null]'])
def test_a_bare_list_is_a_session_only_when_it_holds_message_objects(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(ReplayError, match=r"s\.json: not a session"):
        load_session(path)


def test_a_bare_message_list_is_still_a_session(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(tool_session()))
    assert load_session(path).messages == tool_session()


@pytest.mark.parametrize(
    ("name", "text"),
    [("no_answer.json", '{"id": "s", "messages": [{"role": "user", "content": "hi"}]}')],
)
def test_an_input_of_no_turn_is_not_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str
) -> None:
    """A session that ended before the agent's first answer is valid input with nothing
    to replay: no skip, exit 0 (an evaluation over many sessions must not fail on one),
    and no request in any figure. (A request log of no request is skipped, as an empty
    session file is: tests/replay/test_audit_user_fixes.py.)"""
    _, report, argv = _beside_a_good_session(tmp_path, name, text)
    assert main(argv) == 0
    assert "error" not in capsys.readouterr().err
    data = json.loads(report.read_text())
    assert data["skipped"] == []
    (subject,) = data["subjects"]
    assert sum(s["requests"] for s in subject["sessions"]) == len(
        [m for m in tool_session()[1:] if m["role"] == "assistant"]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"messages": [1, 2, 3]}', "/messages/0 is a number"),
        ('{"model": 5, "messages": [{"role": "user", "content": "x"}]}', "model is a number"),
        ('{"tools": {}, "messages": [{"role": "user", "content": "x"}]}', "tools is an object"),
    ],
)
def test_a_session_object_with_values_of_the_wrong_type_is_not_a_session(
    tmp_path: Path, text: str, message: str
) -> None:
    """A non-string model crashed the whole replay with a traceback (exit 1, the gate
    status); now the file is refused by name like any unusable input."""
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(ReplayError, match=r"s\.json: not a session") as info:
        load_session(path)
    assert message in str(info.value)
