"""A request log's ``ts`` that is not a number: an ISO 8601 time is read, anything
else is named by its line (it was dropped without a word, and ``--idle-gap`` then said
no request had a timestamp; audit 97, item 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.cli import main
from ctxwarden.errors import ReplayError
from ctxwarden.replay.inputs import read_jsonl

MESSAGES = [{"role": "user", "content": "u"}]


def _log(tmp_path: Path, *stamps: Any, key: str = "ts") -> Path:
    path = tmp_path / "log.jsonl"
    lines = [{key: ts, "model": "gpt-4o", "messages": MESSAGES} for ts in stamps]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _stamps(path: Path) -> list[float | None]:
    return [r.ts for s in read_jsonl(path) for r in s.requests]


def test_iso_times_are_timestamps(tmp_path: Path) -> None:
    path = _log(
        tmp_path,
        "2024-05-01T10:00:00Z",
        "2024-05-01T12:00:10+02:00",
        "2024-05-01T10:00:20",  # no offset: UTC
        1714557630,
        None,
    )
    assert _stamps(path) == [1714557600.0, 1714557610.0, 1714557620.0, 1714557630.0, None]
    assert _stamps(_log(tmp_path, "2024-05-01T10:00:00.5Z", key="timestamp")) == [1714557600.5]


@pytest.mark.parametrize(
    ("ts", "message"),
    [
        ("yesterday", "log.jsonl:2: /ts 'yesterday' is not an ISO 8601 time"),
        ("", "log.jsonl:2: /ts '' is not an ISO 8601 time"),
        (True, "log.jsonl:2: /ts is a boolean, not a number of seconds or an ISO 8601 time"),
        ([1], "log.jsonl:2: /ts is an array, not a number of seconds"),
        ({"s": 1}, "log.jsonl:2: /ts is an object, not a number of seconds"),
    ],
)
def test_a_ts_that_is_no_time_is_named_by_its_line(tmp_path: Path, ts: Any, message: str) -> None:
    path = _log(tmp_path, 10, ts)
    with pytest.raises(ReplayError) as info:
        read_jsonl(path)
    assert str(info.value).startswith(f"{tmp_path / message}")


def test_the_timestamp_key_is_named_when_it_is_the_one_given(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match=r"log\.jsonl:1: /timestamp is a boolean"):
        read_jsonl(_log(tmp_path, False, key="timestamp"))


def test_an_iso_ts_feeds_the_idle_gap(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _log(tmp_path, "2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z")
    assert main(["replay", str(path), "--quiet", "--no-baselines", "--idle-gap", "5"]) == 0
    assert "no request has a timestamp" not in capsys.readouterr().err


def test_a_bad_ts_skips_its_log_with_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _log(tmp_path, "soon")
    assert main(["replay", str(path), "--quiet", "--no-baselines"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:1: /ts 'soon' is not an ISO 8601 time" in err and "Traceback" not in err
