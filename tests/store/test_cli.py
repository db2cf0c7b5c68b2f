"""``ctxwarden recall`` and ``ctxwarden store stats|gc`` through ``cli.main``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.engine import DEFAULT_TENANT
from ctxwarden.store import SqliteStore

ORIGINAL = "first line\nsecond line\nthird line ✓\nfourth line"


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data dir with one artifact for the default tenant and one for ``other``."""
    # Never touch the real ~/.local/share, even when a test forgets --data-dir.
    monkeypatch.setenv("CTXWARDEN_DATA_DIR", str(tmp_path / "default-dir-unused"))
    folder = tmp_path / "data"
    store = SqliteStore(folder / "store.sqlite3")
    store.put(DEFAULT_TENANT, ORIGINAL)
    store.put("other", "belongs to other")
    store.put_state(DEFAULT_TENANT, "s1", b"state")
    store.close()
    return folder


def _ref(text: str) -> str:
    from ctxwarden.store import content_digest, make_ref

    return make_ref(content_digest(text))


def test_recall_prints_the_original(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recall", _ref(ORIGINAL), "--data-dir", str(data_dir)]) == 0
    out, err = capsys.readouterr()
    assert out == ORIGINAL + "\n"
    assert err == ""


def test_recall_prints_a_line_range(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recall", _ref(ORIGINAL), "--lines", "2-3", "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr().out == "second line\nthird line ✓\n"


def test_recall_uses_the_tenant_option(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = _ref("belongs to other")
    assert main(["recall", ref, "--data-dir", str(data_dir)]) == 2
    assert main(["recall", ref, "--tenant", "other", "--data-dir", str(data_dir)]) == 0
    out, err = capsys.readouterr()
    assert out == "belongs to other\n"
    assert err.strip() == f"ctxwarden recall: error: no artifact {ref}"


def test_recall_reads_the_store_of_a_config_file(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ctxwarden.toml"
    config.write_text(f'[store]\npath = "{data_dir / "store.sqlite3"}"\n', encoding="utf-8")
    assert main(["recall", _ref(ORIGINAL), "--config", str(config), "--lines", "4"]) == 0
    assert capsys.readouterr().out == "fourth line\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["recall", "cw:000000000000"], "no artifact cw:000000000000"),
        (["recall", "not-a-ref"], "is not a ctxwarden reference"),
        (["recall", "{ref}", "--lines", "3-1"], "line range '3-1'"),
        (["recall", "{ref}", "--config", "/nonexistent/ctxwarden.toml"], "file not found"),
        (["store", "stats", "--config", "{bad_config}"], "store.backend"),
    ],
)
def test_errors_are_one_line_on_stderr_with_exit_2(
    tmp_path: Path,
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text('[store]\nbackend = "floppy"\n', encoding="utf-8")
    argv = [a.format(ref=_ref(ORIGINAL), bad_config=bad_config) for a in argv]
    assert main([*argv, "--data-dir", str(data_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    command = " ".join(argv[:2]) if argv[0] == "store" else argv[0]
    assert err.startswith(f"ctxwarden {command}: error: ")
    assert message in err


def test_store_stats_json(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "stats", "--json", "--data-dir", str(data_dir)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "backend": "sqlite",
        "artifacts": 2,
        "bytes": len(ORIGINAL.encode()) + len(b"belongs to other"),
        "sessions": 1,
        "tenants": 2,
    }


def test_store_stats_table(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["store", "stats", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "ctxwarden store" in out
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["backend"] == "sqlite"
    assert rows["artifacts"] == "2"
    assert rows["sessions"] == "1"
    assert rows["tenants"] == "2"


def test_store_gc_drops_expired_artifacts(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = sqlite3.connect(data_dir / "store.sqlite3")
    with db:
        db.execute("UPDATE artifacts SET last_used = 0 WHERE tenant = 'other'")
    db.close()
    assert main(["store", "gc", "--data-dir", str(data_dir)]) == 0
    assert (
        capsys.readouterr().out == f"dropped 1 artifact; 1 left ({len(ORIGINAL.encode())} bytes)\n"
    )
    assert main(["store", "gc", "--json", "--data-dir", str(data_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dropped"] == 0
    assert report["artifacts"] == 1


def test_store_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["store"])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err
