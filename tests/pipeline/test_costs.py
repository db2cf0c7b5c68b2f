"""The planner's cost helpers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.pipeline.costs import common_prefix

# few distinct values, so that long shared prefixes and late differences both occur
_HASHES = st.lists(st.sampled_from(["a", "b", "c"]), max_size=300)


@given(_HASHES, _HASHES, st.integers(min_value=0, max_value=300))
def test_common_prefix_is_the_longest_shared_start(a: list[str], b: list[str], k: int) -> None:
    b = a[:k] + b  # a shared start of up to k elements, then anything
    n = common_prefix(a, b)
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]
    assert common_prefix(b, a) == n
