"""Whether the proxy's server decoded a request body: aiohttp's record, else the header."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from ctxwarden.proxy.relay import body_was_decoded


def test_an_unencoded_request_reads_as_not_decoded() -> None:
    request = make_mocked_request("POST", "/v1/chat/completions")
    assert body_was_decoded(request) is False


def test_the_parser_record_wins_over_the_header() -> None:
    request = make_mocked_request(
        "POST", "/v1/chat/completions", headers={"Content-Encoding": "gzip"}
    )
    # make_mocked_request's message records no decoding, whatever the header says
    assert request._message.compression is None
    assert body_was_decoded(request) is False


@pytest.mark.parametrize(
    ("coding", "decoded"),
    [
        ("gzip", True),
        (" GZip ", True),
        ("deflate", True),
        ("br", True),
        ("zstd", True),
        ("identity", False),
        ("compress", False),
        ("", False),
    ],
)
def test_without_the_private_record_the_header_decides(coding: str, decoded: bool) -> None:
    headers: CIMultiDict[str] = CIMultiDict()
    if coding:
        headers["Content-Encoding"] = coding
    stub: Any = SimpleNamespace(headers=headers)  # a request object with no _message
    assert body_was_decoded(cast(web.Request, stub)) is decoded
