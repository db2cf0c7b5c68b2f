"""Truncation guardrail: any output over a size limit keeps head, tail and error lines.

Unlike masking this ignores recency: an eligible output over ``max_bytes`` UTF-8 bytes
or ``max_lines`` lines is cut even when it is recent. (The newest messages are never
eligible: they reach the model exactly as the agent sent them.)
"""

from __future__ import annotations

from collections.abc import Mapping

from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, ref_for
from ctxwarden.passes.config import TruncateConfig
from ctxwarden.passes.placeholder import Digest, build_placeholder

__all__ = ["TruncatePass"]


class TruncatePass:
    """Cuts oversized outputs to a bounded digest with a reference to the whole."""

    name = "truncate"

    def __init__(self, config: TruncateConfig) -> None:
        self.config = config
        self.digest = Digest(
            head_lines=config.head_lines, tail_lines=config.tail_lines, max_keywords=300
        )

    def _oversized(self, text: str) -> bool:
        if text.count("\n") + 1 > self.config.max_lines:
            return True
        return len(text) > self.config.max_bytes // 4 and (
            len(text.encode("utf-8")) > self.config.max_bytes
        )

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        for segment in ctx.open_segments(decided, past_restated=True):
            held = decided.get(segment.path)  # a normalization: judged as it is sent
            if not self._oversized(segment.text if held is None else held.text):
                continue
            ref = ref_for(segment.text)
            built = build_placeholder(
                segment, ref, self.digest, verb="truncated output", counter=ctx.counter
            )
            if built is None:  # it would save nothing (the condenser drops those)
                continue
            text, errors = built
            out[segment.path] = Replacement(
                text, self.name, originals=((ref, segment.text),), kept_lines=errors
            )
        return out
