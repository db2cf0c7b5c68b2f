"""Observation masking: old outputs outside the recency budget become placeholders.

Outputs inside the recency budget (``ctx.recent``) or that the recent turns are working
on (``ctx.relevant``) stay in full. A placeholder keeps what the output was, its error
lines, a short head and tail, the distinctive strings it mentioned and the reference
(see :mod:`ctxwarden.passes.placeholder`). Oldest first, with early exit at the target.
A result held in several text blocks is masked as one output
(:mod:`ctxwarden.passes.result_groups`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ctxwarden.memo import TEXT_MEMO_BYTES, TEXT_MEMO_LIMIT, BoundedMemo, footprint
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.config import MaskConfig
from ctxwarden.passes.placeholder import Digest, mentions_line, placeholder_parts
from ctxwarden.passes.result_groups import ResultGroup, part_stub, result_groups, shortest_stub
from ctxwarden.signals import distinctive_set

__all__ = ["MaskPass"]

_ROUNDS = 4
"""Rounds of the early exit that take more candidates when those taken fell short of
the target (each builds the placeholders again) before it takes them all."""


def _shown_words(
    ctx: PassContext, decided: Mapping[Path, Replacement], wanted: frozenset[str]
) -> tuple[Counter[str], list[tuple[int, frozenset[str]]]]:
    """What replacements show of ``wanted``: a multiset over the settled ones (they
    stay as sent), and each other pass's proposal with its message index, newest first
    (one counts for a placeholder only when it is newer: the planner adopts proposals
    from some message onward). Outputs still in full do not count: one may later
    become a pointer or a note that shows none of its strings. Nor does a
    normalization (a :attr:`~PassContext.restating` transform), settled or not: a lossy
    pass may still replace it, in this step or a later one, with a placeholder of its
    own that lists other strings. Only ``wanted`` is counted: counting every string of
    the history made this the costliest step of a long session's request."""
    shown: Counter[str] = Counter()
    proposed: list[tuple[int, frozenset[str]]] = []
    by_path = ctx.by_path
    for path, rep in decided.items():  # the order of equal message indexes is moot
        segment = by_path.get(path)
        if segment is None or segment.kind != "tool_output" or rep.transform in ctx.restating:
            continue
        words = wanted.intersection(distinctive_set(rep.text))
        if segment.path in ctx.settled:
            shown.update(words)
        elif words:
            proposed.append((segment.message_index, words))
    proposed.sort(key=lambda item: -item[0])
    return shown, proposed


def _replaced_tokens(
    segment: Segment, ctx: PassContext, decided: Mapping[Path, Replacement]
) -> int:
    """The tokens of what a placeholder of ``segment`` replaces: a normalization's
    text, else the output."""
    held = decided.get(segment.path)
    return segment.tokens if held is None else ctx.counter.count_text(held.text)


