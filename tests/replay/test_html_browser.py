"""The HTML report opened in a real headless chromium: the charts must render."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxwarden.replay import run_replay, write_html

pytestmark = pytest.mark.browser


def _chromium() -> str | None:
    explicit = os.environ.get("CTXWARDEN_TEST_CHROMIUM")
    if explicit:
        return explicit
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_charts_in_chromium(session_file: Path, tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        if os.environ.get("CTXWARDEN_REQUIRE_SERVICES") == "1":
            pytest.fail("chromium not found and CTXWARDEN_REQUIRE_SERVICES=1")
        pytest.skip("chromium not found (set CTXWARDEN_TEST_CHROMIUM or put chromium on PATH)")
    result = run_replay([session_file], ("default",), baselines=["exact", "mask:1"])
    page = tmp_path / "report.html"
    write_html(result, page)
    source = page.read_text()
    assert "http://" not in source.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in source
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        page.as_uri(),
    ]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'data-charts="rendered"' in dom
    assert len(re.findall(r'<svg[^>]*class="cw-chart"', dom)) == 3
    # tokens chart: exact + mask:1 + default lines; cost chart: cached and uncached per subject
    assert len(re.findall(r"<polyline", dom)) == 3 + 6
    assert re.search(r'<rect[^>]*class="cw-bar"', dom)  # mask:1 saved tokens
    assert 'id="view-1-0"' in dom  # the worst-session view of mask:1
    assert "<mark>" in dom
