"""Exact duplicates: a text identical to an earlier one becomes a reference to it."""

from __future__ import annotations

from collections.abc import Mapping

from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.config import DedupeConfig

__all__ = ["DedupePass"]


class DedupePass:
    """Lossless: the first copy stays (it is in the cached prefix), later copies point to it.

    A recent output (``ctx.recent``) is not pointed away: a lossy pass may condense the
    first copy in this step or a later one while the note is kept, and the agent's
    latest observations must stay shown in full. Once older, it is deduped like any
    copy (and the truncation guardrail still cuts an oversized recent one)."""

    name = "dedupe"

    def __init__(self, config: DedupeConfig) -> None:
        self.config = config

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        # only against the same kind: a user's or agent's text never becomes a pointer
        # to a tool output, whose placeholder may leave out what that text shows
        first: dict[str, dict[str, Segment]] = {}
        for segment in ctx.segments:
            if segment.kind == "tool_args":  # arguments stay valid JSON: not deduped
                continue
            seen = first.get(segment.kind)
            if seen is None:
                seen = first[segment.kind] = {}
            earlier = seen.get(segment.text)
            if earlier is None:
                seen[segment.text] = segment
                continue
            if (
                segment.path not in ctx.eligible
                or segment.path in ctx.recent
                or segment.path in decided
                or segment.tokens < self.config.min_tokens
            ):
                continue
            ref = ref_for(segment.text)
            where = f"message #{earlier.message_index}"
            source = "the output" if earlier.kind == "tool_output" else earlier.kind
            text = f"[ctxwarden: identical to {source} in {where}; original {ref}]"
            out[segment.path] = Replacement(
                text,
                self.name,
                originals=((ref, segment.text),),
                lossless=True,
                witness=earlier.path,
            )
        return out
