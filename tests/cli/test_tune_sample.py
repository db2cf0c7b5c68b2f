"""``benchmarks/tune_sample.py`` fails as the CLI does: one line naming the key, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tune_sample_names_a_bad_key_without_a_traceback(tmp_path: Path) -> None:
    """benchmarks/tune_sample.py checks every --set before replaying anything."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tune_sample.py"), "--corpus", str(corpus),
         "balanced", "--set", "mask.min_tokenz=3"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "CTXWARDEN_DATA_DIR": str(tmp_path / "data")},
    )  # fmt: skip
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.strip() == (
        "tune_sample.py: error: pipeline.mask.min_tokenz: unknown key "
        "(config balanced --set mask.min_tokenz=3)"
    )


def _tune(corpus: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tune_sample.py"), "--corpus", str(corpus),
         "--jobs", "1", *args],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "CTXWARDEN_DATA_DIR": str(tmp_path / "data")},
    )  # fmt: skip


def test_tune_sample_source_keeps_the_named_sources_only(tmp_path: Path) -> None:
    """--source filters by the file name's source prefix; none matching is exit 2."""
    bundled = sorted((ROOT / "src" / "ctxwarden" / "data" / "sessions").glob("*.json.gz"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for source, path in zip(("alpha", "beta", "beta"), bundled, strict=False):
        (corpus / f"{source}__{path.name}").write_bytes(path.read_bytes())
    out = tmp_path / "rows.json"
    done = _tune(corpus, tmp_path, "--every", "1", "--source", "alpha", "--json", str(out),
                 "balanced")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["balanced"]
    assert len(rows) == 1
    missing = _tune(corpus, tmp_path, "--source", "gamma", "balanced")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"tune_sample.py: error: no session file in {corpus} matches"
