"""Supersession: an output made stale by a newer run of the same action.

Two outputs are runs of the same action when their tool and command are the same (only
the leading and trailing whitespace may differ; arguments that only annotate a call, a
Claude Code ``description``, a Cursor ``explanation`` or a Cline ``requires_approval``,
left out: :func:`~ctxwarden.commands.action_of`; a timeout counts), or (``file_reads``)
both are full reads of the same file through the same tool (``cat F``, ``nl -ba F``,
``view F``; through another tool, a shell on another host, it is another read;
SWE-agent's ``open F`` shows a 100-line window, not the file).
SWE-agent's ``scroll_down`` and ``scroll_up`` show the next window each time: no run
of them is stale. All but the newest ``keep_newest`` runs become a note naming the
newest run; error lines that the newest run does not show are kept verbatim.

Agents keep one shell for a session, so the same command may run in another directory.
Two runs are only the same action when they surely ran in the same directory: no call
between them (nor one of the two) changes directory (``cd``, ``pushd``, ``popd`` as
shell words, anywhere in its command), unless the runs name it themselves (the command
starts with ``cd /absolute/dir &&`` or ``;`` and changes directory nowhere else, or the
read's path is absolute). A run whose output ends with the directory it ran in
(SWE-agent's ``(Current directory: X)``, OpenHands' ``[Current working directory: X]``)
is a run in X whatever the calls between did, and never the same action as a run
without that line or in another directory. Likewise SWE-agent's commands on its open
file (``goto N``, ``search_file X``, ``edit A:B``, ...) are only the same action in the
same open file, as their output's ``(Open file: F)`` line states.

A newer run supersedes an older one only when it shows much of the same: at least
``min_overlap`` (:class:`~ctxwarden.passes.config.SupersedeConfig`, 0.2 by default) of
the older output's distinct non-blank lines (those of a JSON-wrapped output's text,
:func:`~ctxwarden.json_wrapped.json_view`) are lines of the newer run too, or the older
output has at most :data:`TINY_LINES` of them. A re-read after an edit, a test re-run
or a ``git status`` shares most of its lines (measured: 1.0, 0.8, 0.67; a script's
re-run after a fix mostly 0.3 to 0.8 and down to 0.12, the corpus holding 227 of 241
supersessions at 0.3 or more); a poll of a background process (Claude Code's
``BashOutput``, Codex's ``write_stdin``, 0.05) returns only what is new since the last
one, and an argument-less snapshot (Playwright's ``browser_snapshot``, 0.09 for two
pages) shows whatever page is open: the same call, different things. Those older
outputs are left to the lossy passes, which keep their mentions.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

from ctxwarden.commands import action_of, command_of
from ctxwarden.json_wrapped import lines_label, shown_text
from ctxwarden.memo import TEXT_MEMO_BYTES, TEXT_MEMO_LIMIT, BoundedMemo, footprint
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import PassContext, Replacement, Segment, ref_for
from ctxwarden.passes.config import SupersedeConfig
from ctxwarden.signals import (
    LinesShown,
    closing_lines,
    error_lines,
    plain_line,
    shown_error_line,
)

__all__ = ["TINY_LINES", "SupersedePass", "action_key"]

TINY_LINES = 2
"""An older output of at most this many distinct non-blank lines is superseded
whatever it shares: a share of one or two lines is no measure (a one-line JSON
document or a minified file read again). Not a setting: it only says where a share
stops meaning anything; ``min_overlap = 0`` turns the whole gate off."""

_FULL_READ = re.compile(r"^(?:cat|nl(?:\s+-\w+)*|view|less|more)\s+([\w./-]+)\s*$")
_MOVES = re.compile(r"(?:^|[\s;&|(){}`!'\"])(?:cd|pushd|popd)(?=$|[\s;&|()`'\"])")
"""A change of directory: ``cd``, ``pushd`` or ``popd`` as a shell word (also in a
quoted or heredoc text: a false alarm only keeps an output), also where a quote opens
or closes (an argv call's script, ``bash -lc 'cd sub && ls'``)."""
_ANCHORED = re.compile(r"cd[ \t]+(/[\w./-]*)[ \t]*(?:&&|;)")
"""A command that first moves to an absolute directory (then runs there, wherever the
shell was)."""
_CWD_TRAILER = re.compile(
    r"\(Current directory: ([^\n]*)\)|\[Current working directory: ([^\n]*)\]"
)
_OPEN_FILE_TRAILER = re.compile(r"\(Open file: ([^\n]*)\)")
_ON_OPEN_FILE = re.compile(r"(?:goto|search_file|edit|insert|scroll_down|scroll_up)(?:\s|$)")
"""SWE-agent's commands whose output depends on the file it has open (``search_file X``
searches it unless given a file; the same ``edit`` text patches whichever is open)."""
_ALONE = re.compile(r"(?:scroll_down|scroll_up)(?:\s|$)")
"""SWE-agent's window moves: each run shows the next window of the open file, so a
newer run does not make an older one stale."""
_ANYWHERE = "/"
"""The place of a run that names its own directory."""


def action_key(segment: Segment, file_reads: bool, arguments: str | None = None) -> str:
    """What counts as "the same action" for supersession (in the same directory).
    ``arguments``: those of the call that produced ``segment``, when known; then the
    annotations among them do not count (:func:`~ctxwarden.commands.action_of`)."""
    return _action_key(segment.tool_name, _action_command(segment.command, arguments), file_reads)


def _action_command(command: str, arguments: str | None) -> str:
    """The command of an action: ``command`` without annotations when ``arguments``
    are known and are what it was read from (an adapter may name the command of a
    built-in call itself: a patch's operation and file)."""
    if arguments is None or command_of(arguments) != command:
        return command
    return action_of(arguments)


def _action_key(tool_name: str, command: str, file_reads: bool) -> str:
    """:func:`action_key` of a run of ``tool_name`` with ``command``."""
    command = command.strip()
    if file_reads:
        m = _FULL_READ.match(command)
        if m:
            path = m.group(1)
            while path.startswith("./"):  # ./a is a, but ../a, /a and .env are not
                path = path[2:]
            # a read through another tool is another read (a shell on another host)
            return f"read:{path}\x00{tool_name}"
    return f"{tool_name}\x00{command}"


def _where(key: str, command: str) -> tuple[bool, bool, bool]:
    """Whether a run of ``command`` (action ``key``) changes the shell's directory,
    whether it names the directory it runs in (so that where the shell was does not
    matter), and whether it shows something new each time (never stale)."""
    moves = _MOVES.search(command) is not None
    if key.startswith("read:/"):
        return moves, True, False
    command = command.lstrip()
    if _ALONE.match(command):
        return moves, False, True
    m = _ANCHORED.match(command)
    # from the separator on: "cd /a;cd b" moves again
    anchored = m is not None and _MOVES.search(command, m.end() - 1) is None
    return moves, anchored, False


def _distinct_lines(text: str) -> frozenset[str]:
    """The distinct non-blank lines of an output as a terminal shows them, stripped
    (of a JSON-wrapped output, those of its view)."""
    lines = shown_text(text).split("\n")
    return frozenset(s for line in lines if (s := plain_line(line).strip()))


def _place_trailer(text: str, on_open_file: bool) -> str | None:
    """The directory an output says it ran in, on one of its last lines (with
    ``on_open_file``, also the file it says is open), else ``None``."""
    lines = closing_lines(text)
    cwd = None
    for line in reversed(lines):
        m = _CWD_TRAILER.fullmatch(line)
        if m:
            cwd = "cwd:" + (m.group(1) if m.group(1) is not None else m.group(2))
            break
    if on_open_file:
        for line in reversed(lines):
            m = _OPEN_FILE_TRAILER.fullmatch(line)
            if m:
                return f"{cwd or ''}\x00open:{m.group(1)}"
    return cwd


class SupersedePass:
    """Replaces older runs of a repeated action with a note naming the newest run."""

    name = "supersede"

    def __init__(self, config: SupersedeConfig) -> None:
        self.config = config
        self._keys: BoundedMemo[tuple[str, str, str], tuple[str, bool, bool, bool]] = BoundedMemo(
            TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES
        )
        """Action keys and directory changes by tool name, command and action: every request
        asks again for every call of the history."""
        self._overlap: BoundedMemo[tuple[str, tuple[str, ...]], bool] = BoundedMemo(
            TEXT_MEMO_LIMIT, TEXT_MEMO_BYTES
        )
        """:meth:`_overlaps` by the older text and the newer run's texts (one config per
        pass: the share it asks is fixed)."""

    def _overlaps(self, older: str, newer: tuple[str, ...]) -> bool:
        """Whether the newer run (its blocks' texts) shows enough of ``older`` to stand
        for it (``min_overlap``, :data:`TINY_LINES`), memoized."""
        key = (older, newer)
        found = self._overlap.get(key, None)
        if found is None:
            old = _distinct_lines(older)
            if len(old) <= TINY_LINES:
                found = True
            else:
                new = frozenset().union(*map(_distinct_lines, newer))
                found = len(old & new) >= self.config.min_overlap * len(old)
            found = self._overlap.put(key, found, footprint(key))
        return found

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]:
        groups = self._groups(ctx)
        out: dict[Path, Replacement] = {}
        keep = self.config.keep_newest
        for by_run in groups.values():
            runs = list(by_run.values())
            if len(runs) <= keep:
                continue
            newest = runs[-1][0]
            newest_texts = tuple(s.text for s in runs[-1])
            for segment in (s for run in runs[:-keep] for s in run):
                if (
                    segment.path not in ctx.eligible
                    or segment.path in decided
                    or segment.tokens < self.config.min_tokens
                    or segment.text in newest_texts  # the same bytes: dedupe's case
                    or not self._overlaps(segment.text, newest_texts)
                ):
                    continue
                ref = ref_for(segment.text)
                size = lines_label(segment.text)
                # error lines the witness does not show (the witness is the newest
                # run's first block: the note's claim is checked against it)
                shown = LinesShown(newest.text)
                kept = tuple(e for e in error_lines(segment.text) if not shown.shows(e))
                head = (
                    f"[ctxwarden: superseded by the same action in message "
                    f"#{newest.message_index}; original {ref} ({size})]"
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

    def _groups(
        self, ctx: PassContext
    ) -> dict[tuple[str, str], dict[tuple[int, str], list[Segment]]]:
        """The runs of each action in each place, oldest first.

        A run is one call's output: the blocks of one result (stdout and stderr parts,
        an Anthropic tool_result's text blocks) never supersede each other. Its place is
        where it surely ran: anywhere, when it names its directory; else the directory
        its output ends with; else the span between two changes of directory (counted
        over every call, in message order). A run that changes directory itself, whose
        call and output have a change between them (parallel calls), or that shows
        something new each time (a window move), is in no group."""
        runs: dict[tuple[int, str], tuple[str, str, list[Segment]]] = {}
        skipped: set[tuple[int, str]] = set()
        moved: set[str] = set()  # the calls whose change is counted
        called_at: dict[str, int] = {}  # the span each call was made in
        arguments: dict[str, str] = {}  # each call's arguments, where a segment has them
        span = 0
        for segment in ctx.segments:
            if segment.kind == "tool_args":
                command = command_of(segment.text)
                moves = self._action(segment.tool_name, command, command)[1]
                called_at[segment.call_id] = span
                arguments[segment.call_id] = segment.text
                if moves:
                    span += 1
                    moved.add(segment.call_id)
                continue
            if segment.kind != "tool_output" or not segment.command:
                continue
            run = (segment.message_index, segment.call_id)
            action = _action_command(segment.command, arguments.get(segment.call_id))
            key, moves, anchored, alone = self._action(segment.tool_name, segment.command, action)
            if moves and (not segment.call_id or segment.call_id not in moved):
                span += 1  # a call with no arguments segment
                moved.add(segment.call_id)
            if run in skipped:
                continue
            if run not in runs:
                if anchored:
                    place = _ANYWHERE
                elif moves or alone or called_at.get(segment.call_id, span) != span:
                    skipped.add(run)
                    continue
                else:
                    place = f"#{span}"
                runs[run] = (key, place, [])
            runs[run][2].append(segment)
        by_key: dict[str, list[tuple[tuple[int, str], str, list[Segment]]]] = defaultdict(list)
        for run, (key, place, segments) in runs.items():
            by_key[key].append((run, place, segments))
        groups: dict[tuple[str, str], dict[tuple[int, str], list[Segment]]] = defaultdict(dict)
        for key, of_key in by_key.items():
            if len(of_key) <= self.config.keep_newest:
                continue  # nothing to supersede: no trailer to read
            on_open_file = _ON_OPEN_FILE.match(key.partition("\x00")[2]) is not None
            for run, place, segments in of_key:
                if place != _ANYWHERE or on_open_file:
                    trailers = {
                        t
                        for s in segments
                        if (t := _place_trailer(s.text, on_open_file)) is not None
                    }
                    if len(trailers) == 1:
                        place = trailers.pop()
                groups[key, place][run] = segments
        return groups

    def _action(self, tool_name: str, command: str, action: str) -> tuple[str, bool, bool, bool]:
        """:func:`action_key` of a run of ``tool_name`` with ``command`` (its action:
        ``action``, :func:`_action_command`) under this pass's config, whether it
        changes directory, whether it names its directory and whether it shows
        something new each time (:func:`_where`, which reads the whole command),
        memoized."""
        by = (tool_name, command, action)
        found = self._keys.get(by, None)
        if found is None:
            key = _action_key(tool_name, action, self.config.file_reads)
            found = (key, *_where(key, command))
            found = self._keys.put(by, found, footprint(by) + footprint(found))
        return found
