"""Which mentions a placeholder lists: those its body does not show, found by token
lookup first and a bounded search after; past the bound a mention is listed, never
dropped."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import signals
from ctxwarden.passes.placeholder import Digest, _not_shown

_WORDS = st.sampled_from(
    ["src/a.py", "a.py", "module_1", "module_12", "12", "2", "x-y", "run()", "Foo.bar",
     "foo", "bar", "app/views.py:40", "40", "E1", "v1.2.3", "1.2"]
)  # fmt: skip
_SEPARATORS = st.sampled_from([" ", "\n", ":", "(", ", ", "/", ""])


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[tuple[str, float]], str, set[str]]:
    pieces = draw(st.lists(st.tuples(_WORDS, _SEPARATORS), max_size=20))
    shown = "".join(w + sep for w, sep in pieces)
    scored = [(w, draw(st.floats(0, 1))) for w in draw(st.lists(_WORDS, max_size=12, unique=True))]
    errors = set(draw(st.lists(_WORDS, max_size=2)))
    return scored, shown, errors


@settings(max_examples=400)
@given(cases(), st.floats(0, 1))
def test_mentions_not_shown_are_those_a_substring_search_finds_missing(
    case: tuple[list[tuple[str, float]], str, set[str]], threshold: float
) -> None:
    scored, shown, errors = case
    digest = Digest(min_mention_score=threshold)
    expected = [w for w, s in scored if s >= threshold and w not in shown and w not in errors]
    assert _not_shown(scored, shown, errors, digest) == expected


def test_past_the_search_bound_mentions_are_listed_not_dropped(monkeypatch: Any) -> None:
    shown = "\n".join(f"Error: failure in module_{i} at step{i}x" for i in range(200))
    scored = [(f"step{i}", 1.0) for i in range(200)] + [("absent_name", 1.0)]
    digest = Digest()
    exact = _not_shown(scored, shown, set(), digest)
    assert exact == ["absent_name"]  # each step{i} is inside a shown token: a search
    monkeypatch.setattr(signals, "SEARCH_BUDGET", 10 * len(shown))
    bounded = _not_shown(scored, shown, set(), digest)
    assert bounded[-1] == "absent_name" and set(exact) < set(bounded)
    assert bounded == [w for w, _ in scored[10:]]  # searched ten, listed the rest
