"""Reading a condensed route's body through its Content-Encoding (or not at all)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.proxy.bodies import decode_body

BODY = b'{"model": "gpt-4o", "messages": []}'


@given(st.binary(max_size=2000), st.sampled_from(["gzip", "x-gzip", "deflate", "raw-deflate"]))
def test_every_readable_coding_gives_the_bytes_back(data: bytes, coding: str) -> None:
    if coding == "raw-deflate":
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        coded, coding = packer.compress(data) + packer.flush(), "deflate"
    else:
        coded = gzip.compress(data) if "gzip" in coding else zlib.compress(data)
    decoded = decode_body(coded, coding, limit=10_000)
    assert decoded.data == data and decoded.coded and decoded.reason is None


@pytest.mark.parametrize("header", [None, "", "identity", " Identity "])
def test_no_coding_is_the_body_itself(header: str | None) -> None:
    decoded = decode_body(BODY, header, limit=100)
    assert decoded.data == BODY and not decoded.coded


def test_codings_are_undone_last_to_first() -> None:
    twice = gzip.compress(zlib.compress(BODY))  # deflate applied first, then gzip
    assert decode_body(twice, "deflate, gzip", limit=100).data == BODY
    assert decode_body(gzip.compress(BODY), "gzip, identity", limit=100).data == BODY


@pytest.mark.parametrize(
    ("header", "data", "reason"),
    [
        ("gzip", b"not gzip", "content-encoding 'gzip': corrupt body"),
        ("gzip", gzip.compress(BODY)[:-6], "content-encoding 'gzip': corrupt body"),
        ("gzip", gzip.compress(BODY) + b"junk", "content-encoding 'gzip': corrupt body"),
        ("compress", BODY, "content-encoding 'compress' not readable here"),
        ("gzip", gzip.compress(b"x" * 101), "limit: body over 100 bytes"),
    ],
)
def test_what_cannot_be_read_says_why(header: str, data: bytes, reason: str) -> None:
    decoded = decode_body(data, header, limit=100)
    assert decoded.data is None and decoded.coded and decoded.reason == reason


def test_a_compression_bomb_is_not_inflated_past_the_limit() -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)
    decoded = decode_body(bomb, "gzip", limit=1_000_000)
    assert decoded.data is None and decoded.reason == "limit: body over 1000000 bytes"