class MaskPass:
    """Lossy, recallable: replaces old bulky outputs with placeholders."""

    name = "mask"

    def __init__(self, config: MaskConfig, *, name: str = "mask") -> None:
        self.config = config
        self.name = name
        self.digest = Digest(
            head_lines=config.head_lines,
            tail_lines=config.tail_lines,
            max_line_chars=config.line_chars,
            head_tail_min_tokens=config.head_tail_min_tokens,
            max_keywords=config.max_keywords,
            min_mention_score=config.min_mention_score,
            name_action=False,  # the call that produced the output is right before it
        )
        self._memo: BoundedMemo[
            tuple[str, str, str, int, int], tuple[str, tuple[str, ...], tuple[str, ...]]
        ] = BoundedMemo(TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES)
        """Built placeholders by everything they are made of (the token count too: the
        same text counts differently under another model's tokenizer)."""

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        open_ = [
            segment
            for segment in ctx.open_segments(decided, past_restated=True)
            if segment.path not in ctx.recent and segment.path not in ctx.relevant
        ]
        groups = result_groups(open_, ctx.segments)
        if groups:  # a result of several blocks is one candidate: the output they make
            grouped = {b.path for g in groups.values() for b in g.blocks[1:]}
            open_ = [
                groups[s.path].merged if s.path in groups else s
                for s in open_
                if s.path not in grouped
            ]
        candidates = [
            (segment, self._built(segment))
            for segment in open_
            if segment.tokens >= self.config.min_tokens
        ]
        if not candidates:
            return {}
        target = ctx.tokens_to_save
        if target is None:
            return self._placeholders(candidates, ctx, decided, groups)[0]
        # early exit, oldest first: the fewest oldest candidates whose placeholders
        # save the target. What one lists depends on the newer ones chosen with it (it
        # leaves out what they list, and may list longer strings in their stead), so
        # the estimate can be short of what they really save: then more are taken, a
        # few rounds at most, and then all of them (what the pass proposes without a
        # target, the most it can save)
        taken = len(self._enough(candidates, ctx, decided, target, groups))
        for _ in range(_ROUNDS):
            out, saved = self._placeholders(candidates[:taken], ctx, decided, groups)
            if saved >= target or taken >= len(candidates):
                return out
            more = self._enough(candidates[taken:], ctx, decided, target - saved, groups)
            taken += len(more)
        return self._placeholders(candidates, ctx, decided, groups)[0]

    def _placeholders(
        self,
        candidates: list[tuple[Segment, tuple[str, tuple[str, ...], tuple[str, ...]]]],
        ctx: PassContext,
        decided: Mapping[Path, Replacement],
        groups: Mapping[Path, ResultGroup],
    ) -> tuple[dict[Path, Replacement], int]:
        """The placeholders of ``candidates``, oldest first, and the tokens they save
        (each against what it would replace: a normalization's text, else the output).
        A result of several blocks (``groups``) gets the placeholder of its whole output
        on its first block and a stub on each other (:mod:`.result_groups`)."""
        out: dict[Path, Replacement] = {}
        saved = 0
        shown: Counter[str] | None = None
        proposed: list[tuple[int, frozenset[str]]] = []
        if self.config.shared_mentions:
            wanted = frozenset().union(*(built[2] for _, built in candidates))
            shown, proposed = _shown_words(ctx, decided, wanted)
        # mentions newest first: a placeholder leaves out what a newer one lists, and
        # the planner never adopts an older proposal without the newer ones
        # proposed[:taken] (newest first) are counted in shown: an index, as popping the
        # head of the list once per proposal was quadratic in a long session
        taken = 0
        for segment, (body, errors, keywords) in reversed(candidates):
            while (
                shown is not None
                and taken < len(proposed)
                and proposed[taken][0] > segment.message_index
            ):
                shown.update(proposed[taken][1])
                taken += 1
            mentions = [
                w for w in keywords if w not in ctx.visible and not (shown and shown[w] > 0)
            ][: self._cap(segment)]
            text = body + "\n" + mentions_line(mentions) if mentions else body
            ref = ref_for(segment.text)
            original = ((ref, segment.text),)
            group = groups.get(segment.path)
            stubs = self._stubs(group, original, ctx) if group else {}
            tokens, replaced, fits = self._weigh(segment, text, group, stubs, ctx, decided)
            if not fits:
                continue
            if shown is not None:  # the placeholder shows its body and its mentions
                shown.update(distinctive_set(body) | frozenset(mentions))
            out.update(reversed(stubs.items()))  # after the placeholder, once reversed
            joint = segment.path if group else None
            out[segment.path] = Replacement(
                text, self.name, originals=original, kept_lines=errors, joint=joint
            )
            saved += max(0, replaced - tokens)
        return dict(reversed(out.items())), saved  # oldest first, as the segments come

    def _stubs(
        self, group: ResultGroup, original: tuple[tuple[str, str], ...], ctx: PassContext
    ) -> dict[Path, Replacement]:
        """The stubs of a result's blocks after its first, in order: each names the
        whole output's original (recalled as one, and stored once per request) and
        holds while the first block, which carries the placeholder, reads the same. A
        block no longer than its stub stays as it is."""
        count = len(group.blocks)
        first = group.blocks[0].path  # its placeholder says what the stubs stand for
        floor = ctx.counter.count_text(shortest_stub())
        out = {}
        for number, block in enumerate(group.blocks[1:], start=2):
            if block.tokens <= floor:  # surely no longer than its stub
                continue
            stub, errors = part_stub(number, count, block)
            if block.tokens <= ctx.counter.count_text(stub):  # no longer than its stub
                continue
            out[block.path] = Replacement(
                stub, self.name, originals=original, kept_lines=errors, witness=first, joint=first
            )
        return out

    def _enough(
        self,
        candidates: list[tuple[Segment, tuple[str, tuple[str, ...], tuple[str, ...]]]],
        ctx: PassContext,
        decided: Mapping[Path, Replacement],
        target: int,
        groups: Mapping[Path, ResultGroup],
    ) -> list[tuple[Segment, tuple[str, tuple[str, ...], tuple[str, ...]]]]:
        """The oldest candidates whose placeholders save ``target`` tokens by an
        estimate: each placeholder counted with its first mentions, as many as
        :meth:`_cap` allows (``keywords_per_1k_tokens`` included), against what it
        would replace, and as saving nothing when it is then over ``max_ratio`` of the
        output (the pass may skip it). A placeholder that leaves out mentions shown
        elsewhere lists later ones in their stead, which can be longer: the caller
        measures what the chosen placeholders save."""
        chosen = []
        saved = 0
        for segment, built in candidates:
            if saved >= target:
                break
            chosen.append((segment, built))
            body, _, keywords = built
            mentions = keywords[: self._cap(segment)]
            text = body + "\n" + mentions_line(mentions) if mentions else body
            group = groups.get(segment.path)
            stubs = self._stubs(group, (), ctx) if group else {}
            tokens, replaced, fits = self._weigh(segment, text, group, stubs, ctx, decided)
            if fits:
                saved += max(0, replaced - tokens)
        return chosen

    def _weigh(
        self,
        segment: Segment,
        text: str,
        group: ResultGroup | None,
        stubs: Mapping[Path, Replacement],
        ctx: PassContext,
        decided: Mapping[Path, Replacement],
    ) -> tuple[int, int, bool]:
        """A placeholder ``text`` of ``segment`` (with ``stubs``, for a result of
        several blocks): its tokens, those of what it replaces (a normalization's text,
        else the output, of each block it covers) and whether it is within ``max_ratio``
        of the output it stands for."""
        if group is None:
            covered = [segment]
        else:
            covered = [group.blocks[0], *(b for b in group.blocks[1:] if b.path in stubs)]
        tokens = ctx.counter.count_text(text)
        tokens += sum(ctx.counter.count_text(r.text) for r in stubs.values())
        replaced = sum(_replaced_tokens(b, ctx, decided) for b in covered)
        output = sum(b.tokens for b in covered)
        return tokens, replaced, tokens <= self.config.max_ratio * output

    def mentions_of(self, segment: Segment) -> tuple[str, ...]:
        """The strings a placeholder of ``segment`` lists at most (before any is left
        out because something else shows it)."""
        return self._built(segment)[2][: self._cap(segment)]

    def _cap(self, segment: Segment) -> int:
        """How many mentions a placeholder of ``segment`` may list."""
        return max(
            self.digest.max_keywords,
            int(segment.tokens * self.config.keywords_per_1k_tokens / 1000),
        )

    def _built(self, segment: Segment) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """The placeholder body, kept error lines and ranked mentions of ``segment``."""
        key = (
            segment.text,
            segment.tool_name,
            segment.command,
            int(segment.is_error),
            segment.tokens,
        )
        built = self._memo.get(key, None)
        if built is None:
            ref = ref_for(segment.text)
            parts = placeholder_parts(segment, ref, self.digest)
            built = self._memo.put(key, parts, footprint(key) + footprint(parts))
        return built
