"""Files as other tools write them are read like any session file: a byte-order mark,
a lone surrogate escape (valid JSON orjson refuses), upper-case names; a macOS
resource fork beside a session is no input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ctxwarden.io import load_session
from ctxwarden.replay.inputs import expand_paths
from tests.replay.conftest import tool_session


def _session_bytes(sid: str) -> bytes:
    return json.dumps({"id": sid, "messages": tool_session()}).encode()


def test_a_session_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + _session_bytes("bom"))
    assert load_session(path).id == "bom"
    zipped = tmp_path / "bom.json.gz"
    zipped.write_bytes(gzip.compress(b"\xef\xbb\xbf" + _session_bytes("bom2")))
    assert load_session(zipped).id == "bom2"


def test_a_lone_surrogate_escape_is_read(tmp_path: Path) -> None:
    messages = tool_session()
    messages[-1] = {**messages[-1], "content": "half of a pair: \\ud83d"}
    text = json.dumps({"id": "s", "messages": messages}).replace("\\\\ud83d", "\\ud83d")
    path = tmp_path / "surrogate.json"
    path.write_text(text)
    session = load_session(path)
    assert session.messages[-1]["content"] == "half of a pair: \ud83d"


def test_a_directory_reads_any_letter_case_and_skips_resource_forks(tmp_path: Path) -> None:
    (tmp_path / "a.JSON.GZ").write_bytes(gzip.compress(_session_bytes("a")))
    (tmp_path / "b.json").write_bytes(_session_bytes("b"))
    (tmp_path / "._b.json").write_bytes(b"\x00\x05\x16\x07 Mac OS X resource fork")
    (tmp_path / "notes.txt").write_text("not an input")
    assert [p.name for p in expand_paths([tmp_path])] == ["a.JSON.GZ", "b.json"]


def test_each_session_record_names_its_file_and_source(tmp_path: Path) -> None:
    from ctxwarden.cli import main

    path = tmp_path / "one.json"
    obj = {"id": "dup", "source": "agent_x", "messages": tool_session()}
    path.write_text(json.dumps(obj))
    report = tmp_path / "r.json"
    argv = ["replay", str(path), "--no-baselines", "--quiet", "--json", str(report)]
    assert main(argv) == 0
    (record,) = json.loads(report.read_text())["subjects"][0]["sessions"]
    assert (record["session"], record["file"], record["source"]) == ("dup", str(path), "agent_x")


def test_a_request_log_with_a_lone_surrogate_escape_is_read(tmp_path: Path) -> None:
    from ctxwarden.replay.inputs import read_jsonl

    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "half: \\ud83d"}]}
    line = json.dumps({"session": "s", "request": request}).replace("\\\\ud83d", "\\ud83d")
    path = tmp_path / "log.jsonl"
    path.write_text(line + "\n")
    (session,) = read_jsonl(path)
    assert session.requests[0].request["messages"][0]["content"] == "half: \ud83d"


def test_a_directory_named_like_an_input_is_no_input(tmp_path: Path) -> None:
    (tmp_path / "sub.json").mkdir()
    (tmp_path / "sub.json" / "a.json").write_bytes(_session_bytes("a"))
    assert [p.name for p in expand_paths([tmp_path])] == ["a.json"]
