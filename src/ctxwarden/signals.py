"""Content signals shared by the passes: error lines, distinctive strings, paths, exit status.

Results are memoized by content in bounded caches (agents resend the same texts every
turn); the bounds keep a long-running proxy's memory flat.

These are deliberately broad: a line that *might* be an error signal is kept by every
lossy pass, and distinctive strings (paths, identifiers, numbers) are what placeholders
keep visible so the agent can still find what an old output mentioned.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable, Iterator

import orjson

from ctxwarden.json_wrapped import json_exit_status, json_view, shown_text
from ctxwarden.memo import text_memo

__all__ = [
    "MAX_ERROR_LINE",
    "SEARCH_BUDGET",
    "LinesShown",
    "TextSearch",
    "argument_error_lines",
    "closing_lines",
    "distinctive_set",
    "distinctive_strings",
    "error_lines",
    "exit_status",
    "is_error_line",
    "is_path",
    "mention_scores",
    "paths_in",
    "plain_line",
    "shown_error_line",
]

_ERROR_RE = re.compile(
    r"""(
        Traceback\ \(most\ recent\ call\ last\)
      | \b[A-Za-z_]*(?:Error|Exception|Failure|Fault)\b\s*[:(]
      | \b(?:error|ERROR|Error)\b\s*[:\[]
      | \bFAIL(?:ED|URE|S)?\b
      | \bfatal\b\s*:
      | \bpanic\b\s*:
      | \bpanicked\ at\b
      | \[(?:ERROR|FATAL)\]
      | \bSegmentation\ fault\b
      | \bcommand\ not\ found\b
      | \bNo\ such\ file\ or\ directory\b
      | \bPermission\ denied\b
      | \bcannot\ find\ symbol\b
      | \bundefined\ reference\b
      | \bsyntax\ error\b
      | ^\s*E\s{2,}\S
      | :\d+(?::\d+)?:\s*(?:error|warning)\b
      | \bBUILD\ FAILURE\b
      | \bAssertionError\b
      | \b[Ee]xit\ (?:code|status):?\ [1-9]
      | <returncode>[1-9]\d*</returncode>
      | ^\s*ERROR\s
      | \b[1-9]\d*\ (?:failed|errors?)\b
      | \berror\ TS\d+:
      | \bnpm\ ERR!
      | \bException\ in\ thread\b
    )""",
    re.VERBOSE | re.MULTILINE,
)

_ERROR_KEYWORDS = (
    "Traceback",
    "Error",
    "Exception",
    "Failure",
    "Fault",
    "error",
    "ERROR",
    "FAIL",
    "fatal",
    "FATAL",
    "panic",
    "Segmentation",
    "command not found",
    "No such file",
    "Permission denied",
    "cannot find symbol",
    "undefined reference",
    "warning",
    "exit ",
    "Exit ",
    "<returncode>",
    "failed",
    "ERR!",
)
"""Literals of which every alternative of :data:`_ERROR_RE` contains at least one (the
pytest ``E   ...`` lines excepted: :data:`_E_LINE_RE`). A line holding none of them
cannot be an error line."""
_E_LINE_RE = re.compile(r"E\s\s")


ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
"""ANSI escape sequences (colours, cursor moves, titles). No match crosses a line
break (a title code left open on its line is not one), so stripping a whole text equals
stripping it line by line: a stray title code never takes the lines after it along."""


def plain_line(line: str) -> str:
    """``line`` as a terminal shows it: without ANSI escapes or trailing whitespace."""
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    return line.rstrip()


def is_error_line(line: str) -> bool:
    """True when ``line`` carries an error signal (tracebacks, ``Error:``, ``FAILED``...),
    colour codes or not (``\x1b[31mFAILED\x1b[0m``: the code's ``m`` is glued to the
    word, so the signal is looked for in the line without them)."""
    if "\x1b" in line:
        line = plain_line(line)
    if _E_LINE_RE.search(line) is None and not any(k in line for k in _ERROR_KEYWORDS):
        return False
    return bool(_ERROR_RE.search(line))


MAX_ERROR_LINE = 2_000
"""Characters of an error line shown whole. A longer line is data that holds an error
word (a minified script matched by grep, a dumped dictionary, code whose newlines were
lost): kept whole, one 88 KB line of ``jquery.min.js`` held a 100 KB output in full
through the truncation guardrail for a whole session. It is shown cut
(:func:`shown_error_line`); the whole line stays one recall away, in the original."""

_CUT_HEAD = 1_000
_CUT_TAIL = 500
_CUT_AROUND = 250


def error_lines(text: str, limit: int | None = None) -> list[str]:
    """Every distinct error line of ``text`` in order (at most ``limit``), as written;
    of a JSON-wrapped output, those of the text its strings hold
    (:func:`~ctxwarden.json_wrapped.json_view`: inside a JSON string every line follows
    a ``\\n`` escape, which glues its first word to an ``n`` and makes the whole output
    one line).

    Uncapped by default: every error line of a condensed part must stay visible (as
    :func:`shown_error_line` shows it), so a cap here would hide the ones past it from
    the passes and their checks alike."""
    return list(_error_lines(shown_text(text), limit))


def shown_error_line(line: str) -> str:
    """How a condensed text shows the error line ``line``: whole up to
    :data:`MAX_ERROR_LINE` characters; a longer one as its first 1,000 characters, the
    characters around its first error signal when that lies between them, and its last
    500 (where assertion details and exit messages end), each cut marked ``[...]``.
    Two long lines that differ only past their start still show apart by their ends.
    A coloured line is measured and cut without its colour codes (:func:`plain_line`),
    so the error signal is found and no code is cut in half."""
    if len(line) <= MAX_ERROR_LINE:
        return line
    if "\x1b" in line:
        line = plain_line(line)
        if len(line) <= MAX_ERROR_LINE:
            return line
    tail_start = len(line) - _CUT_TAIL
    spans = [(0, _CUT_HEAD)]
    hit = _ERROR_RE.search(line)
    # the text around it, unless it lies well inside the head or inside the tail
    if hit is not None and hit.end() + _CUT_AROUND > _CUT_HEAD and hit.start() < tail_start:
        spans.append((max(0, hit.start() - _CUT_AROUND), hit.end() + _CUT_AROUND))
    spans.append((tail_start, len(line)))
    merged: list[tuple[int, int]] = []
    for begin, finish in spans:
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], finish))
        else:
            merged.append((begin, finish))
    return " [...] ".join(line[a:b] for a, b in merged)


SEARCH_BUDGET = 256 * 1024 * 1024
"""Characters a capped :class:`TextSearch` may search in all (about a quarter of a
second). Thousands of needles each searched in a big text took seconds."""


def _lines(text: str) -> list[str]:
    return text.split("\n")


class TextSearch:
    """``needle in TextSearch(text)`` is ``needle in text``: a needle among the units of
    ``text`` (``units(text)``, substrings of it; by default its lines, such as an error
    line still shown as it was) is found by a set lookup, any other by a search, so
    testing thousands of lines costs a pass over the text, not a search each.

    ``capped``: the searches stop after :data:`SEARCH_BUDGET` characters in all; past
    that a needle that is not a unit counts as absent. Only for callers to which
    "absent" means showing more (a mention listed, a line kept), never less."""

    __slots__ = ("_budget", "_units", "_units_of", "text")

    def __init__(
        self,
        text: str,
        units: Callable[[str], Iterable[str]] = _lines,
        *,
        capped: bool = False,
    ) -> None:
        self.text = text
        self._units_of = units
        self._units: frozenset[str] | None = None
        self._budget = SEARCH_BUDGET if capped else None

    def __contains__(self, needle: str) -> bool:
        if self._units is None:
            self._units = frozenset(self._units_of(self.text))
        if needle in self._units:
            return True
        if self._budget is not None:
            if self._budget <= 0:
                return False
            self._budget -= len(self.text)
        return needle in self.text


class LinesShown:
    """Which error lines a text shows: ``LinesShown(text).shows(line)`` is true when
    ``line``, or the form :func:`shown_error_line` gives it, is a whole line of
    ``text``, compared as a terminal shows them (:func:`plain_line`: a coloured line
    and its normalized form are the same line). A whole line, not a substring:
    ``FAILED t.py::test_1`` is not shown by ``FAILED t.py::test_10``. A JSON-wrapped
    text also shows the lines its strings hold
    (:func:`~ctxwarden.json_wrapped.json_view`), where :func:`error_lines` finds its
    error lines."""

    __slots__ = ("_lines", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lines: frozenset[str] | None = None

    def shows(self, line: str) -> bool:
        if self._lines is None:
            view = json_view(self.text)
            lines = (
                self.text.split("\n")
                if view is None
                else [*self.text.split("\n"), *view.split("\n")]
            )
            self._lines = frozenset(plain_line(x) for x in lines)
        return plain_line(line) in self._lines or plain_line(shown_error_line(line)) in self._lines


def _candidate_lines(text: str) -> Iterator[str]:
    """The lines of ``text`` that may be error lines, in order, as written: those
    holding an error keyword, judged without colour codes (a line of a coloured text is
    a candidate when its uncoloured form holds one)."""
    if "\x1b" in text:
        plain = ANSI_RE.sub("", text)  # the same lines: no code crosses a line break
        lines = text.split("\n")
        ends = list(itertools.accumulate(len(x) + 1 for x in plain.split("\n")))
        for start in _candidate_line_starts(plain):
            yield lines[bisect.bisect_right(ends, start)]
        return
    for start in _candidate_line_starts(text):
        yield _line_at(text, start)


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _candidate_line_starts(text: str) -> list[int]:
    """Start offsets of the lines that hold an error keyword, ascending (a superset of
    the error lines, found with ``str.find``: ten times faster than scanning ``text``
    with :data:`_ERROR_RE`, which tries every alternative at every position)."""
    starts: set[int] = set()
    for keyword in _ERROR_KEYWORDS:
        i = text.find(keyword)
        while i >= 0:
            starts.add(text.rfind("\n", 0, i) + 1)
            end = text.find("\n", i)
            if end < 0:
                break
            i = text.find(keyword, end + 1)
    line_end = -1
    for match in _E_LINE_RE.finditer(text):
        if match.start() < line_end:
            continue  # on the line of the hit before (searching back again is quadratic)
        starts.add(text.rfind("\n", 0, match.start()) + 1)
        line_end = text.find("\n", match.start())
        if line_end < 0:
            break
    return sorted(starts)


@text_memo()
def _error_lines(text: str, limit: int | None) -> tuple[str, ...]:
    """Same result as testing each line alone with :func:`is_error_line`: the lines
    holding a keyword are tested in order, each distinct hit kept once. In a coloured
    text the keywords are looked for without the codes (which may split one), and each
    candidate is tested as written."""
    out: list[str] = []
    seen: set[str] = set()
    for line in _candidate_lines(text):
        if line and line not in seen and is_error_line(line):
            seen.add(line)
            out.append(line)
            if limit is not None and len(out) >= limit:
                break
    return tuple(out)


@text_memo()
def argument_error_lines(arguments: str) -> frozenset[str]:
    """The error lines of tool-call arguments, read inside their JSON string values (a
    script written through a call keeps its lines there); non-JSON text as it is."""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return frozenset(error_lines(arguments))
    found: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            found.update(error_lines(v))
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return frozenset(found)


_WORD_RE = re.compile(
    # a slash that starts a run is part of the word: ``/testbed/app/models.py`` and
    # ``/api/items`` are not the relative ``testbed/app/models.py`` and ``api/items``
    # (a run like ``./src`` or ``a/b`` is matched from its first word character, as before)
    r"(?:(?<![A-Za-z0-9_$./:-])/(?=[A-Za-z_$]))?[A-Za-z0-9_$][A-Za-z0-9_$./:-]*[A-Za-z0-9_$]"
    r"|\d{2,}"
)
_PATH_RE = re.compile(
    # each alternative starts only where a run of its characters starts: a match from
    # inside a run would be the same match, and trying every position of a long word
    # (a base64 blob in a command) took time quadratic in its length
    r"(?<![\w.-])(?:[\w.-]+/)+[\w.-]+"
    r"|(?<![\w-])[\w-]+\.(?:py|java|js|ts|go|rs|c|h|cpp|rb|md|txt|json|toml|yaml|yml|cfg|ini|xml|sh)\b"
)


@text_memo()
def distinctive_set(text: str) -> frozenset[str]:
    """The distinctive strings of ``text`` as a set (memoized by content)."""
    return frozenset(_distinctive_tuple(text))


def _distinctive(word: str) -> bool:
    if len(word) < 4:
        if len(word) == 3 and ("_" in word or "/" in word):
            return any(c.isalpha() for c in word)  # i_0, r_s, /db: short names all the same
        return word.isdigit() and len(word) >= 2
    if word.isdigit():
        return True
    if any(c in word for c in "/._$:") or any(c.isdigit() for c in word):
        return True
    inner_upper = any(c.isupper() for c in word[1:])
    return inner_upper and any(c.islower() for c in word)


def distinctive_strings(text: str) -> list[str]:
    """Paths (an absolute one with its leading slash), dotted / snake / camel identifiers
    (three characters are enough with an underscore: ``i_0``) and numbers, in first-seen
    order."""
    return list(_distinctive_tuple(text))


@text_memo()
def _distinctive_tuple(text: str) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()  # every word judged so far, kept or not
    for raw in _WORD_RE.findall(text):
        word = raw.rstrip(".:-")
        if word in seen:
            continue
        seen.add(word)
        if _is_distinctive_word(word):
            out.append(word)
    return tuple(out)


def _is_distinctive_word(word: str) -> bool:
    if word.isalpha():  # the common case, judged without a call: camelCase only
        return len(word) >= 4 and not word[1:].islower() and not word.isupper()
    return _distinctive(word)


def _mention_parts(word: str) -> tuple[str, ...]:
    """The strings a mention of ``word`` should show: ``src/a.py:12`` (``grep -n``, a
    traceback, a compiler) names a file and a line, which an agent types apart
    (``sed -n 12p src/a.py``); ``a.py::Test::test_x`` a file, a class and a test."""
    if ":" not in word:
        return (word,)
    parts = (part.strip(".-") for part in word.split(":"))
    return tuple(part for part in parts if _is_distinctive_word(part))


_KIND_WEIGHT = {"identifier": 1.0, "dotted": 0.6, "camel": 0.5, "path": 0.12, "number": 0.1}
"""How often an agent later types a distinctive string of an old output, by its kind,
relative to snake_case identifiers (measured over agent sessions: names of functions,
variables and attributes are reused most; listed paths and bare numbers - line
numbers, sizes, counts - rarely, because outputs hold so many of them)."""


def _mention_kind(word: str) -> str:
    if word.isdigit():
        return "number"
    if "/" in word:
        return "path"
    if "_" in word:
        return "identifier"
    if "." in word:
        return "dotted"
    return "camel"


_DEFINITION_WEIGHT = 6.0
"""Boost of a name the output defines (``class WriterTests``, ``def parse``): what an
output defines is what the agent names next (a test class in a test id, a function to
edit); without it a camelCase class name seen once ranks below most identifiers."""
_DEFINITION_RE = re.compile(
    r"\b(?:class|def|function|func|fn|interface|struct|enum|trait)\s+([A-Za-z_][A-Za-z0-9_]*)"
)

_NUMBERED_WORD = re.compile(r"(\d+)[:-][A-Za-z]+$")


def _numbered_word_as_number(word: str) -> str:
    m = _NUMBERED_WORD.match(word)
    return m.group(1) if m else word


MENTION_SCAN_HEAD = 160_000
MENTION_SCAN_TAIL = 40_000
"""An output longer than both is ranked on its first ``MENTION_SCAN_HEAD`` and last
``MENTION_SCAN_TAIL`` characters (:func:`mention_scores`)."""


def _head_and_tail(text: str) -> str:
    """The first :data:`MENTION_SCAN_HEAD` and last :data:`MENTION_SCAN_TAIL` characters
    of ``text``, each cut at a whitespace within :data:`_CUT_SLACK` characters so that
    no word is cut in two (where there is none, minified JSON or a bundle, exactly
    there)."""
    head, tail = MENTION_SCAN_HEAD, len(text) - MENTION_SCAN_TAIL
    end = max(text.rfind(c, head - _CUT_SLACK, head) for c in " \n\t")
    found = [i for c in " \n\t" if (i := text.find(c, tail, tail + _CUT_SLACK)) >= 0]
    start = min(found, default=tail)
    return text[: end if end >= 0 else head] + "\n" + text[start:]


_CUT_SLACK = 1_000


@text_memo()
def mention_scores(text: str) -> tuple[tuple[str, float], ...]:
    """The distinctive strings of ``text`` with an estimate of how likely the agent is
    to need each one later, best first (ties keep first-seen order).

    The score multiplies a weight for the string's kind (:data:`_KIND_WEIGHT`), a boost
    for strings the output repeats (a name used three times is what the output is
    about), a boost for names the output defines (:data:`_DEFINITION_WEIGHT`) and a
    decay with first-seen position (outputs lead with what was asked for). It is a
    ranking heuristic, stable and cheap; 1.0 is a snake_case name seen once at the
    start. A line number glued to its line's first word (``12:def`` in ``grep -n``
    output) is listed as the number: it would otherwise rank as a name; ``a.py:12`` is
    listed as ``a.py`` and ``12`` (:func:`_mention_parts`).

    A text longer than :data:`MENTION_SCAN_HEAD` plus :data:`MENTION_SCAN_TAIL`
    characters is ranked on its head and tail alone: a string first seen further in
    ranks low by its position anyway, and scanning every word of a megabyte of output
    took about a second (a log of random identifiers: half a million candidates).
    """
    if len(text) > MENTION_SCAN_HEAD + MENTION_SCAN_TAIL:
        text = _head_and_tail(text)
    words = _distinctive_tuple(text)
    if any(_NUMBERED_WORD.match(w) for w in words):
        # ``12-def`` in a numbered listing is line 12: listed as the number
        words = tuple(dict.fromkeys(_numbered_word_as_number(w) for w in words))
    split = any(":" in w for w in words)
    if split:
        words = tuple(dict.fromkeys(part for w in words for part in _mention_parts(w)))
    counts: dict[str, int] = {}
    if words:
        wanted = set(words)
        for match in _WORD_RE.finditer(text):
            word = match.group(0).rstrip(".:-")
            for part in _mention_parts(word) if split else (word,):
                if part in wanted:
                    counts[part] = counts.get(part, 0) + 1
    defined = frozenset(_DEFINITION_RE.findall(text))
    scored = []
    for rank, word in enumerate(words):
        repeat = min(counts.get(word, 1), 5)
        boost = (1.0, 2.5, 3.5, 4.0, 4.5)[repeat - 1]
        if word in defined:
            boost *= _DEFINITION_WEIGHT
        scored.append((word, _KIND_WEIGHT[_mention_kind(word)] * boost / (1 + rank / 30)))
    scored.sort(key=lambda ws: -ws[1])
    return tuple(scored)


@text_memo()
def paths_in(text: str) -> frozenset[str]:
    """File paths (and bare file names with a known extension) mentioned in ``text``:
    an absolute one with its leading slash (``/repo/src/a.py``), a relative one without
    a leading ``./`` or ``../`` (``src/a.py``). A slash after ``~``, a colon or another
    slash (``~/x``, ``https://host/x``) starts no absolute path."""
    return frozenset(_path_at(text, m) for m in _PATH_RE.finditer(text))


def _path_at(text: str, match: re.Match[str]) -> str:
    start = match.start()
    if start and text[start - 1] == "/" and (start == 1 or text[start - 2] not in _NOT_ROOT):
        return "/" + match.group(0)
    return match.group(0).lstrip("./")


_NOT_ROOT = frozenset("~/:")
"""Characters before a slash that make it no filesystem root (a path run never starts
right after a path character: :data:`_PATH_RE`)."""


def is_path(word: str) -> bool:
    """Whether ``word`` is, whole, a relative path or a file name with a known extension
    (a form :func:`paths_in` finds)."""
    return _PATH_RE.fullmatch(word) is not None


_RETURNCODE_RE = re.compile(r"<returncode>(-?\d+)</returncode>")
_LEADING_RETURNCODE_RE = re.compile(r"\s*<returncode>(-?\d+)</returncode>")
_STATUS_LINE_RE = re.compile(
    r"\s*(?:exit(?:[ _]?code|\s+status)|return\s*code)[ \t]*[:=]?[ \t]*(-?\d+)\.?[ \t]*(?:\n|$)",
    re.IGNORECASE,
)
# OpenHands ends a shell output with "[The command completed with exit code N.]" and
# (as its observation) "[Current working directory: X]", "[Python interpreter: P]",
# "[Command finished with exit code N]"
_TRAILER_STATUS_RE = re.compile(
    r"\[(?:The command completed with exit code (-?\d+)\."
    r"|Command finished with exit code (-?\d+))\]"
)
_TRAILER_LINE_RE = re.compile(r"\[(?:Current working directory|Python interpreter): [^\n]*\]")
_TRAILER_LINES = 4
_TRAILER_CHARS = 1000


def closing_lines(text: str) -> list[str]:
    """The last few lines of an output (at most four, within its last 1,000
    characters, a line the cut went through left out), each stripped, in order: where
    agents put what they report after a command (its status, its directory)."""
    tail = text[-_TRAILER_CHARS:]
    lines = tail.rstrip().split("\n")
    if len(tail) < len(text):
        lines = lines[1:]  # the first may be cut
    return [line.strip() for line in lines[-_TRAILER_LINES:]]


def exit_status(text: str) -> int | None:
    """The exit status an output states in a structured form, else ``None``: a
    ``<returncode>N</returncode>`` tag opening its first line or alone on its last
    line, a first line that is only a status (``Exit code: N``, ``exit status N``),
    or OpenHands' closing ``[The command completed with exit code N.]`` /
    ``[Command finished with exit code N]`` among the bracketed lines that end it
    (a working directory, an interpreter). A JSON-wrapped output states it under an
    exit key (:func:`~ctxwarden.json_wrapped.json_exit_status`: ``exit_code``,
    ``returncode``, ... near its root, never in an array), else as its view does
    (:func:`~ctxwarden.json_wrapped.json_view`). A status mentioned anywhere else (a
    grep hit, a log line about a child process) is not the command's."""
    code = json_exit_status(text)
    if code is not None:
        return code
    text = shown_text(text)
    m = _LEADING_RETURNCODE_RE.match(text) or _STATUS_LINE_RE.match(text)
    if m:
        return int(m.group(1))
    lines = closing_lines(text)
    if lines:
        m = _RETURNCODE_RE.fullmatch(lines[-1])
        if m:
            return int(m.group(1))
    for line in reversed(lines):
        m = _TRAILER_STATUS_RE.fullmatch(line)
        if m:
            return int(m.group(1) or m.group(2))
        if not _TRAILER_LINE_RE.fullmatch(line):
            break
    return None
