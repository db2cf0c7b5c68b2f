"""``ctxwarden replay`` and its reports: written before the table, so a closed stdout
(``| head -1``, ``| true``) cuts the table only; an output path that cannot be written
fails before the replay; options that contradict each other are refused; the help
says what the command reads without PATHS and what each column means."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwarden.cli import build_parser, main
from tests.replay.conftest import tool_session


def _session(folder: Path) -> Path:
    path = folder / "a_session.json"
    path.write_text(json.dumps({"id": "a_session", "messages": tool_session()}))
    return path


def _closed_stdout(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``ctxwarden`` with a stdout pipe whose reader is gone before it starts."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "CTXWARDEN_DATA_DIR": str(tmp_path / "data")}
    try:
        return subprocess.run(
            [sys.executable, "-m", "ctxwarden", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


def test_a_closed_stdout_still_gets_both_reports_written(tmp_path: Path) -> None:
    session = _session(tmp_path)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    argv = ["replay", str(session), "--no-baselines", "--quiet"]
    done = _closed_stdout([*argv, "--json", str(out_json), "--html", str(out_html)], tmp_path)
    assert done.returncode == 141, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(out_json.read_text())["subjects"][0]["aggregate"]["requests"] == 3
    assert out_html.read_text().lstrip().lower().startswith("<!doctype html")


def test_a_closed_stdout_keeps_the_skips_and_their_exit_status(tmp_path: Path) -> None:
    session = _session(tmp_path)
    unusable = tmp_path / "b_unusable.json"
    unusable.write_text("[1, 2, 3]")
    out_json = tmp_path / "r.json"
    argv = ["replay", str(session), str(unusable), "--no-baselines", "--quiet"]
    done = _closed_stdout([*argv, "--json", str(out_json)], tmp_path)
    assert done.returncode == 2
    assert f"{unusable}: not a session" in done.stderr and "(skipped)" in done.stderr
    assert [s["file"] for s in json.loads(out_json.read_text())["skipped"]] == [str(unusable)]


def test_a_closed_stdout_keeps_the_failed_gates_and_their_exit_status(tmp_path: Path) -> None:
    session = _session(tmp_path)
    gates = tmp_path / "gates.toml"
    gates.write_text("[gates]\nmin_reduction = 0.99\n")
    argv = ["replay", str(session), "--no-baselines", "--quiet", "--strict", "--gates"]
    done = _closed_stdout([*argv, str(gates)], tmp_path)
    assert done.returncode == 1
    assert "gate min_reduction failed" in done.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("flag", ["--json", "--html"])
def test_an_output_in_a_directory_that_takes_no_file_fails_before_the_replay(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """``/proc`` exists and passes a permission check as root, yet takes no new file."""
    import ctxwarden.cli.replay as replay_cli

    def no_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("replayed before checking the output")

    monkeypatch.setattr(replay_cli, "run_replay", no_replay)
    assert main(["replay", flag, "/proc/ctxwarden-report.out", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and "Errno" not in err
    assert err.strip() == (
        f"ctxwarden replay: error: {flag} /proc/ctxwarden-report.out: cannot write a file "
        "in '/proc' (No such file or directory)"
    )


def test_the_write_check_leaves_nothing_behind(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    existing = tmp_path / "old.json"
    existing.write_text("kept")
    session = _session(tmp_path)
    argv = ["replay", str(session), "--no-baselines", "--quiet", "--max-sessions", "1"]
    assert main([*argv, "--html", str(tmp_path / "new.html")]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_session.json", "new.html", "old.json"]
    assert existing.read_text() == "kept"


def test_mask_with_no_baselines_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--no-baselines", "--mask", "5", "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        "ctxwarden replay: error: --mask 5: --no-baselines drops every mask:N baseline "
        "(give one of them)"
    )


def test_an_empty_directory_is_an_error_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not an input")
    assert main(["replay", str(empty), "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"ctxwarden replay: error: {empty}: no session or request log")


def test_the_help_says_what_runs_without_paths_and_what_critical_is() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices["replay"].format_help()  # type: ignore[attr-defined]
    assert "Without PATHS, the real sessions bundled with ctxwarden are replayed" in text
    assert "critical          error lines kept" in text


@pytest.mark.parametrize("flag", ["--json", "--html"])
@pytest.mark.parametrize("named", ["file", "folder", "config"])
def test_a_report_never_overwrites_what_the_replay_reads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, named: str
) -> None:
    session = _session(tmp_path)
    config = tmp_path / "balanced.toml"
    config.write_text('preset = "balanced"\n')
    kept = {p: p.read_bytes() for p in (session, config)}
    target = config if named == "config" else session
    paths = [str(tmp_path / ".." / tmp_path.name)] if named == "folder" else [str(session)]
    argv = ["replay", *paths, "--config", str(config), "--no-baselines", "--quiet"]
    assert main([*argv, flag, str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    what = "--config" if named == "config" else "PATHS"
    assert err.strip() == (
        f"ctxwarden replay: error: {flag} {target}: is a file the replay reads ({what}); "
        "write the report elsewhere"
    )
    assert {p: p.read_bytes() for p in kept} == kept


def test_both_reports_to_one_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    session, out = _session(tmp_path), tmp_path / "r.out"
    argv = ["replay", str(session), "--no-baselines", "--quiet"]
    assert main([*argv, "--json", str(out), "--html", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ctxwarden replay: error: --html {out}: --json writes this file already"
    )
    assert not out.exists()


def test_a_report_that_fails_midway_leaves_the_old_one_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: the write fails after some bytes; the report there before stays."""
    import ctxwarden.io

    session, out = _session(tmp_path), tmp_path / "r.json"
    out.write_text('{"old": true}')
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, handle: object) -> None:
            self.file = handle

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> None:
            self.file.write(data[:100])  # type: ignore[attr-defined]
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(ctxwarden.io.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    assert main(["replay", str(session), "--no-baselines", "--quiet", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"ctxwarden replay: error: --json {out}: cannot write it (No space left on device)"
    )
    assert out.read_text() == '{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_session.json", "r.json"]


def test_a_folder_that_cannot_be_listed_is_an_error_not_a_smaller_corpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rglob`` skipped it in silence: a part of the corpus was replayed as the whole."""
    _session(tmp_path)
    hidden = tmp_path / "part"
    hidden.mkdir()
    _session(hidden)
    real = os.scandir

    def scandir(path: object = ".") -> object:
        if Path(str(path)) == hidden:  # as a user without read permission on it sees it
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    assert main(["replay", str(tmp_path), "--no-baselines", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ctxwarden replay: error: {hidden}: cannot list this directory (Permission denied)"
    )
