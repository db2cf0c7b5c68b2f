"""Comparing a request with what was made of it: where its strings differ."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["changed_texts", "value_at"]


def changed_texts(old: Any, new: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """``(path, old, new)`` for every string that differs; any other difference (a key,
    its place, a type, a length, a number) fails the test."""
    assert type(new) is type(old), path
    if isinstance(old, str):
        if old != new:
            yield path, old, new
    elif isinstance(old, dict):
        assert list(new) == list(old), path
        for k, v in old.items():
            yield from changed_texts(v, new[k], (*path, k))
    elif isinstance(old, list):
        assert len(new) == len(old), path
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from changed_texts(a, b, (*path, i))
    else:
        assert new == old, path


def value_at(value: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` (keys and indexes) inside ``value``."""
    for key in path:
        value = value[key]
    return value
