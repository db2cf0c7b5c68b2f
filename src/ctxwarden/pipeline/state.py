"""Per-session planner state, kept in the store so replicas and restarts agree.

The state records, for the last request of a session: the element hashes and token
counts of the original and of what was sent (element 0 is the head: system, tools),
the adopted replacement of every condensed segment, and a cost ledger. It is encoded
as JSON; an unreadable state is treated as absent (a fresh session).

Replicas of different versions share states during a rolling deploy, so the format
only grows by new top-level keys, which older versions ignore: a decision is still a
five-element list, and the turn each was adopted on is kept beside them (``adopted``;
a state without it counts every decision as adopted on the previous turn, which makes
the next request read their originals back once), as is the segment each points to
(``witness``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from ctxwarden.model.hashing import item_digest

__all__ = ["Decision", "SessionState"]

STATE_VERSION = 1


@dataclass(slots=True)
class Decision:
    """An adopted replacement: its text, the transform, refs and the original's ref."""

    text: str
    transform: str
    original_ref: str
    refs: list[str]
    saved: int
    adopted: int = -1
    """The session turn whose step adopted it (the next request re-reads its originals;
    ``-1``: unknown, from a state written without it)."""
    witness: tuple[str, str] | None = None
    """Key and text digest of the segment the replacement points to (a duplicate's
    first copy, a superseded run's newest): it holds only while that segment still
    reads the same. The digest is the condenser's ``witness_digest`` (96 bits); a state
    written before it holds the segment's ``cw:`` reference, compared as such (an older
    replica reading the longer digest takes the witness past the unchanged prefix as
    changed: its decision is made anew, never kept wrongly)."""


@dataclass(slots=True)
class SessionState:
    exact_hashes: list[str] = field(default_factory=list)
    exact_tokens: list[int] = field(default_factory=list)
    sent_hashes: list[str] = field(default_factory=list)
    sent_tokens: list[int] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    turns: int = 0
    steps: int = 0
    cum_exact: dict[str, float] = field(default_factory=dict)
    cum_sent: dict[str, float] = field(default_factory=dict)
    risk_until: int = 0
    """Turn until which an earlier step that pays back slowly is still unpaid: until
    then a further such step is not free (it must fit ``max_session_deficit``)."""
    as_sent_until: float = 0.0
    """Unix time until which the session's requests go as the client sends them (the
    provider refused its rewrite: :meth:`ctxwarden.Engine.forget_session`); every
    replica reading the state holds to it (a replica older than this key drops it
    when it writes the state: during a rolling deploy the hold may end early)."""
    dropped_thinking: list[str] = field(default_factory=list)
    """Keys of the thinking blocks the session no longer sends
    (:func:`ctxwarden.pipeline.thinking.block_key`): a step at a user turn of a model
    that binds thinking to its prefix rewrote a message before them, so they were left
    out, and every block written since follows that. Keyed by the blocks themselves, so
    they stay out wherever the client resends them (a re-prompted or rewound turn
    included) and no later block is ever taken for one. A replica older than this key
    drops it when it writes the state (the provider then refuses the session's next
    thinking once: the proxy resends it as sent)."""
    damaged: set[str] = field(default_factory=set)
    """Keys of decisions whose stored text no longer matches the digest written with
    it (a damaged row that is still valid JSON): never encoded; the condenser sends
    those segments original, as for a corrupt artifact."""

    def encode(self) -> bytes:
        data: dict[str, Any] = {
            "v": STATE_VERSION,
            "exact_hashes": self.exact_hashes,
            "exact_tokens": self.exact_tokens,
            "sent_hashes": self.sent_hashes,
            "sent_tokens": self.sent_tokens,
            "decisions": {
                k: [d.text, d.transform, d.original_ref, d.refs, d.saved]
                for k, d in self.decisions.items()
            },
            "adopted": {k: d.adopted for k, d in self.decisions.items()},
            "witness": {k: list(d.witness) for k, d in self.decisions.items() if d.witness},
            "digest": {k: decision_digest(d) for k, d in self.decisions.items()},
            "turns": self.turns,
            "steps": self.steps,
            "cum_exact": self.cum_exact,
            "cum_sent": self.cum_sent,
            "risk_until": self.risk_until,
        }
        if self.as_sent_until:
            data["as_sent_until"] = self.as_sent_until
        if self.dropped_thinking:
            data["dropped_thinking"] = self.dropped_thinking
        return orjson.dumps(data)

    @classmethod
    def decode(cls, raw: bytes | None) -> SessionState:
        """The state ``raw`` encodes; a fresh one when it is absent, unreadable, of
        another version or holds a value of the wrong type anywhere (a damaged row must
        not turn condensing off for the rest of its session)."""
        if not raw:
            return cls()
        try:
            data = orjson.loads(raw)
            if data.pop("v", None) != STATE_VERSION:
                return cls()
            adopted = data.pop("adopted", None) or {}
            witness = data.pop("witness", None) or {}
            digests = data.pop("digest", None) or {}
            unknown = int(data.get("turns", 0)) - 1
            data["decisions"] = {
                k: _decision(v, int(adopted.get(k, unknown)), witness.get(k))
                for k, v in data["decisions"].items()
            }
            known = {f.name for f in fields(cls)}  # a newer replica's extra keys are ignored
            state = cls(**{k: v for k, v in data.items() if k in known})
            if not _well_typed(state):
                return cls()
            state.damaged = {  # a state written without digests is taken as it is
                k for k, d in state.decisions.items()
                if k in digests and digests[k] != decision_digest(d)
            }  # fmt: skip
            return state
        except (
            orjson.JSONDecodeError,
            TypeError,
            KeyError,
            AttributeError,
            ValueError,
            IndexError,
        ):
            return cls()


