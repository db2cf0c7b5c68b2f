"""Mechanical summary: a deterministic extractive condensation of old message text.

Keeps the first ``keep_sentences`` sentences (more while the lead is shorter than
:data:`MIN_LEAD_WORDS` words, so "Ah!" never stands for a paragraph), every line that
carries an error signal, up to :data:`MAX_PATH_LINES` short lines that name a path, and
a reference to the whole. (An LLM
summarizer can implement the same pass seam later.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ctxwarden.memo import text_memo
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, ref_for
from ctxwarden.passes.config import SummarizeConfig
from ctxwarden.signals import TextSearch, error_lines, is_error_line, paths_in, shown_error_line

__all__ = ["SummarizePass", "extract_summary"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
"""A sentence ends at ``.``, ``!`` or ``?`` before a space, and at a line's end (an
agent's lists, headings and log lines are lines, not sentences). A colon inside a
line ends none: ``line 1: checked`` cut there left ``line 1:`` as the lead's end."""
_LIST_MARKER_END = re.compile(r"(?:^|\n)[ \t]*(?:\d{1,3}|[a-zA-Z])\.$")
"""A piece that ends on a numbered list's marker (``... it:\n2.``): the marker opens the
next sentence, it does not end one."""
MIN_LEAD_WORDS = 8
MAX_PATH_LINES = 3
"""Short lines naming a path are kept (a list of touched files), at most this many."""
MAX_PATH_LINE = 200


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.split("\n")]


def _sentences(text: str, limit: int) -> list[str]:
    """The first sentences of ``text`` (at least ``limit`` of them when it has that
    many, the last one its unsplit rest), a numbered list's marker kept with the item
    it opens."""
    # twice: a list's marker is a piece of its own, merged into the item it opens
    pieces = _SENTENCE_END.split(text.strip(), maxsplit=2 * limit)
    sentences: list[str] = []
    carry = ""
    for piece in pieces:
        piece = carry + piece
        if _LIST_MARKER_END.search(piece):
            head, _, marker = piece.rpartition("\n")
            if head.strip():
                sentences.append(head)
            carry = marker.strip() + " "
            continue
        carry = ""
        sentences.append(piece)
    if carry:
        sentences.append(carry.strip())
    return sentences


@text_memo()
def extract_summary(text: str, keep_sentences: int) -> tuple[str, tuple[str, ...]]:
    """The extractive summary of ``text`` and the error lines it keeps."""
    sentences = _sentences(text, keep_sentences + 8)
    taken: list[str] = []
    words = 0
    for sentence in sentences:
        if len(taken) >= keep_sentences and words >= MIN_LEAD_WORDS:
            break
        taken.append(sentence)
        words += len(sentence.split())
    lead = " ".join(taken).strip()
    # capped: past the cap a line counts as not in the lead and may be kept (a text
    # opening with a long list searched the list once per line)
    in_lead = TextSearch(lead, _stripped_lines, capped=True)
    kept: list[str] = []
    path_lines = 0
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped:
            continue
        if is_error_line(line):  # always verbatim, even the lead's own line
            kept.append(shown_error_line(line))
        elif stripped in in_lead or lead in stripped:
            continue  # the lead's own line (a one-paragraph text is all one line)
        elif path_lines < MAX_PATH_LINES and len(stripped) <= MAX_PATH_LINE and paths_in(line):
            kept.append(line)
            path_lines += 1
    errors = tuple(error_lines(text))
    # a JSON text's error lines are those its strings hold (json_view): kept too
    listed = set(kept)
    kept += [shown for e in errors if (shown := shown_error_line(e)) not in listed]
    return "\n".join([lead, *kept]), errors


class SummarizePass:
    """Condenses old assistant prose (kind ``assistant_text``) extractively."""

    name = "summarize"

    def __init__(self, config: SummarizeConfig) -> None:
        self.config = config

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        out: dict[Path, Replacement] = {}
        for segment in ctx.open_segments(decided, kind="assistant_text"):
            if segment.tokens < self.config.min_tokens or segment.path in ctx.recent:
                continue
            summary, errors = extract_summary(segment.text, self.config.keep_sentences)
            ref = ref_for(segment.text)
            text = f"{summary}\n[ctxwarden: summary of {ref}]"
            if ctx.counter.count_text(text) > 0.7 * segment.tokens:
                continue
            out[segment.path] = Replacement(
                text, self.name, originals=((ref, segment.text),), kept_lines=errors
            )
        return out
