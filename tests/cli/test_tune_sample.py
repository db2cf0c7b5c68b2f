"""``benchmarks/tune_sample.py`` fails as the CLI does: one line naming the key, exit 2."""

from __future__ import annotations

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