def decision_digest(decision: Decision) -> str:
    """A digest of what a decision sends (its text, transform, original and refs),
    written with it and checked when it is read back (memoized: a session's decisions
    are digested on every request)."""
    return _digest(decision.text, decision.transform, decision.original_ref, tuple(decision.refs))


@functools.lru_cache(maxsize=2048)
def _digest(text: str, transform: str, original_ref: str, refs: tuple[str, ...]) -> str:
    return item_digest([text, transform, original_ref, list(refs)])


def _decision(stored: list[Any], adopted: int, witness: list[str] | None) -> Decision:
    """A decision from its stored five-element list (text, transform, original ref,
    refs, saved tokens), its adoption turn and its witness."""
    text, transform, original_ref, refs, saved = stored[:5]
    seen = (str(witness[0]), str(witness[1])) if witness and len(witness) == 2 else None
    return Decision(text, transform, original_ref, refs, saved, adopted, seen)


def _ints(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def _strs(values: Any) -> bool:
    return isinstance(values, list) and all(isinstance(v, str) for v in values)


def _numbers(values: Any) -> bool:
    return isinstance(values, dict) and all(
        isinstance(k, str) and type(v) in (int, float) for k, v in values.items()
    )


def _well_typed(state: SessionState) -> bool:
    """Whether every field of a decoded ``state`` has the type the planner reads."""
    return (
        _strs(state.exact_hashes)
        and _ints(state.exact_tokens)
        and len(state.exact_hashes) == len(state.exact_tokens)
        and _strs(state.sent_hashes)
        and _ints(state.sent_tokens)
        and len(state.sent_hashes) == len(state.sent_tokens)
        and all(type(n) is int for n in (state.turns, state.steps, state.risk_until))
        and type(state.as_sent_until) in (int, float)
        and _strs(state.dropped_thinking)
        and _numbers(state.cum_exact)
        and _numbers(state.cum_sent)
        and all(
            isinstance(k, str)
            and isinstance(d.text, str)
            and d.text  # the validator never lets an empty replacement out
            and isinstance(d.transform, str)
            and isinstance(d.original_ref, str)
            and _strs(d.refs)
            and type(d.saved) in (int, float)
            for k, d in state.decisions.items()
        )
    )
