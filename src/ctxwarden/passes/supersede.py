"""Supersession: an output made stale by a newer run of the same action.

Two outputs are runs of the same action when their tool and command are the same, or
(``file_reads``) both are full reads of the same file (``cat F``, ``nl -ba F``,
``view F``). All but the newest ``keep_newest`` runs become a note naming the newest
run; error lines that the newest run does not show are kept verbatim.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

from ctxwarden.memo import TEXT_MEMO_BYTES, TEXT_MEMO_LIMIT, BoundedMemo, footprint
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.config import SupersedeConfig
from ctxwarden.signals import LinesShown, error_lines, shown_error_line

__all__ = ["SupersedePass", "action_key"]

_FULL_READ = re.compile(r"^(?:cat|nl(?:\s+-\w+)*|view|open|less|more)\s+([\w./-]+)\s*$")


def action_key(segment: Segment, file_reads: bool) -> str:
    """What counts as "the same action" for supersession."""
    return _action_key(segment.tool_name, segment.command, file_reads)


def _action_key(tool_name: str, command: str, file_reads: bool) -> str:
    """:func:`action_key` of a run of ``tool_name`` with ``command``."""
    command = " ".join(command.split())
    if file_reads:
        m = _FULL_READ.match(command)
        if m:
            path = m.group(1)
            while path.startswith("./"):  # ./a is a, but ../a, /a and .env are not
                path = path[2:]
            return "read:" + path
    return f"{tool_name}\x00{command}"


class SupersedePass:
    """Replaces older runs of a repeated action with a note naming the newest run."""

    name = "supersede"

    def __init__(self, config: SupersedeConfig) -> None:
        self.config = config
        self._keys: BoundedMemo[tuple[str, str], str] = BoundedMemo(
            TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES
        )
        """Action keys by tool name and command: every request asks again for every
        output of the history."""

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        # a run is one call's output: the blocks of one result (stdout and stderr
        # parts, an Anthropic tool_result's text blocks) never supersede each other
        groups: dict[str, dict[tuple[int, str], list[Segment]]] = defaultdict(dict)
        for segment in ctx.segments:
            if segment.kind == "tool_output" and segment.command:
                key = self._action(segment)
                run = (segment.message_index, segment.call_id)
                groups[key].setdefault(run, []).append(segment)
        out: dict[Path, Replacement] = {}
        keep = self.config.keep_newest
        for by_run in groups.values():
            runs = list(by_run.values())
            if len(runs) <= keep:
                continue
            newest = runs[-1][0]
            newest_texts = {s.text for s in runs[-1]}
            for segment in (s for run in runs[:-keep] for s in run):
                if (
                    segment.path not in ctx.eligible
                    or segment.path in decided
                    or segment.tokens < self.config.min_tokens
                    or segment.text in newest_texts  # the same bytes: dedupe's case
                ):
                    continue
                ref = ref_for(segment.text)
                lines = segment.text.count("\n") + 1
                # error lines the witness does not show (the witness is the newest
                # run's first block: the note's claim is checked against it)
                shown = LinesShown(newest.text)
                kept = tuple(e for e in error_lines(segment.text) if not shown.shows(e))
                head = (
                    f"[ctxwarden: superseded by the same action in message "
                    f"#{newest.message_index}; original {ref} ({lines:,} lines)]"
                )
                text = "\n".join((head, *map(shown_error_line, kept)))
                out[segment.path] = Replacement(
                    text,
                    self.name,
                    originals=((ref, segment.text),),
                    kept_lines=kept,
                    witness=newest.path,
                )
        return out

    def _action(self, segment: Segment) -> str:
        """:func:`action_key` of ``segment`` under this pass's config, memoized."""
        by = (segment.tool_name, segment.command)
        key = self._keys.get(by, None)
        if key is None:
            key = _action_key(*by, self.config.file_reads)
            key = self._keys.put(by, key, footprint(by) + footprint(key))
        return key
