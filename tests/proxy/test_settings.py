"""Proxy settings refuse values that would break the proxy, naming the key."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ctxwarden.errors import ConfigError
from ctxwarden.proxy.settings import ProxySettings


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_body_bytes", 0),
        ("max_owed_body_bytes", 0),
        ("max_messages", 0),
        ("max_messages", -5),
        ("max_recall_calls", 0),
        ("max_recall_bytes", -1),
        ("pool_size", 0),
        ("max_recall_rounds", -1),
        ("connect_timeout", 0),
        ("read_timeout", -1.0),
        ("read_timeout", math.nan),
        ("total_timeout", 0),
    ],
)
def test_a_bad_limit_is_an_error_naming_its_key(key: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        ProxySettings(**{key: value})
    assert caught.value.key == key


def test_the_defaults_and_the_documented_off_values_are_accepted() -> None:
    ProxySettings()
    assert ProxySettings(max_recall_rounds=0).max_recall_rounds == 0  # recall off
    assert ProxySettings(total_timeout=None).total_timeout is None  # no whole-exchange cap


def test_keep_newest_keeps_the_newest_entries_within_the_limit() -> None:
    from ctxwarden.proxy.state import keep_newest

    entries: dict[str, int] = {}
    for i, key in enumerate("abcab"):
        keep_newest(entries, key, i, limit=2)
    assert entries == {"a": 3, "b": 4}  # c, the oldest of three, went; a and b renewed
    keep_newest(entries, "c", 5, limit=2)
    assert list(entries) == ["b", "c"]
