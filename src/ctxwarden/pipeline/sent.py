"""What a request is as sent: each message's element hash and tokens once the
replacements are written into it.

The planner compares the elements of what it sends with those of the previous request
(the prompt cache reads as far as they agree) and prices both, so every request works
out how its replacements change its messages. A rewritten message's hash is the digest
of its exact hash and its replacements' texts (by JSON pointer), the same on every
process (session states store it). Between compaction steps a session's requests
re-apply the same replacements to the same messages, so the last answer per session is
kept and reused while it provably holds: the same replacements, every message they
touch unchanged. Both memos only save work.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ctxwarden.errors import json_pointer
from ctxwarden.memo import (
    MESSAGE_MEMO_BYTES,
    MESSAGE_MEMO_LIMIT,
    OBJECT_BYTES,
    SESSION_MEMO_BYTES,
    SESSION_MEMO_LIMIT,
    BoundedMemo,
)
from ctxwarden.model.hashing import digest
from ctxwarden.model.parts import Path
from ctxwarden.passes.base import Replacement, Segment
from ctxwarden.pipeline.costs import common_prefix
from ctxwarden.pipeline.rewrite import texts_of, writes_texts

__all__ = ["Changes", "SentElements"]

Changes = Mapping[int, tuple[str, int]]
"""Per message index that replacements rewrite: its element hash as sent and the
tokens they save in it (read only: it may be a kept answer)."""


@dataclass(frozen=True, slots=True)
class _Last:
    """A session's last answer: the replacements' texts (all the changes depend on),
    the exact element hashes up to the last message they rewrite, and the changes."""

    texts: dict[Path, str]
    hashes: list[str]
    changes: dict[int, tuple[str, int]]

    def holds(self, exact_hashes: list[str], applied: dict[Path, Replacement]) -> bool:
        """Whether the changes are those of ``applied`` on ``exact_hashes``."""
        return writes_texts(self.texts, applied) and common_prefix(
            self.hashes, exact_hashes
        ) == len(self.hashes)


class SentElements:
    """The changes replacements make to a request's elements (see module doc); one per
    condenser, safe to use from several threads."""

    def __init__(self) -> None:
        self._hashes: BoundedMemo[tuple[str, frozenset[tuple[Path, str]]], str] = BoundedMemo(
            MESSAGE_MEMO_LIMIT, MESSAGE_MEMO_BYTES
        )
        """A rewritten message's element hash by its exact hash and its replacements."""
        self._last: BoundedMemo[str, _Last] = BoundedMemo(
            SESSION_MEMO_LIMIT, SESSION_MEMO_BYTES // 4
        )
        """The last answer per session (the key a segment walk is cached under)."""

    def changes(
        self,
        session: str,
        exact_hashes: list[str],
        applied: dict[Path, Replacement],
        segment: Callable[[Path], Segment | None],
        saved: Callable[[Path, Replacement], int],
    ) -> Changes:
        """How ``applied`` changes the elements ``exact_hashes`` (the head first):
        ``segment`` finds a replacement's segment (one it does not find changes
        nothing), ``saved`` counts what a replacement saves. The session's last answer
        is reused when ``applied`` writes the same texts at the same paths and each
        message it rewrote is unchanged (its segments, and so what each replacement
        saves, are then too: ``session`` names the tokenizer and the API as well)."""
        last = self._last.get(session, None)
        if last is not None and last.holds(exact_hashes, applied):
            return last.changes
        per_message: dict[int, list[tuple[Path, Replacement]]] = defaultdict(list)
        for path, rep in applied.items():
            found = segment(path)
            if found is not None:
                per_message[found.message_index].append((path, rep))
        changes = {
            index: (self._hash(exact_hashes[index + 1], reps), sum(saved(p, r) for p, r in reps))
            for index, reps in per_message.items()
        }
        if sum(map(len, per_message.values())) == len(applied):  # none left out: kept
            covered = exact_hashes[: max(per_message, default=-1) + 2]
            texts = texts_of(applied)
            weight = OBJECT_BYTES * (2 * len(texts) + len(covered) + 4 * len(changes) + 1)
            weight += sum(map(len, texts.values()))
            self._last.put(session, _Last(texts, covered, changes), weight)
        return changes

    def _hash(self, exact: str, reps: list[tuple[Path, Replacement]]) -> str:
        """The element hash of the message ``exact`` with ``reps`` written in."""
        key = (exact, frozenset((p, r.text) for p, r in reps))
        sent = self._hashes.get(key, None)
        if sent is None:
            ordered = sorted(reps, key=lambda pr: json_pointer(pr[0]))
            blob = exact.encode() + b"".join(b"\x00" + r.text.encode() for _, r in ordered)
            sent = self._hashes.put(key, digest(blob), len(blob) + 256)
        return sent

    @staticmethod
    def apply(
        exact_hashes: list[str], exact_tokens: list[int], changes: Changes
    ) -> tuple[list[str], list[int]]:
        """The element hashes and tokens of the request as sent."""
        hashes, tokens = list(exact_hashes), list(exact_tokens)
        for index, (sent, saved) in changes.items():
            hashes[index + 1] = sent
            tokens[index + 1] -= saved
        return hashes, tokens
