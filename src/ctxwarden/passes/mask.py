"""Observation masking: old outputs outside the recency budget become placeholders.

Outputs inside the recency budget (``ctx.recent``) or that the recent turns are working
on (``ctx.relevant``) stay in full. A placeholder keeps what the output was, its error
lines, a short head and tail, the distinctive strings it mentioned and the reference
(see :mod:`ctxwarden.passes.placeholder`). Oldest first, with early exit at the target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ctxwarden.memo import remember
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.config import MaskConfig
from ctxwarden.passes.placeholder import Digest, mentions_line, placeholder_parts
from ctxwarden.signals import distinctive_set

__all__ = ["MaskPass"]


def _shown_words(
    ctx: PassContext, decided: Mapping[Path, Replacement], wanted: frozenset[str]
) -> Counter[str]:
    """How many replacements show each string of ``wanted`` (a multiset). Only
    replacements count: they never change once adopted, while an output still in full
    may later become a note that shows none of its strings (a duplicate's pointer, a
    superseded run's note), so a string it shows today may be gone tomorrow. Only
    ``wanted`` is counted: the pass asks about no other string, and counting every
    string of the history made this the costliest step of a long session's request."""
    shown: Counter[str] = Counter()
    for segment in ctx.segments:
        if segment.kind != "tool_output":
            continue
        rep = decided.get(segment.path)
        if rep is not None:
            shown.update(wanted.intersection(distinctive_set(rep.text)))
    return shown


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
        self._memo: dict[
            tuple[str, str, str, int, int], tuple[str, tuple[str, ...], tuple[str, ...]]
        ] = {}
        """Built placeholders by everything they are made of (the token count too: the
        same text counts differently under another model's tokenizer)."""

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        saved = 0
        candidates = [
            (segment, self._built(segment))
            for segment in ctx.open_segments(decided)
            if segment.path not in ctx.recent
            and segment.path not in ctx.relevant
            and segment.tokens >= self.config.min_tokens
        ]
        if not candidates:
            return out
        shown = None
        if self.config.shared_mentions:
            wanted = frozenset().union(*(built[2] for _, built in candidates))
            shown = _shown_words(ctx, decided, wanted)
        for segment, (body, errors, keywords) in candidates:
            if ctx.tokens_to_save is not None and saved >= ctx.tokens_to_save:
                break
            ref = ref_for(segment.text)
            cap = max(
                self.digest.max_keywords,
                int(segment.tokens * self.config.keywords_per_1k_tokens / 1000),
            )
            mentions = [
                w for w in keywords if w not in ctx.visible and not (shown and shown[w] > 0)
            ][:cap]
            text = body + "\n" + mentions_line(mentions) if mentions else body
            tokens = ctx.counter.count_text(text)
            if tokens > self.config.max_ratio * segment.tokens:
                continue
            if shown is not None:  # the placeholder shows its body and its mentions
                shown.update(distinctive_set(body) | frozenset(mentions))
            saved += segment.tokens - tokens
            out[segment.path] = Replacement(
                text, self.name, originals=((ref, segment.text),), kept_lines=errors
            )
        return out

    def _built(self, segment: Segment) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """The placeholder body, kept error lines and ranked mentions of ``segment``."""
        key = (
            segment.text,
            segment.tool_name,
            segment.command,
            int(segment.is_error),
            segment.tokens,
        )
        built = self._memo.get(key)
        if built is None:
            ref = ref_for(segment.text)
            built = remember(self._memo, key, placeholder_parts(segment, ref, self.digest), 20_000)
        return built
