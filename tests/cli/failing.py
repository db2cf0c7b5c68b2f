"""What every CLI command shows when it fails: one error line, nothing else."""

from __future__ import annotations

import pytest

from ctxwarden.cli import main


def fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI; assert exit 2, nothing on stdout, one error line on stderr and no
    traceback; that line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and "error:" in lines[0]
    return lines[0]
