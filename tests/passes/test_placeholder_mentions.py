"""Which mentions a placeholder lists: those its body does not show as a whole token
(``10`` inside ``710 tokens`` is not shown)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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
def test_a_mention_missing_from_the_shown_text_is_always_listed(
    case: tuple[list[tuple[str, float]], str, set[str]], threshold: float
) -> None:
    """Listed: scoring enough, no error line, in order; and every such mention that is
    not even a substring of the shown text is among them (a whole-token lookup never
    drops what a substring search would list)."""
    scored, shown, errors = case
    digest = Digest(min_mention_score=threshold)
    listed = _not_shown(scored, shown, errors, digest)
    eligible = [w for w, s in scored if s >= threshold and w not in errors]
    assert listed == [w for w in eligible if w in listed]  # a subsequence, in order
    assert {w for w in eligible if w not in shown} <= set(listed)


def test_a_mention_is_shown_only_as_a_whole_token() -> None:
    shown = (
        "[ctxwarden: condensed output (120 lines, 710 tokens)]\nparse_header failed\nmodule_1 ok"
    )
    scored = [("10", 1.0), ("parse", 1.0), ("module_1", 1.0), ("parse_header", 1.0)]
    assert _not_shown(scored, shown, set(), Digest()) == ["10", "parse"]


def test_many_mentions_inside_shown_tokens_are_listed_at_once() -> None:
    shown = "\n".join(f"Error: failure in module_{i} at step{i}x" for i in range(2000))
    scored = [(f"step{i}", 1.0) for i in range(2000)] + [("module_7", 1.0)]
    listed = _not_shown(scored, shown, set(), Digest())
    assert listed == [w for w, _ in scored[:-1]]  # inside step{i}x: not the token itself
