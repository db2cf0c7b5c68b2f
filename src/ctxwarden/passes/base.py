"""The pass seam: one callable over the segments of a conversation.

A *segment* is one editable text of the request: a tool output (a text part of a tool
result) or a message text. A pass looks at all segments (so it can compare with newer
ones) and proposes :class:`Replacement` values for *eligible* segments that no earlier
pass replaced (a lossy pass may also propose for a normalized one:
:meth:`PassContext.open_segments`). Passes never change structure: the renderer writes
replacement text at the segment's path and nothing else, so pairing, ids and order are
kept by construction.

Every replacement that drops information names the original by reference
(``cw:<12 hex>``); the condenser stores originals only for replacements it adopts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ctxwarden.model.parts import Path
from ctxwarden.store.base import content_digest, make_ref
from ctxwarden.tokens.counter import TokenCounter

__all__ = [
    "Pass",
    "PassContext",
    "Replacement",
    "Segment",
    "SegmentKind",
    "ref_for",
]

SegmentKind = Literal["tool_output", "tool_args", "assistant_text", "user_text"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One text of the request that a pass may look at (and, if eligible, replace)."""

    path: Path
    message_index: int
    position: int
    """Order among segments of the same kind (0 = oldest)."""
    kind: SegmentKind
    text: str
    tokens: int
    tool_name: str = ""
    command: str = ""
    call_id: str = ""
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Replacement:
    """New text for one segment, the transform that made it and the originals it names."""

    text: str
    transform: str
    originals: tuple[tuple[str, str], ...] = ()
    """``(ref, original text)`` pairs the replacement refers to."""
    kept_lines: tuple[str, ...] = ()
    """Lines of the original (error lines) that must stay visible."""
    lossless: bool = False
    witness: Path | None = None
    """A segment where error lines this replacement omits stay visible."""
    stored_refs: tuple[str, ...] = ()
    """References whose originals are already in the store: a replacement re-applied
    from the session state carries no originals but still names them."""
    joint: Path | None = None
    """Replacements proposed with the same ``joint`` (a result of several text blocks,
    masked as one output: its first block's path) are taken or left together, by what
    they save together: one of them alone may save nothing."""

    @property
    def refs(self) -> tuple[str, ...]:
        """Every reference the replacement's text relies on."""
        if not self.originals:  # a frozen one: re-applied for every request
            return self.stored_refs
        return tuple(ref for ref, _ in self.originals)


def ref_for(text: str) -> str:
    """The reference ``text`` will have in any store (content addressed)."""
    return make_ref(content_digest(text))


@dataclass(slots=True)
class PassContext:
    """What a pass may read: all segments, which are eligible, counts and the budget."""

    segments: list[Segment]
    eligible: frozenset[Path]
    recent: frozenset[Path]
    """Eligible tool outputs inside the recency budget: the lossy passes (but the
    truncation guardrail) and dedupe leave them, so the agent's latest observations stay
    shown in full (a dedupe note would point at a copy a lossy pass may condense).
    Normalization, which keeps their content, and supersession by a newer run apply."""
    relevant: frozenset[Path]
    """Outputs the recent turns are working on (kept in full by lossy passes)."""
    counter: TokenCounter
    visible: frozenset[str] = frozenset()
    """Distinctive strings shown outside tool outputs (the agent's own messages)."""
    tokens_to_save: int | None = None
    """Early-exit target: the pipeline stops once this many tokens are saved."""
    settled: frozenset[Path] = frozenset()
    """Segments whose replacement is sure to be sent this turn (adopted in an earlier
    step, or proposed in a step that is forced); a normalization among them may still be
    replaced by a lossy pass in a later step. Any other replacement is a proposal: the
    planner adopts the proposals from some message onward, so one proposal may rely on
    another only when that one is newer."""
    restating: frozenset[str] = frozenset()
    """Transforms whose replacement restates the whole text (normalization): a lossy
    pass may still condense a segment one of them replaced (see :meth:`open_segments`)."""
    by_path: dict[Path, Segment] = field(default_factory=dict)
    """Every segment by its path (filled from ``segments`` unless given)."""
    _eligible_by_kind: dict[str, list[Segment]] = field(default_factory=dict, repr=False)
    _eligible_segments: list[Segment] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.by_path:
            self.by_path = {s.path: s for s in self.segments}

    def open_segments(
        self,
        decided: Mapping[Path, Replacement],
        kind: SegmentKind = "tool_output",
        *,
        past_restated: bool = False,
    ) -> list[Segment]:
        """Eligible segments of ``kind`` that no pass has replaced yet, oldest first
        (the eligible ones of each kind are listed once per request, every pass asks).

        ``past_restated``: also those whose replacement only restates their text (a
        :attr:`restating` transform), for a lossy pass: a normalized output is nearly
        as long as the original, and an old one must still be masked or truncated. The
        condenser takes such a proposal only when it saves more than the restatement."""
        of_kind = self._eligible_by_kind.get(kind)
        if of_kind is None:
            if self._eligible_segments is None:  # every kind's: each path looked up once
                eligible = self.eligible
                self._eligible_segments = [s for s in self.segments if s.path in eligible]
            of_kind = self._eligible_by_kind[kind] = [
                s for s in self._eligible_segments if s.kind == kind
            ]
        if past_restated and self.restating:
            return [
                s
                for s in of_kind
                if (rep := decided.get(s.path)) is None or rep.transform in self.restating
            ]
        return [s for s in of_kind if s.path not in decided]


class Pass(Protocol):
    """A condensation pass: proposes replacements for open eligible segments."""

    name: str

    def __call__(
        self, ctx: PassContext, decided: Mapping[Path, Replacement]
    ) -> dict[Path, Replacement]: ...
