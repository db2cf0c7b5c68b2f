"""Review 114 (a new user's run through the README): reports written into what their
path names (a FIFO, a symlink's target, an open descriptor, a file in a folder that
takes no new file), never replacing it; ``--json dir/``; gates without ``--strict``;
store files that cannot be opened; ``--model ''``; a config file's relative
``data_dir`` and ``[store] path``; the ``--credential-env`` hint; a TOML BOM."""

from __future__ import annotations

import errno
import os
import select
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ctxwarden import Engine, load_config
from ctxwarden.cli import main
from ctxwarden.cli.common import store_errors
from ctxwarden.config import StoreConfig
from ctxwarden.errors import StoreError
from ctxwarden.io import bundled_sessions, write_atomically
from ctxwarden.proxy.tenant import load_or_create_secret
from ctxwarden.store import SqliteStore
from tests.cli.failing import fails

SESSION = str(bundled_sessions()[0])
REQUEST = '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
FAST = ["--quiet", "--no-baselines", "--max-sessions", "1"]


@pytest.fixture
def no_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any replay is a failure: the command must stop at its checks."""
    import ctxwarden.cli.replay as replay_cli

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("replayed before checking the output")

    monkeypatch.setattr(replay_cli, "run_replay", refused)


class _FifoReader:
    """Reads a FIFO from a descriptor opened before any writer (non-blocking, so
    nothing waits on it), until a writer has come and gone or ``seconds`` pass."""

    def __init__(self, path: Path, seconds: float = 30.0) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.data = b""
        self._deadline = time.monotonic() + seconds
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while time.monotonic() < self._deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                self.data += chunk
            elif self.data:  # the writer closed its end after writing
                return
            else:  # no writer yet: select reports the end at once, so wait a little
                time.sleep(0.05)

    def result(self) -> bytes:
        self._thread.join()  # it ends by the deadline (select waits 0.2 s at most)
        os.close(self.fd)
        return self.data


def test_a_report_goes_into_a_fifo_which_stays_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json >(jq .)`` names a pipe: the report is written into it, and the pipe is
    not replaced by a regular file its reader never sees."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    assert main(["replay", SESSION, *FAST, "--json", str(fifo)]) == 0
    data = reader.result()
    capsys.readouterr()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert data.startswith(b"{") and b'"version"' in data


def test_a_report_through_a_symlink_writes_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real.html"
    real.write_text("old")
    real.chmod(0o640)
    if os.geteuid() == 0:  # a file of another user, as root replaces it
        os.chown(real, 65534, 65534)
    owner = (real.stat().st_uid, real.stat().st_gid)
    link = tmp_path / "link.html"
    link.symlink_to(real.name)
    assert main(["replay", SESSION, *FAST, "--html", str(link)]) == 0
    capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_text().startswith("<!DOCTYPE html>")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # replaced atomically, mode kept
    assert (real.stat().st_uid, real.stat().st_gid) == owner  # and its owner
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_path_naming_an_open_descriptor_is_written_into_not_replaced(tmp_path: Path) -> None:
    """``--json /dev/stdout > out`` (or ``>> log``): ``/proc/self/fd/N`` names the file
    the shell opened; the report is appended to that very file (same inode, what was
    there kept), not put in a temporary file in ``/proc``."""
    log = tmp_path / "log.txt"
    log.write_bytes(b"earlier\n")
    inode = log.stat().st_ino
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        write_atomically(f"/proc/self/fd/{fd}", b"report\n")
    finally:
        os.close(fd)
    assert log.read_bytes() == b"earlier\nreport\n" and log.stat().st_ino == inode


def test_a_report_to_the_processs_own_stdout_shares_its_offset(tmp_path: Path) -> None:
    """``replay --json /dev/stdout > out``: the report went through a second open of
    the file, with its own offset, and the table printed after it overwrote its start
    (exit 0, unreadable JSON). Written through descriptor 1 itself, the table follows
    the report."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out.txt"
    with open(out, "wb") as stdout:  # what the shell's "> out" gives the process
        done = subprocess.run(
            [sys.executable, "-m", "ctxwarden", "replay", SESSION, *FAST, "--quiet",
             "--json", "/dev/stdout"],
            stdout=stdout, stderr=subprocess.PIPE, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    text = out.read_text()
    report, end = json.JSONDecoder().raw_decode(text)
    assert report["files"] == 1
    assert "ctxwarden replay" in text[end:]  # the table, after the report


def test_a_writable_file_in_a_folder_that_takes_no_new_file_is_written_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the user cannot create files in (faked: root is not stopped by chmod)
    holding a file the user may write: the report is written into the file, not
    refused after the whole replay with "Permission denied"."""
    out = tmp_path / "report.json"
    out.write_text("old")
    inode = out.stat().st_ino

    def denied(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".x"))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    assert main(["replay", SESSION, *FAST, "--json", str(out)]) == 0
    capsys.readouterr()
    assert out.read_text().startswith("{") and out.stat().st_ino == inode


def test_a_new_report_in_such_a_folder_is_refused_before_replaying(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_replay: None,
) -> None:
    def denied(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".x"))

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    out = tmp_path / "new.json"
    line = fails(capsys, ["replay", SESSION, "--json", str(out)])
    assert f"--json {out}: cannot write a file in {str(tmp_path)!r} (Permission denied)" in line


def test_an_unwritable_fifo_is_refused_before_replaying(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    no_replay: None,
) -> None:
    """A pipe (or device) the user may not write: refused before the replay, as a
    file is (faked with ``os.access``: root may write anything)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    reader = _FifoReader(fifo, seconds=1)  # the old check opened the FIFO: not stuck
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)
    line = fails(capsys, ["replay", SESSION, "--json", str(fifo)])
    reader.result()
    assert f"--json {fifo}: cannot write this file (Permission denied)" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_report_path_ending_with_a_slash_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_replay: None
) -> None:
    """``--json newout/`` means a folder: refused before replaying (it wrote a file
    named ``newout``)."""
    out = f"{tmp_path / 'newout'}/"
    line = fails(capsys, ["replay", SESSION, "--json", out])
    assert f"--json {out}: names a directory (it ends with /)" in line
    assert not (tmp_path / "newout").exists()
    with pytest.raises(IsADirectoryError):
        write_atomically(out, b"{}")
    assert not (tmp_path / "newout").exists()


