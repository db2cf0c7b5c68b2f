"""Mechanical summary: a deterministic extractive condensation of old message text.

Keeps the first ``keep_sentences`` sentences (more while the lead is shorter than
:data:`MIN_LEAD_WORDS` words, so "Ah!" never stands for a paragraph), every line that
carries an error signal, up to :data:`MAX_PATH_LINES` short lines that name a path, and
a reference to the whole. (An LLM
summarizer can implement the same pass seam later.)

The tool invocations of text-only tool protocols are kept as skeletons, in their place
after the lead, so the model still sees what it ran and the format it must keep
producing (:class:`_Skeletons`): an XML-style tool block (a line that is only an
opening tag ``<name>``, its closing ``</name>`` alone on a later line, every line
between inside a child tag: Cline's and Roo Code's ``<execute_command>``), a block of
SEARCH/REPLACE edits (Aider's, with the file path line above it; Roo's
``:start_line:`` and ``-------`` lines kept; Cline's current ``------- SEARCH`` /
``+++++++ REPLACE`` markers as well as the ``<<<<<<<`` / ``>>>>>>>`` ones), and a fenced
shell block
(``bash``/``sh``/``shell``/``console``..., alone or as a word of a tagged info
string: mini-swe-agent's one command). Tags,
markers, fences and short values (one line of at most :data:`MAX_VALUE_LINE`
characters; a shell block of at most :data:`MAX_SHELL_LINES` lines) stay whole; a longer
value (a file's content, a diff's side) keeps its first line, then a note
``[ctxwarden: N more lines in cw:…]`` naming the reference to the whole text, then the
error lines it hides; a longer value on its tags' line (``<command>…</command>``) keeps
its first :data:`MAX_VALUE_LINE` characters after the opening tag, then the note, then
the closing tag. A value, and a block, whose skeleton would not be shorter than it is
kept whole. Prose around the blocks is summarized as above. Other fenced code is prose.
"""

from __future__ import annotations

import bisect
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

MAX_VALUE_LINE = 200
"""Characters of an invocation's value kept whole on one line; a longer line keeps
this many and the note names the rest."""
MAX_SHELL_LINES = 8
"""Lines of a fenced shell block kept whole (with at most :data:`MAX_VALUE_LINE`
characters a line on average); a longer one keeps its first line and a note."""
_MAX_DEPTH = 3
"""Tag levels a tool block's skeleton follows (``<function_calls>`` / ``<invoke>`` /
``<parameter>``); a deeper value is elided as a whole."""
_MAX_CHILDREN = 16
"""Child tags of one tool block, at most: a call has a few arguments; a longer run of
tagged lines is data (an HTML list written out), summarized as prose."""
_SHELLS = frozenset({"bash", "sh", "shell", "console", "zsh"})
"""A fence's info string names a shell when one of its words (split at ``_`` and
``-``) is one of these: ``bash``, ``shell-session``, a tagged one (mini-swe-agent 2's
``mswea_bash_command``)."""

_MAYBE_BLOCK = re.compile(r"^[ \t]*(?:<[A-Za-z_]|```|~~~|<{5}|-{3,} SEARCH)", re.MULTILINE)
"""A text without such a line holds no invocation block: it is all prose."""
_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.:-]*)(?:[= ][^<>]*)?>")
"""An opening tag: ``<path>``, ``<function=execute_bash>``, ``<invoke name="x">``."""
_CLOSE_END = re.compile(r"</([A-Za-z_][\w.:-]*)>\s*$")
_FENCE = re.compile(r"(`{3,}|~{3,})\s*([^`\s]*)")
_BARE_FENCE = re.compile(r"\s*(`{3,}|~{3,})\s*")
_SEARCH = re.compile(r"\s*(?:<{5,9}|-{3,}) SEARCH>?\s*")
"""An edit's opening marker: Aider's and Roo's ``<<<<<<< SEARCH``, Cline's current
``------- SEARCH`` (its ``diff.ts``: ``^[-]{3,} SEARCH>?$``)."""
_DIVIDER = re.compile(r"\s*={5,9}\s*")
_REPLACE = re.compile(r"\s*(?:>{5,9}|\+{3,}) REPLACE>?\s*")
"""An edit's closing marker: ``>>>>>>> REPLACE``, Cline's ``+++++++ REPLACE``."""
_SIDE_META = re.compile(r":[a-z_]+:.*|-{3,}\s*")
"""Lines opening a SEARCH/REPLACE side that belong to the format (Roo Code's
``:start_line:12`` and ``-------``), kept with the markers. Only tried on a side's
lines: Cline's ``------- SEARCH`` is a marker (:data:`_SEARCH`), never a side's."""


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


