"""Client-controlled text never picks a metric's kind nor reaches a log line as written:
a Content-Encoding value is not repeated, a fallback's kind is read off fixed reason
starts, the log line stays one line for every splitter, and store failures are logged
without the driver's text (a URL with its password)."""

from __future__ import annotations

import logging

import pytest

from ctxwarden.errors import StoreError, store_failure
from ctxwarden.proxy.bodies import decode_body
from ctxwarden.telemetry import JsonFormatter
from ctxwarden.telemetry.metrics import _fallback_kind


def test_an_unknown_content_encoding_is_not_repeated() -> None:
    decoded = decode_body(b"{}", "x-restore-tok-SECRETVALUE123", 1 << 20)
    assert decoded.data is None and decoded.reason is not None
    assert "SECRET" not in decoded.reason.upper() and "other" in decoded.reason


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("proxy: content-encoding other not readable here", "client"),
        ("proxy: content-encoding 'x-restore' not readable here", "client"),
        ("proxy: malformed request at /messages/0/content", "client"),
        ("proxy: an integer past 64 bits (forwarded as sent)", "client"),
        ("unreadable: TypeError", "error"),  # the engine could not read what the proxy did
        ("StoreError: redis store failed to read session state", "store"),
        ("ArtifactCorrupted: artifact cw:0123456789ab does not match its digest", "store"),
        ("validation: edited text is empty", "validation"),
        ("proxy: limit: engine thread busy for over 1 s", "limit"),
        ("TypeError", "error"),
    ],
)
def test_a_fallbacks_kind_comes_from_its_reasons_start(reason: str, kind: str) -> None:
    assert _fallback_kind(reason) == kind


def test_a_log_line_is_one_line_for_every_splitter() -> None:
    record = logging.LogRecord("x", logging.INFO, "p", 1, "a\u2028b\x85c\u2029d\ne", None, None)
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1


def test_a_store_failure_is_logged_without_the_drivers_text() -> None:
    exc = StoreError("postgres store failed to connect: connection to postgresql://u:pw@h/db")
    assert store_failure(exc) == "StoreError: postgres store failed to connect"
