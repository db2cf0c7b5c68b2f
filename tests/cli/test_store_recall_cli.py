"""``ctxwarden store stats`` hides every password form; ``recall`` reads ranges strictly
and says when the line cap cut one; a server's error is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.cli.store import masked_url
from ctxwarden.engine import DEFAULT_TENANT
from ctxwarden.store import SqliteStore


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u@h:5432/db?password=hunter2", "postgresql://u@h:5432/db?password=***"),
        (
            "postgresql://u@h/db?sslmode=require&password=hunter2&connect_timeout=2",
            "postgresql://u@h/db?sslmode=require&password=***&connect_timeout=2",
        ),
        ("postgresql://u:hunter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u@h/db?pass%77ord=hunter2", "postgresql://u@h/db?pass%77ord=***"),
        ("host=h port=1 user=u password=hunter2", "host=h port=1 user=u password=***"),
        ("host=h password = 'hun ter\\'2' user=u", "host=h password = *** user=u"),
        ("password=hunter2", "password=***"),
        ("redis://default:p%40ss@h:6379/0", "redis://default:***@h:6379/0"),
        ("redis://:hunter2@h/0", "redis://:***@h/0"),
        ("redis://h/0?password=hunter2", "redis://h/0?password=***"),
        (
            "unix:///run/redis.sock?password=hunter2&db=1",
            "unix:///run/redis.sock?password=***&db=1",
        ),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_masked_url_hides_every_password(url: str, expected: str) -> None:
    assert masked_url(url) == expected
    assert "hunter2" not in masked_url(url)


def _pg_url() -> str:
    url = os.environ.get("CTXWARDEN_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("PostgreSQL is not available (run under scripts/with-services.sh)")
    return url


@pytest.mark.parametrize("form", ["query", "keyword"])
def test_store_stats_never_prints_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """The test server trusts loopback clients: any password opens it."""
    psycopg = pytest.importorskip("psycopg")
    url = _pg_url()
    if form == "query":
        url += ("&" if "?" in url else "?") + "password=hunter2"
    else:
        params = psycopg.conninfo.conninfo_to_dict(url)
        url = psycopg.conninfo.make_conninfo("", **params, password="hunter2")
    config = tmp_path / "pg.toml"
    config.write_text(f'[store]\nbackend = "postgres"\nurl = "{url}"\n', encoding="utf-8")
    assert main(["store", "stats", "--config", str(config)]) == 0
    out, err = capsys.readouterr()
    assert "hunter2" not in out + err
    assert "password=***" in out


def test_a_postgres_connection_error_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    config = tmp_path / "pg.toml"
    config.write_text(
        '[store]\nbackend = "postgres"\nurl = "postgresql://u@127.0.0.1:1/db"\n', encoding="utf-8"
    )
    assert main(["store", "stats", "--config", str(config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    # named by the key and file the address came from (audit 97, item 9)
    prefix = f"ctxwarden store stats: error: {config}: store.url: postgres store failed to connect"
    assert err.startswith(prefix)
    assert "Connection refused" in err


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CTXWARDEN_DATA_DIR", str(tmp_path / "default-dir-unused"))
    return tmp_path / "data"


def _put(data_dir: Path, text: str) -> str:
    store = SqliteStore(data_dir / "store.sqlite3")
    try:
        return store.put(DEFAULT_TENANT, text)
    finally:
        store.close()


def test_recall_says_when_the_line_cap_cut_the_range(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: 5,000 lines of the 6,000 asked for, and not a word about it."""
    ref = _put(data_dir, "\n".join(f"line {i}" for i in range(1, 6001)))
    assert main(["recall", ref, "--lines", "1-10000", "--data-dir", str(data_dir)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"line {i}" for i in range(1, 5001)]  # stdout: lines only
    assert err == (
        "[ctxwarden recall: cut at line 5,000 of 6,000 (5,000 lines at most per range); "
        "ask for --lines 5001-6000]\n"
    )


def test_recall_says_nothing_when_the_whole_range_came(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = _put(data_dir, "a\nb\nc")
    assert main(["recall", ref, "--lines", "2-10000", "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr() == ("b\nc\n", "")


@pytest.mark.parametrize("spec", ["1_0", "+2", "1-1_0"])
def test_recall_refuses_a_range_that_is_not_digits(
    data_dir: Path, capsys: pytest.CaptureFixture[str], spec: str
) -> None:
    ref = _put(data_dir, "\n".join("x" * 20))
    assert main(["recall", ref, "--lines", spec, "--data-dir", str(data_dir)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "is not A-B" in err