def test_gates_without_strict_are_reported_not_enforced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = tmp_path / "fail.toml"
    failing.write_text("[gates]\nmin_reduction = 0.999\n")
    assert main(["replay", SESSION, *FAST, "--gates", str(failing)]) == 0
    err = capsys.readouterr().err
    assert "warning: default: gate min_reduction failed" in err
    assert "not enforced: without --strict the exit status ignores gates" in err
    assert main(["replay", SESSION, *FAST, "--gates", str(failing), "--strict"]) == 1
    assert "not enforced" not in capsys.readouterr().err
    passing = tmp_path / "pass.toml"
    passing.write_text("[gates]\nmax_integrity_violations = 0\n")
    assert main(["replay", SESSION, *FAST, "--gates", str(passing)]) == 0
    err = capsys.readouterr().err
    assert "gates passed: max_integrity_violations <= 0 on default" in err


def test_a_store_file_that_exists_or_is_hidden_cannot_be_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "cannot create" a file that is there, or that a folder the user cannot
    enter hides (faked: root enters any folder)."""
    store = tmp_path / "store.sqlite3"
    store.write_bytes(b"")
    denied = PermissionError(errno.EACCES, "Permission denied", str(store))
    with pytest.raises(StoreError) as info, store_errors(StoreConfig(), str(tmp_path)):
        raise denied
    assert str(info.value) == f"cannot open the store file {store}: Permission denied"
    store.unlink()
    real_stat = os.stat

    def hidden(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", hidden)
    with pytest.raises(StoreError) as info, store_errors(StoreConfig(), str(tmp_path)):
        raise denied
    assert str(info.value) == f"cannot open the store file {store}: Permission denied"


@pytest.mark.parametrize(
    "command", [["recall", "cw:0123456789ab"], ["store", "stats"], ["store", "gc"]]
)
def test_reading_commands_name_a_store_file_they_cannot_open(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    """A data dir the user cannot enter (faked: root enters any): one line naming the
    store file, not a raw ``[Errno 13] Permission denied: '...'``."""
    locked = tmp_path / "locked"
    locked.mkdir()
    store = locked / "store.sqlite3"
    real_stat = os.stat

    def hidden(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path).startswith(str(locked) + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    def refused(config: object, data_dir: object = None) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(store))

    monkeypatch.setattr(os, "stat", hidden)
    monkeypatch.setattr("ctxwarden.cli.store.open_store", refused)
    line = fails(capsys, [*command, "--data-dir", str(locked)])
    assert line.endswith(f"cannot open the store file {store}: Permission denied")
    assert "Errno" not in line


def test_an_empty_model_is_refused_like_an_empty_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request = tmp_path / "r.json"
    request.write_text(REQUEST)
    line = fails(capsys, ["condense", str(request), "--model", "", "--mode", "exact"])
    assert "--model: an empty model name" in line
    line = fails(capsys, ["condense", str(request), "--model", " ", "--mode", "exact"])
    assert "--model: an empty model name" in line


def test_a_config_files_relative_paths_are_its_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``data_dir = "a"`` in ``conf/c.toml`` is ``conf/a`` from any current directory
    (it was ``./a``); ``--data-dir`` keeps meaning the current directory's."""
    conf = tmp_path / "conf"
    conf.mkdir()
    config = conf / "c.toml"
    config.write_text('data_dir = "a"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_config(config).data_dir == str(conf / "a")
    assert Engine.from_file(Path("..") / "conf" / "c.toml").config.data_dir == str(
        Path("..") / "conf" / "a"
    )
    SqliteStore(conf / "a" / "store.sqlite3").close()
    assert main(["store", "stats", "--config", str(config), "--json"]) == 0
    capsys.readouterr()
    line = fails(capsys, ["store", "stats", "--config", str(config), "--data-dir", "a"])
    assert "no store at a/store.sqlite3" in line  # the flag: the current directory's
    (conf / "s.toml").write_text('[store]\npath = "db/s.sqlite3"\nbackend = "sqlite"\n')
    assert load_config(conf / "s.toml").store.path == str(conf / "db" / "s.sqlite3")
    (conf / "abs.toml").write_text(f'data_dir = "{tmp_path / "x"}"\n')
    assert load_config(conf / "abs.toml").data_dir == str(tmp_path / "x")


def test_recall_of_a_missing_ref_hints_at_credential_env_where_a_proxy_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "data"
    SqliteStore(folder / "store.sqlite3").close()
    line = fails(capsys, ["recall", "cw:0123456789ab", "--data-dir", str(folder)])
    assert "no artifact cw:0123456789ab" in line and "--credential-env" not in line
    load_or_create_secret(folder)
    line = fails(capsys, ["recall", "cw:0123456789ab", "--data-dir", str(folder)])
    assert "no artifact cw:0123456789ab" in line
    assert "proxy.secret" in line and "--credential-env VAR" in line


def test_a_toml_config_with_a_bom_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bom.toml"
    config.write_bytes(b'\xef\xbb\xbfpreset = "conservative"\n')
    assert load_config(config).preset == "conservative"
    request = tmp_path / "r.json"
    request.write_text(REQUEST)
    assert main(["condense", str(request), "--config", str(config), "--mode", "exact"]) == 0
    capsys.readouterr()
