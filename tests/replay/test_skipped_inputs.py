"""An input the replay cannot use is skipped and named, never counted: the figures of
the other inputs are those of a replay without it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from ctxwarden.config import EngineConfig
from ctxwarden.replay.report_json import result_to_dict
from ctxwarden.replay.runner import run_replay
from tests.replay.conftest import tool_session

_CONFIG = EngineConfig(preset="balanced", store={"backend": "memory"})  # type: ignore[arg-type]


def _figures(paths: list[Path]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Each subject's aggregate (timings left out) and the skipped inputs."""
    result = run_replay(paths, [_CONFIG])
    data = result_to_dict(result, turns=False)
    figures = []
    for subject in data["subjects"]:
        aggregate = {k: v for k, v in subject["aggregate"].items() if k != "overhead"}
        sessions = [s["session"] for s in subject["sessions"]]
        figures.append((subject["name"], aggregate, sessions))
    return figures, data["skipped"]


def _write(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"id": path.stem, "messages": messages}))
    return path


def test_a_session_the_engine_refuses_midway_is_left_out_of_every_figure(
    tmp_path: Path,
) -> None:
    good = _write(tmp_path / "a_good.json", tool_session())
    broken_messages = tool_session()
    broken_messages[5] = {**broken_messages[5], "tool_call_id": "nobody"}  # an unpaired result
    broken = _write(tmp_path / "b_broken.json", broken_messages)
    later = _write(tmp_path / "c_later.json", tool_session()[:6])
    alone, none_skipped = _figures([good, later])
    together, skipped = _figures([good, broken, later])
    assert none_skipped == []
    assert together == alone
    (skip,) = skipped
    assert skip["file"] == str(broken) and skip["session"] == "b_broken"
    assert str(broken) in skip["error"] and "/messages/5" in skip["error"]


def test_a_file_that_is_not_a_session_is_skipped_and_named(tmp_path: Path) -> None:
    good = _write(tmp_path / "a_good.json", tool_session())
    garbage = tmp_path / "b_garbage.json.gz"
    garbage.write_bytes(gzip.compress(b"not json"))
    alone, _ = _figures([good])
    together, skipped = _figures([good, garbage])
    assert together == alone
    assert skipped == [
        {"file": str(garbage), "session": None, "error": skipped[0]["error"]}
    ] and skipped[0]["error"].startswith(f"{garbage}: not JSON")


def test_a_skipped_session_leaves_the_memory_peak_alone(tmp_path: Path) -> None:
    from ctxwarden.replay.runner import ReplayOptions

    good = _write(tmp_path / "a_good.json", tool_session())
    heavy = tool_session()  # a large output, then a request the engine refuses
    heavy[3] = {**heavy[3], "content": "\n".join(f"line {i} ident_{i}" for i in range(40000))}
    heavy[5] = {**heavy[5], "tool_call_id": "nobody"}
    broken = _write(tmp_path / "b_broken.json", heavy)
    options = ReplayOptions(trace_memory=True)
    result = run_replay([good, broken], [_CONFIG], options=options)
    assert len(result.skipped) == 1
    peaks = {s.name: s.peak_condense_bytes for s in result.subjects}
    # the good session's condenses allocate kilobytes; the refused one's, megabytes
    assert all(peak is not None and peak < 1_000_000 for peak in peaks.values()), peaks


def test_a_request_log_naming_an_unknown_api_is_skipped_and_named(tmp_path: Path) -> None:
    good = _write(tmp_path / "a_good.json", tool_session())
    log = tmp_path / "b_log.jsonl"
    request = {"model": "gpt-4o", "messages": tool_session()[:3]}
    log.write_bytes(json.dumps({"request": request, "api": "openai.foo"}).encode() + b"\n")
    alone, _ = _figures([good])
    together, skipped = _figures([good, log])
    assert together == alone
    (skip,) = skipped
    assert skip["error"].startswith(f"{log}:1: unknown api 'openai.foo'")
