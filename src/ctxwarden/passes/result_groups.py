"""Tool results held in several text blocks, masked as one output.

An Anthropic ``tool_result`` (likewise a Chat tool message or a Responses output) may
hold its output in many text blocks: an MCP server's search hits, one per block. Each
block is a segment of its own, so masked block by block a small block stays under the
threshold and a large one gets its own placeholder, with its own header, head and tail:
forty blocks shrank by about a third where the same text in one block shrank by four
fifths. When every text block of a result is open to the mask pass, it masks them as
one output: the first block carries the placeholder of the whole output (the blocks
joined by newlines, stored as one original), each later block a short stub that says
which part it is and keeps its own error lines verbatim (a block may not be emptied:
the APIs refuse an empty text block). The condenser takes the replacements of one
result together or not at all (:attr:`~ctxwarden.passes.base.Replacement.joint`).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxwarden.model.parts import Path
from ctxwarden.passes.base import Segment
from ctxwarden.signals import error_lines, shown_error_line

_STUB = "[ctxwarden: part {number}/{count}, see above]"
_STUB_RE = re.compile(re.escape(_STUB).replace(r"\{number\}", r"\d+").replace(r"\{count\}", r"\d+"))
"""A stub's first line (:func:`part_stub`), whatever its numbers."""

__all__ = [
    "ResultGroup",
    "is_part_stub",
    "part_stub",
    "result_groups",
    "shortest_stub",
    "whole_output",
]


@dataclass(frozen=True, slots=True)
class ResultGroup:
    """The text blocks of one tool result, in order, and the output they make: the
    first block's segment with the blocks' texts joined and their tokens summed."""

    merged: Segment
    blocks: tuple[Segment, ...]


def result_groups(candidates: list[Segment], segments: list[Segment]) -> dict[Path, ResultGroup]:
    """The results of two or more text blocks among ``segments`` whose every block is
    in ``candidates``, by their first block's path (a result with a block that is not a
    candidate, recent or already replaced, is masked block by block). Blocks of
    whitespace alone (a shell call's empty stdout) are no part of an output: they stay
    as they are."""
    counts = Counter((s.message_index, s.call_id) for s in candidates if s.call_id and _has_text(s))
    several = {key for key, n in counts.items() if n > 1}
    if not several:  # the usual request: one text per result
        return {}
    blocks: dict[tuple[int, str], list[Segment]] = defaultdict(list)
    for s in segments:
        key = (s.message_index, s.call_id)
        if s.kind == "tool_output" and key in several and _has_text(s):
            blocks[key].append(s)
    open_paths = {s.path for s in candidates}
    out: dict[Path, ResultGroup] = {}
    for of_result in blocks.values():
        if len(of_result) > 1 and all(b.path in open_paths for b in of_result):
            merged = replace(
                of_result[0],
                text=_joined(of_result),
                tokens=sum(b.tokens for b in of_result),
            )
            out[of_result[0].path] = ResultGroup(merged, tuple(of_result))
    return out


def _has_text(segment: Segment) -> bool:
    return not segment.text.isspace() and bool(segment.text)


def _joined(blocks: Sequence[Segment]) -> str:
    """The output the text blocks of one result make, as its placeholder stores it."""
    return "\n".join(b.text for b in blocks)


def whole_output(block: Segment, segments: Sequence[Segment]) -> str | None:
    """The whole output ``block`` is one text block of, as :func:`result_groups` joins
    it (the text its placeholder's reference stands for), or ``None`` when its result
    holds no other text block. Linear in ``segments``: for rare paths (writing a lost
    original again), not for every request."""
    if block.kind != "tool_output" or not block.call_id or not _has_text(block):
        return None
    blocks = [
        s
        for s in segments
        if s.kind == "tool_output"
        and s.message_index == block.message_index
        and s.call_id == block.call_id
        and _has_text(s)
    ]
    return _joined(blocks) if len(blocks) > 1 else None


def is_part_stub(text: str) -> bool:
    """Whether ``text`` is a block's stub (:func:`part_stub`): it names no reference,
    so it stands only beside its result's placeholder."""
    return _STUB_RE.match(text) is not None


def shortest_stub() -> str:
    """A text no longer, in tokens, than any block's stub (the first line of the
    smallest numbers, two tokens short): a block no longer than it needs no stub
    looked for (a result of thousands of short blocks made thousands every request)."""
    return _STUB.format(number=2, count=2)[:-4]


def part_stub(number: int, count: int, block: Segment) -> tuple[str, tuple[str, ...]]:
    """The stub of the ``number``-th of ``count`` blocks of an output, and the block's
    error lines it keeps. It names no reference: the first block's placeholder, a few
    lines above in the same result, names the one that holds every block (a reference
    costs a dozen tokens, as much as the rest of the stub)."""
    errors = tuple(error_lines(block.text))
    stub = _STUB.format(number=number, count=count)
    return "\n".join([stub, *map(shown_error_line, errors)]), errors
