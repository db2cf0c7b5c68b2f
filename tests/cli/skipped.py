"""What ``ctxwarden replay`` shows for an input it skips."""

from __future__ import annotations

import pytest

from ctxwarden.cli import main


def skips(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``replay``; assert exit 2, the table saying one input was skipped, and one
    error line naming it, no traceback; that line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "1 input(s) skipped" in out and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and lines[0].endswith("(skipped)")
    return lines[0]
