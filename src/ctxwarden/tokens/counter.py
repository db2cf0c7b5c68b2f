"""Incremental token counting.

Agents resend their whole history every turn, so counts are memoized by content:
a text seen before is never encoded again. The memo is bounded (least recently used
entries are dropped past ``max_entries`` entries or ``max_bytes`` estimated bytes: a
text's characters plus about 150 bytes per entry; the bound takes its share of the
process's memo budget, :func:`ctxwarden.memo.set_memo_budget`).

Models with a public tokenizer are counted exactly; others (Anthropic and unknown
families) get a calibrated estimate from o200k counts with an explicit confidence.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwarden.errors import reraise_fatal
from ctxwarden.memo import register_budgeted, share
from ctxwarden.model.conversation import Conversation, Message
from ctxwarden.model.parts import (
    MediaPart,
    OpaquePart,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ctxwarden.tokens.encoding import get_encoding

__all__ = ["MESSAGE_OVERHEAD", "TokenCounter", "TokenizerSpec"]

MESSAGE_OVERHEAD = 4

_TEXT_ENTRY_BYTES = 150
"""About what a memoized text costs besides its characters (string header, ordered
dict node, count)."""

_MESSAGE_ENTRY_BYTES = 200
"""About what a memoized message count costs (key tuple, item hash string, count)."""
"""Tokens a chat format adds per message (role and separators)."""
MEDIA_TOKENS = 765
"""Flat estimate for an image or file reference (a high-detail 512px tile set)."""


@dataclass(frozen=True, slots=True)
class TokenizerSpec:
    """Which encoding counts a model, the scale applied, and how sure the count is."""

    encoding: str = "o200k_base"
    scale: float = 1.0
    confidence: float = 1.0

    @property
    def exact(self) -> bool:
        return self.scale == 1.0 and self.confidence >= 1.0


_DIGEST_CHARS = 65_536
"""Texts longer than this are memoized by a digest of their bytes, not by the text: a
history holding tens of megabytes of outputs would otherwise outweigh the memo's share
and have every large text counted again on every request (a 60 MB history: 6 s a
request). The digest reads the text at about 1 GB/s; the tokenizer at about 4 MB/s."""
_DIGEST_ENTRY_BYTES = 120

_WHOLE_CHARS = 200_000
"""Texts up to this length are encoded whole; longer ones in pieces (see
:meth:`TokenCounter._encoded_length`)."""
_PIECE_CHARS = 10_000
_CUT_WINDOW = 1_000
"""A piece ends at the last space or line break within this many characters of its
end (a hard cut where there is none)."""


class TokenCounter:
    """Counts tokens of texts, messages and conversations, memoized by content."""

    def __init__(
        self,
        spec: TokenizerSpec | None = None,
        *,
        max_entries: int = 200_000,
        max_bytes: int = 96_000_000,
    ) -> None:
        self.spec = spec or TokenizerSpec()
        self._encoding = get_encoding(self.spec.encoding)
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._digest_memo: OrderedDict[bytes, int] = OrderedDict()
        """Counts of texts over :data:`_DIGEST_CHARS`, by digest."""
        self._message_memo: dict[tuple[str, str], int] = {}
        """Message counts by API and item hash: one item JSON parses differently per API."""
        self._max_entries = max_entries
        self._own_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()
        """Held to store and evict; a lookup takes none (another thread may evict)."""
        self.hits = 0
        self.misses = 0
        register_budgeted(self)

    @property
    def own_bytes(self) -> int:
        return self._own_bytes

    @property
    def weight(self) -> int:
        return (
            self._bytes
            + _MESSAGE_ENTRY_BYTES * len(self._message_memo)
            + _DIGEST_ENTRY_BYTES * len(self._digest_memo)
        )

    def trim(self) -> None:
        with self._lock:
            self._evict(share(self._own_bytes))

    @property
    def confidence(self) -> float:
        return self.spec.confidence

    def _raw(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > _DIGEST_CHARS:  # memoized by digest: see _DIGEST_CHARS
            key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16)
            return self._memoized(self._digest_memo, key.digest(), text, 0)
        return self._memoized(self._memo, text, text, len(text) + _TEXT_ENTRY_BYTES)

    def _memoized(self, memo: OrderedDict[Any, int], key: Any, text: str, weight: int) -> int:
        """Tokens of ``text``, kept in ``memo`` under ``key`` (least recently used
        last); a new entry adds ``weight`` bytes to :attr:`weight` (a digest entry's are
        counted by number instead)."""
        cached = memo.get(key)
        if cached is not None:
            self.hits += 1
            try:  # noqa: SIM105 - no context manager per hit: every text of every request
                memo.move_to_end(key)
            except KeyError:  # evicted meanwhile by another thread
                pass
            return cached
        self.misses += 1
        n = self._encoded_length(text)
        with self._lock:
            if key not in memo:
                memo[key] = n
                self._bytes += weight
            self._evict(share(self._own_bytes))
        return n

    def _encoded_length(self, text: str) -> int:
        """Tokens of ``text``. A text over :data:`_WHOLE_CHARS` is counted in pieces of
        about :data:`_PIECE_CHARS`, each ending at whitespace where there is some near
        its end (a few tokens off per megabyte, 0.01% on the corpus's large outputs):
        whole, the tokenizer's native code takes time that grows faster than the text
        on a long run of one kind of character (20 MB of one letter: 35 s; in pieces
        3 s) and panics on a run of about a million spaces (a ``PanicException``, no
        ``Exception``). Any text the tokenizer fails on is counted in pieces too."""
        if len(text) > _WHOLE_CHARS:
            return self._length_in_pieces(text)
        try:
            return len(self._encoding.encode_ordinary(text))
        except BaseException as exc:  # a panic in the tokenizer's native code
            reraise_fatal(exc)
            return self._length_in_pieces(text)

    def _length_in_pieces(self, text: str) -> int:
        total = start = 0
        while start < len(text):
            end = min(start + _PIECE_CHARS, len(text))
            if end < len(text):
                cut = max(text.rfind(" ", end - _CUT_WINDOW, end),
                          text.rfind("\n", end - _CUT_WINDOW, end))  # fmt: skip
                if cut > start:
                    end = cut
            total += len(self._encoding.encode_ordinary(text[start:end]))
            start = end
        return total

    def _evict(self, max_bytes: int) -> None:
        """Drop the oldest message counts past half of ``max_bytes``, then the least
        recently used texts past the bounds (the lock is held)."""
        memo = self._memo
        messages = self._message_memo
        while messages and _MESSAGE_ENTRY_BYTES * len(messages) > max_bytes // 2:
            messages.pop(next(iter(messages)), None)
        digests = self._digest_memo
        while digests and (
            len(digests) > self._max_entries or _DIGEST_ENTRY_BYTES * len(digests) > max_bytes // 4
        ):
            digests.popitem(last=False)
        while memo and (len(memo) > self._max_entries or self.weight > max_bytes):
            evicted, _ = memo.popitem(last=False)
            self._bytes -= len(evicted) + _TEXT_ENTRY_BYTES

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` (scaled for estimated tokenizers)."""
        n = self._raw(text)
        return n if self.spec.scale == 1.0 else round(n * self.spec.scale)

    def count_part(self, part: Part, wire_value: object = None) -> int:
        """Tokens of one part; opaque parts are counted from their JSON if given."""
        match part:
            case TextPart():
                return self.count_text(part.text)
            case ToolCallPart():
                return 3 + self.count_text(part.name) + self.count_text(part.arguments)
            case ToolResultPart():
                return sum(self.count_part(p) for p in part.content)
            case ReasoningPart():
                return self.count_text(part.text)
            case MediaPart():
                return MEDIA_TOKENS
            case OpaquePart():
                if wire_value is not None:
                    return self.count_text(orjson.dumps(wire_value).decode())
                return self.count_text(part.raw_json)
        return 0  # pragma: no cover - exhaustive above

    def count_message(self, message: Message) -> int:
        """Tokens of one message, overhead included."""
        return MESSAGE_OVERHEAD + sum(self.count_part(p) for p in message.parts)

    def element_tokens(
        self, conversation: Conversation, hashes: list[str] | None = None
    ) -> list[int]:
        """Tokens per element of a request: the head (system, tool schemas, framing)
        first, then one entry per message. With the request's element ``hashes``
        (:func:`ctxwarden.model.hashing.element_hashes`) a message seen before costs one
        lookup."""
        head = 3 + sum(self.count_part(p) for p in conversation.system)
        tools = conversation.wire.get("tools")
        if tools:
            head += self.count_text(orjson.dumps(tools).decode())
        if hashes is None or len(hashes) != len(conversation.messages) + 1:
            return [head, *(self.count_message(m) for m in conversation.messages)]
        out = [head]
        memo = self._message_memo
        api = conversation.api
        for message, item_hash in zip(conversation.messages, hashes[1:], strict=True):
            key = (api, item_hash)
            n = memo.get(key)
            if n is None:
                n = self.count_message(message)
                with self._lock:
                    memo[key] = n
                    if len(memo) > self._max_entries:
                        memo.pop(next(iter(memo)), None)
            out.append(n)
        return out

    def count_conversation(self, conversation: Conversation) -> int:
        """Tokens of a whole request: system, messages and tool schemas."""
        return sum(self.element_tokens(conversation))
