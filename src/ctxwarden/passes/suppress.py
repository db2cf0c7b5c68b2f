"""Suppress: old outputs of tools the config names become a one-line stub.

For tools whose output is noise once read (a screenshot log, a heartbeat, a linter
that is re-run anyway): every eligible output of a tool with ``suppress = true`` in
its ``[pipeline.tools.NAME]`` policy, outside the recency window, is replaced by a
stub with its exit status, size and reference, in the style of the mask pass's
placeholder header, plus every error line verbatim (a JSON-wrapped output's size
counts the lines of the text its strings hold, ``400 lines in JSON``, as the
placeholder does: :func:`~ctxwarden.json_wrapped.lines_label`). Lossy,
recallable; size thresholds do not apply (the user asked for it by name).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ctxwarden.json_wrapped import lines_label
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, ref_for
from ctxwarden.passes.config import SuppressConfig
from ctxwarden.signals import error_lines, exit_status, shown_error_line

__all__ = ["SuppressPass"]


class SuppressPass:
    """Replaces old outputs of the named tools with a stub (error lines kept)."""

    name = "suppress"

    def __init__(self, config: SuppressConfig, tools: Collection[str]) -> None:
        self.config = config
        self.tools = frozenset(tools)

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        if not self.tools:
            return out
        for segment in ctx.open_segments(decided, past_restated=True):
            if segment.tool_name not in self.tools or segment.path in ctx.recent:
                continue
            ref = ref_for(segment.text)
            errors = tuple(error_lines(segment.text))
            status = exit_status(segment.text)
            facts = [] if status is None else [f"exit {status}"]
            facts += [lines_label(segment.text), f"{segment.tokens:,} tokens"]
            stub = f"[ctxwarden: suppressed output; original {ref} ({', '.join(facts)})]"
            text = "\n".join([stub, *map(shown_error_line, errors)])
            if ctx.counter.count_text(text) >= segment.tokens:
                continue
            out[segment.path] = Replacement(
                text, self.name, originals=((ref, segment.text),), kept_lines=errors
            )
        return out
