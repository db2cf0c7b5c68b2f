"""Mask's early exit: given a target, the pass proposes the fewest oldest placeholders
that save it, and never stops short of a target that all its placeholders meet."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement
from ctxwarden.passes.config import MaskConfig
from ctxwarden.passes.mask import MaskPass
from tests.passes.convo import call, context, lines_of, request, result


def _saved(ctx: PassContext, out: Mapping[Path, Replacement]) -> int:
    """What the condenser counts the proposals as saving (none of them over another)."""
    return sum(
        max(0, ctx.by_path[path].tokens - ctx.counter.count_text(rep.text))
        for path, rep in out.items()
    )


def _names(tag: str, n: int, filler: int = 0) -> str:
    """``n`` distinctive names, each followed by ``filler`` plain words."""
    return " ".join(f"ident_{tag}_{i}" + " the" * filler for i in range(n))


def _shared_then_long(k: int, shared: int = 100, unique: int = 100) -> str:
    """Plain lines, then short names every such output shows, then long names its own."""
    names = " ".join(f"s_{i}" for i in range(shared))
    own = " ".join(f"the_quite_long_unique_identifier_{k}_{i}" for i in range(unique))
    return "\n".join(["line of plain words here"] * 30 + [names, own])


def _context(*outputs: str) -> PassContext:
    turns: list[dict[str, Any]] = []
    for k, text in enumerate((*outputs, "the newest output, kept in full")):
        turns += [call(f"c{k}", f"step {k}"), result(f"c{k}", text)]
    return context(request(*turns))[0]


def _shortfalls(ctx: PassContext, config: MaskConfig) -> list[tuple[int, int]]:
    """(target, saved) for each target the pass's proposals without one meet and the
    proposals with it do not."""
    full = _saved(ctx, MaskPass(config)(ctx, {}))
    short = []
    targets = {1, full // 3, full // 2, full - 1, full} if full > 0 else set()
    for target in sorted(targets - {0}):
        ctx.tokens_to_save = target
        saved = _saved(ctx, MaskPass(config)(ctx, {}))
        if saved < target:
            short.append((target, saved))
    ctx.tokens_to_save = None
    return short


def test_a_target_is_met_when_placeholders_list_keywords_per_1k_tokens() -> None:
    """Large outputs list up to keywords_per_1k_tokens mentions, more than
    max_keywords: the early exit counted each placeholder with max_keywords mentions
    and stopped after too few of them (one of five saved 2,380 tokens of 2,669)."""
    ctx = _context(*(lines_of(f"s{k}", 200) for k in range(5)))
    config = MaskConfig(max_keywords=5, keywords_per_1k_tokens=200)
    assert len(MaskPass(config)(ctx, {})) == 5
    assert _shortfalls(ctx, config) == []


def test_a_target_is_met_past_an_output_whose_placeholder_is_too_large() -> None:
    """The oldest output is mostly names: its placeholder would be over max_ratio of
    it, so the pass skips it; the early exit counted it as saving and proposed
    nothing at all for a target of one token."""
    ctx = _context(_names("a", 40, filler=1), lines_of("b", 20))
    proposed = MaskPass(MaskConfig())(ctx, {})
    assert [ctx.by_path[p].message_index for p in proposed] == [5]  # only the second
    assert _shortfalls(ctx, MaskConfig()) == []
    ctx.tokens_to_save = 1
    assert len(MaskPass(MaskConfig())(ctx, {})) == 1  # and no more than that one


def test_a_target_is_met_when_shown_mentions_give_way_to_longer_ones() -> None:
    """Default settings: a newer placeholder lists the short names all six outputs
    share, so each older one lists its long names in their stead and is larger than
    the early exit counted it (a forced step of a 126k-token chat history fell 2,634
    tokens short and trim_args was run to make up for it)."""
    ctx = _context(*(_shared_then_long(k) for k in range(6)))
    assert _shortfalls(ctx, MaskConfig()) == []


_OUTPUT = st.one_of(
    st.builds(lambda tag, n: lines_of(tag, n), st.sampled_from("abcdefgh"), st.integers(2, 150)),
    st.builds(_names, st.sampled_from("pqrstuvw"), st.integers(3, 80), st.integers(0, 3)),
    st.builds(_shared_then_long, st.integers(0, 9), st.integers(0, 120), st.integers(0, 120)),
)


@settings(max_examples=40, deadline=None)
@given(
    outputs=st.lists(_OUTPUT, min_size=1, max_size=6),
    max_keywords=st.integers(0, 60),
    per_1k=st.sampled_from([0.0, 10.0, 50.0, 200.0]),
    max_ratio=st.sampled_from([0.3, 0.6, 0.8, 1.0]),
    shared=st.booleans(),
)
def test_the_early_exit_never_stops_short_of_a_target_it_can_meet(
    outputs: list[str], max_keywords: int, per_1k: float, max_ratio: float, shared: bool
) -> None:
    config = MaskConfig(
        max_keywords=max_keywords,
        keywords_per_1k_tokens=per_1k,
        max_ratio=max_ratio,
        shared_mentions=shared,
    )
    assert _shortfalls(_context(*outputs), config) == []
