"""``condense`` prints the request it read with every value as sent: integers past
64 bits and lone surrogate escapes included (orjson would change or refuse them)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.io import bundled_sessions, dump_json, parse_json

WIDE = {
    "n": 123456789012345678901234567890,
    "over": 18446744073709551616,  # 2**64: just past orjson's range
    "under": -9223372036854775809,  # -2**63 - 1
    "max": 18446744073709551615,  # still orjson's
}


def _condense(capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, *flags: str) -> str:
    request = tmp_path / "request.json"
    request.write_text(body, encoding="utf-8")
    argv = ["condense", str(request), "--data-dir", str(tmp_path / "data"), *flags]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return out


@pytest.mark.parametrize("mode", ["exact", "active", "shadow"])
def test_condense_keeps_integers_wider_than_64_bits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, mode: str
) -> None:
    body = (
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], '
        + ", ".join(f'"{k}": {v}' for k, v in WIDE.items())
        + "}"
    )
    out = _condense(capsys, tmp_path, body, "--mode", mode, "--report")
    for value in WIDE.values():
        assert f": {value}" in out
    printed = json.loads(out)
    assert {k: printed[k] for k in WIDE} == WIDE
    assert printed["messages"] == [{"role": "user", "content": "hi"}]


def test_condense_keeps_a_lone_surrogate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = (
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "a\\ud800b"}], '
        '"user": "caf\\u00e9 \\udfff"}'
    )
    out = _condense(capsys, tmp_path, body)
    printed = json.loads(out)
    assert printed["messages"][0]["content"] == "a\ud800b"
    assert printed["user"] == "café \udfff"


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_numbers_json_cannot_carry_are_not_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, number: str
) -> None:
    """Never read as a float the request did not hold (printed back as something else)."""
    request = tmp_path / "request.json"
    request.write_text(f'{{"model": "gpt-4o", "messages": [], "x": {number}}}')
    assert main(["condense", str(request), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{request}: not JSON" in err


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 123456789012345678901234567890, "b": [-1e300, 0.1, "\\u00e9"]}',
        '["\\ud800", {"\\udc00": 1}]',
        '{"id": "1234567890123456789012", "n": 12345678901234567890}',
    ],
)
def test_parse_and_dump_keep_every_value(text: str) -> None:
    value = parse_json(text.encode())
    assert value == json.loads(text)
    for indent in (False, True):
        assert json.loads(dump_json(value, indent=indent)) == json.loads(text)


def test_a_session_on_stdin_is_read_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``zcat session.json.gz | ctxwarden condense -``: the last real request, not an
    empty second read of stdin."""
    data = gzip.decompress(bundled_sessions()[0].read_bytes())
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["condense", "-", "--mode", "exact", "--data-dir", str(tmp_path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    session = json.loads(data)
    assert printed["messages"] == session["messages"][: len(printed["messages"])]
    assert session["messages"][len(printed["messages"])]["role"] == "assistant"


def test_a_wide_integer_the_engine_cannot_read_is_printed_as_sent(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """In a tool schema the engine counts: it forwards the request unchanged, and so
    does the printout; ``inspect`` (which prints no request) still reads it."""
    n = 123456789012345678901234567890
    body = (
        '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": '
        '[{"type": "function", "function": {"name": "f", "parameters": '
        f'{{"type": "object", "maximum": {n}}}}}}}]}}'
    )
    printed = json.loads(_condense(capsys, tmp_path, body))
    assert printed["tools"][0]["function"]["parameters"]["maximum"] == n
    assert main(["inspect", str(tmp_path / "request.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == 1
