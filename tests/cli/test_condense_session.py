"""``ctxwarden condense`` over one file: on its own by default (no session state kept,
so every run and every preset gives what a fresh data directory gives), continuing a
stored session only with ``--session``; never with references nobody could recall."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from ctxwarden.cli import main
from ctxwarden.io import bundled_sessions, load_session, session_requests


@pytest.fixture(scope="module")
def request_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The last request of a bundled real session (long enough to be condensed)."""
    session = load_session(bundled_sessions()[0])
    request = [r for r, _ in session_requests(session)][-1]
    path = tmp_path_factory.mktemp("req") / "request.json"
    path.write_bytes(orjson.dumps(request))
    return path


def _condense(
    capsys: pytest.CaptureFixture[str], request_file: Path, data: Path, *flags: str
) -> tuple[bytes, dict[str, Any]]:
    assert main(["condense", str(request_file), "--data-dir", str(data), "--report", *flags]) == 0
    out, err = capsys.readouterr()
    return out.encode(), orjson.loads(err)


def test_every_run_gives_the_same_bytes_and_presets_do_not_leak(
    capsys: pytest.CaptureFixture[str], request_file: Path, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    first, report = _condense(capsys, request_file, shared)
    assert report["tokens_after"] < report["tokens_before"]
    again, _ = _condense(capsys, request_file, shared)
    assert again == first
    for preset in ("aggressive", "conservative", "balanced"):
        in_shared, _ = _condense(capsys, request_file, shared, "--preset", preset)
        fresh, _ = _condense(capsys, request_file, tmp_path / preset, "--preset", preset)
        assert in_shared == fresh, preset


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return set().union(*(_strings(v) for v in items)) if items else set()


def test_references_of_a_one_shot_run_recall(
    capsys: pytest.CaptureFixture[str], request_file: Path, tmp_path: Path
) -> None:
    out, _ = _condense(capsys, request_file, tmp_path)
    ref = next(w.strip("(),;]") for w in out.decode().split() if w.startswith("cw:"))
    assert main(["recall", ref, "--data-dir", str(tmp_path)]) == 0
    recalled = capsys.readouterr().out
    sent = _strings(orjson.loads(request_file.read_bytes()))
    assert recalled in sent or recalled.removesuffix("\n") in sent


def test_a_named_session_continues_across_runs(
    capsys: pytest.CaptureFixture[str], request_file: Path, tmp_path: Path
) -> None:
    _, first = _condense(capsys, request_file, tmp_path, "--session", "s1")
    _, second = _condense(capsys, request_file, tmp_path, "--session", "s1")
    assert (first["session"], second["session"]) == ("s1", "s1")
    assert (first["session_turns"], second["session_turns"]) == (1, 2)
    _, other = _condense(capsys, request_file, tmp_path, "--session", "s2")
    assert other["session_turns"] == 1


def test_the_memory_store_is_refused(
    capsys: pytest.CaptureFixture[str], request_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mem.toml"
    config.write_text('[store]\nbackend = "memory"\n')
    assert main(["condense", str(request_file), "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert "store.backend" in err and "recalled" in err and str(config) in err
    # exact mode writes no reference: allowed
    assert main(["condense", str(request_file), "--config", str(config), "--mode", "exact"]) == 0
    assert orjson.loads(capsys.readouterr().out) == orjson.loads(request_file.read_bytes())


def test_shadow_mode_with_the_memory_store_prints_the_original(
    capsys: pytest.CaptureFixture[str], request_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mem.toml"
    config.write_text('[store]\nbackend = "memory"\n')
    assert main(["condense", str(request_file), "--config", str(config), "--mode", "shadow"]) == 0
    assert orjson.loads(capsys.readouterr().out) == orjson.loads(request_file.read_bytes())