def _searching(line: str) -> bool:
    return _SEARCH.fullmatch(line) is not None


class _Skeletons:
    """Splits a text's lines into prose and invocation blocks, each block given as its
    skeleton (module docstring). Linear in the text: every search for a closing line
    goes through an index of the candidates, or stops at the next SEARCH marker."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.ref = ref_for(text)
        self._ends: dict[str, list[int]] = {}
        """Lines ending with a closing tag, by tag name, in order."""
        self._alone: dict[str, list[int]] = {}
        """Lines that are only a closing tag, by tag name, in order."""
        self._fences: list[int] = []
        for index, line in enumerate(self.lines):
            if "</" in line and (end := _CLOSE_END.search(line)) is not None:
                self._ends.setdefault(end.group(1), []).append(index)
                if line.strip() == end.group(0).rstrip():
                    self._alone.setdefault(end.group(1), []).append(index)
            elif _BARE_FENCE.fullmatch(line):
                self._fences.append(index)
        self._budget = 8 * len(self.lines) + 1_000
        """Lines a tool block's search may visit in all: a candidate that fails (a
        prose wrapper tag, nested many deep) is searched again from inside, so a
        pathological text would cost its length squared; past it, the rest is prose."""

    def pieces(self) -> list[tuple[bool, list[str]]]:
        """The text as ``(is_block, lines)`` pieces in order: prose lines as written,
        blocks as their skeletons."""
        lines = self.lines
        pieces: list[tuple[bool, list[str]]] = []
        prose_end = -1  # index of the last line that went to prose
        i = 0
        while i < len(lines):
            found = self._block_at(i)
            if found is None:
                if pieces and not pieces[-1][0]:
                    pieces[-1][1].append(lines[i])
                else:
                    pieces.append((False, [lines[i]]))
                prose_end, i = i, i + 1
                continue
            end, skeleton, edits, prose = found
            if prose:  # fenced code of another language: prose, read as a unit
                for line in lines[i : end + 1]:
                    if pieces and not pieces[-1][0]:
                        pieces[-1][1].append(line)
                    else:
                        pieces.append((False, [line]))
                prose_end, i = end, end + 1
                continue
            if _length(skeleton) >= _length(lines[i : end + 1]):
                skeleton = lines[i : end + 1]  # the block is as short as its skeleton
            if edits and prose_end == i - 1 and pieces and not pieces[-1][0]:
                above = lines[i - 1].strip()  # an edit's file path line goes with it
                if above and len(above) <= MAX_PATH_LINE and paths_in(above):
                    skeleton = [pieces[-1][1].pop(), *skeleton]
            pieces.append((True, skeleton))
            i = end + 1
        return pieces

    def _block_at(self, i: int) -> tuple[int, list[str], bool, bool] | None:
        """The block opening at line ``i``: its last line, its skeleton, whether it
        holds SEARCH/REPLACE edits, whether it is prose (other fenced code)."""
        line = self.lines[i]
        stripped = line.strip()
        if stripped.startswith(("<", "-")):
            tag = _OPEN_TAG.fullmatch(stripped) if stripped[0] == "<" else None
            if tag is not None:
                close = self._close(tag.group(1), i + 1, len(self.lines), alone=True)
                body = None if close is None else self._tag_body(i + 1, close, 1)
                if close is not None and body is not None:
                    return close, [line, *body, self.lines[close]], False, False
            if _searching(line):
                replace = self._edit_end(i)
                if replace is not None:
                    edits = self._search_replace(self.lines[i : replace + 1])
                    if edits is not None:
                        return replace, edits, True, False
            return None
        fence = _FENCE.match(stripped)
        if fence is None:
            return None
        close = self._fence_close(fence.group(1), i)
        if close is None:
            return None
        body = self.lines[i + 1 : close]
        if any(_searching(x) for x in body):
            edits = self._search_replace(body)
            if edits is not None:
                return close, [line, *edits, self.lines[close]], True, False
        if not _SHELLS.isdisjoint(re.split(r"[_-]", fence.group(2).lower())):
            kept = (
                body
                if len(body) <= MAX_SHELL_LINES
                and sum(map(len, body)) <= MAX_SHELL_LINES * MAX_VALUE_LINE
                else self._run(body)
            )
            return close, [line, *kept, self.lines[close]], False, False
        return close, [], False, True

    def _close(self, tag: str, start: int, stop: int, *, alone: bool = False) -> int | None:
        """The first line in ``[start, stop)`` ending with ``</tag>`` (that is only it,
        ``alone``)."""
        ends = (self._alone if alone else self._ends).get(tag, [])
        k = bisect.bisect_left(ends, start)
        return ends[k] if k < len(ends) and ends[k] < stop else None

    def _fence_close(self, fence: str, i: int) -> int | None:
        for k in range(bisect.bisect_right(self._fences, i), len(self._fences)):
            self._budget -= 1
            if self._budget < 0:
                return None
            index = self._fences[k]
            marks = self.lines[index].strip()
            if marks[0] == fence[0] and len(marks) >= len(fence):
                return index
        return None

    def _tag_body(self, start: int, stop: int, depth: int) -> list[str] | None:
        """The skeleton of the lines in ``[start, stop)`` when each is inside a child
        tag (blank lines aside) and there are 1 to :data:`_MAX_CHILDREN` of them; else
        None (prose, a file's text, data)."""
        out: list[str] = []
        children = 0
        i = start
        while i < stop:
            self._budget -= 1
            if self._budget < 0:
                return None
            line = self.lines[i]
            stripped = line.strip()
            if not stripped:
                i += 1
                continue
            tag = _OPEN_TAG.match(stripped)
            close = None if tag is None else self._close(tag.group(1), i, stop)
            children += 1
            if tag is None or close is None or children > _MAX_CHILDREN:
                return None  # a line outside any child, or data
            if close == i:  # <path>src/a.py</path>
                out += self._one_line(line, tag.end())
            elif tag.end() == len(stripped) and self.lines[close].strip() == f"</{tag.group(1)}>":
                out += [line, *self._value(i + 1, close, depth), self.lines[close]]
            else:  # a value glued to its tags: <command>cd x &&\nmake</command>
                out += self._glued(self.lines[i : close + 1])
            i = close + 1
        return out or None

    def _value(self, start: int, stop: int, depth: int) -> list[str]:
        self._budget -= stop - start
        if depth < _MAX_DEPTH and (nested := self._tag_body(start, stop, depth + 1)) is not None:
            return nested
        value = self.lines[start:stop]
        if any(_searching(x) for x in value) and (edits := self._search_replace(value)):
            return edits
        return self._run(value)

    def _edit_end(self, i: int) -> int | None:
        """The ``REPLACE`` marker line of the edit opening at line ``i``, if it is
        complete before the next edit opens."""
        divided = False
        for index in range(i + 1, len(self.lines)):
            line = self.lines[index]
            if _searching(line):
                return None
            if not divided:
                divided = _DIVIDER.fullmatch(line) is not None
            elif _REPLACE.fullmatch(line):
                return index
        return None

    def _search_replace(self, lines: list[str]) -> list[str] | None:
        """The skeleton of lines holding complete SEARCH/REPLACE edits: each marker, the
        first line of each side, and the lines between edits (a path) as values."""
        out: list[str] = []
        pending: list[str] = []
        i = 0
        while i < len(lines):
            if not _searching(lines[i]):
                pending.append(lines[i])
                i += 1
                continue
            divider = replace = None
            for k in range(i + 1, len(lines)):
                if _searching(lines[k]):
                    break
                if divider is None:
                    divider = k if _DIVIDER.fullmatch(lines[k]) else None
                elif _REPLACE.fullmatch(lines[k]):
                    replace = k
                    break
            if divider is None or replace is None:
                return None
            out += [*self._run(pending), lines[i], *self._side(lines[i + 1 : divider])]
            out += [lines[divider], *self._side(lines[divider + 1 : replace]), lines[replace]]
            pending = []
            i = replace + 1
        return out + self._run(pending)

    def _side(self, lines: list[str]) -> list[str]:
        meta = 0
        while meta < len(lines) and _SIDE_META.fullmatch(lines[meta].strip()):
            meta += 1
        return [*lines[:meta], *self._run(lines[meta:])]

    def _one_line(self, line: str, opened: int) -> list[str]:
        """A child value on its tags' line (its opening tag ends at ``opened`` in the
        stripped line): whole when the value has at most :data:`MAX_VALUE_LINE`
        characters, else the opening tag with that many of them, the note, the line's
        error form and the closing tag (a skeleton not shorter than the line: the line)."""
        stripped = line.strip()
        closing = stripped[stripped.rindex("</") :]
        value = stripped[opened : len(stripped) - len(closing)]
        if len(value) <= MAX_VALUE_LINE:
            return [line]
        indent = line[: len(line) - len(line.lstrip())]
        cut = [
            indent + stripped[:opened] + value[:MAX_VALUE_LINE],
            self._note("the rest of this line"),
            *([shown_error_line(line)] if is_error_line(line) else []),
            indent + closing,
        ]
        return cut if _length(cut) < len(line) else [line]

    def _glued(self, lines: list[str]) -> list[str]:
        """A value glued to its tags over several lines: its first lines as a value
        (:meth:`_run`), then its last line whole; a last line over :data:`MAX_VALUE_LINE`
        characters goes in the value (the note names it, its error form is shown) and
        its closing tag follows on a line of its own (a skeleton not shorter than the
        lines: the lines)."""
        last = lines[-1]
        if len(last) <= MAX_VALUE_LINE:
            return [*self._run(lines[:-1]), last]
        end = last.rstrip()
        indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
        skeleton = [*self._run(lines), indent + end[end.rindex("</") :]]
        return skeleton if _length(skeleton) < _length(lines) else lines

    def _note(self, more: str) -> str:
        return f"[ctxwarden: {more} in {self.ref}]"

    def _run(self, lines: list[str]) -> list[str]:
        """A value's lines: whole when one line of at most :data:`MAX_VALUE_LINE`
        characters, else its first line (cut to that), a note naming the reference and
        what it stands for, then the hidden error lines; whole too when that is not
        shorter (two short lines, hidden lines all error lines)."""
        start, stop = 0, len(lines)
        while start < stop and not lines[start].strip():
            start += 1
        while stop > start and not lines[stop - 1].strip():
            stop -= 1
        if start == stop:
            return []
        first, rest = lines[start], lines[start + 1 : stop]
        if not rest and len(first) <= MAX_VALUE_LINE:
            return [first]
        more = f"{len(rest):,} more line{'s' if len(rest) != 1 else ''}"
        if len(first) > MAX_VALUE_LINE:
            rest = [first, *rest]
            first = first[:MAX_VALUE_LINE]
            more = f"the rest of this line and {more}" if len(rest) > 1 else "the rest of this line"
        shown = dict.fromkeys(shown_error_line(x) for x in rest if is_error_line(x))
        skeleton = [first, self._note(more), *shown]
        whole = lines[start:stop]
        return skeleton if _length(skeleton) < _length(whole) else whole


def _length(lines: list[str]) -> int:
    """Characters of ``lines`` joined as a text."""
    return sum(map(len, lines)) + len(lines) - 1 if lines else 0


@text_memo()
def extract_summary(text: str, keep_sentences: int) -> tuple[str, tuple[str, ...]]:
    """The extractive summary of ``text`` and the error lines it keeps; the skeletons
    of its invocation blocks (module docstring) in their order after the lead."""
    if _MAYBE_BLOCK.search(text) is None:
        pieces: list[tuple[bool, list[str]]] = [(False, text.split("\n"))]
    else:
        pieces = _Skeletons(text).pieces()
    prose = "\n".join(line for block, lines in pieces if not block for line in lines)
    sentences = _sentences(prose, keep_sentences + 8)
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
    for block, lines in pieces:
        if block:
            kept += lines
            continue
        for line in lines:
            stripped = line.strip()
            if not stripped:
                continue
            if is_error_line(line):  # always verbatim, even the lead's own line
                kept.append(shown_error_line(line))
            elif stripped in in_lead or (lead and lead in stripped):
                continue  # the lead's own line (a one-paragraph text is all one line)
            elif path_lines < MAX_PATH_LINES and len(stripped) <= MAX_PATH_LINE and paths_in(line):
                kept.append(line)
                path_lines += 1
    errors = tuple(error_lines(text))
    # a JSON text's error lines are those its strings hold (json_view): kept too
    listed = set(kept)
    kept += [shown for e in errors if (shown := shown_error_line(e)) not in listed]
    return "\n".join([lead, *kept] if lead else kept), errors


class SummarizePass:
    """Condenses old assistant prose (kind ``assistant_text``) extractively; a summary
    above 70% of the text's tokens saves too little and is not made."""

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
