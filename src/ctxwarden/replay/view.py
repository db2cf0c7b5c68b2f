"""Incremental views of consecutive requests of one session.

Agents resend their whole history every turn, so everything the replay derives from
a message (its rendered bytes, tokens, distinctive strings, error lines) is computed
once per message object and reused: the original requests of a session share their
message dicts (``messages[:k]``), and the engine's contract keeps unchanged values
shared with its input. A :class:`RequestView` also keeps running multisets of the
strings visible in the current request, updated from the longest common message
prefix with the previous request, so a turn costs O(new messages), not O(history).

The per-message cache holds a reference to each message so that ``id()`` keys stay
valid; a second cache keyed by content serves messages the engine re-renders as new
objects every turn (its condensed ones). One view lives for one session of one
configuration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwarden.replay.signals import distinctive_tokens, error_lines
from ctxwarden.replay.wire import (
    MEDIA_PLACEHOLDER,
    header_of,
    item_role,
    item_skeleton,
    item_texts,
    items_of,
)
from ctxwarden.store.base import REF_PATTERN

__all__ = ["MEDIA_TOKENS", "MESSAGE_OVERHEAD", "MessageInfo", "RequestView", "Step"]

MESSAGE_OVERHEAD = 4
MEDIA_TOKENS = 765
HEADER_OVERHEAD = 3

CountText = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """What the replay knows about one rendered message (or the header)."""

    item: Any
    key: bytes
    tokens: int
    role: str
    item_type: str
    tool_tokens: frozenset[str]
    other_tokens: frozenset[str]
    errors: frozenset[str]
    tool_errors: frozenset[str]
    """Error lines of this message's tool-output texts (what the critical figure counts)."""
    skeleton: tuple[tuple[str, str, str], ...]
    refs: tuple[str, ...]
    text: str


def _digest(value: Any) -> bytes:
    return hashlib.blake2b(orjson.dumps(value), digest_size=16).digest()


_MARKUP = re.compile(r"\[ctxwarden: [^\n]*?\]|cw:[0-9a-f]{12}")
"""ctxwarden's own bookkeeping in a condensed text: its bracketed notes (``[ctxwarden:
condensed output; original cw:... (exit 0, 18 lines, 213 tokens)]``, ``[ctxwarden: 27
more lines in cw:...]``) and references. Their numbers and hex digits are no content
of the conversation: a ``18`` or ``95`` there must not count as a line number or value
the agent's next action could take from what it sees."""

_MENTIONS = re.compile(r"^\[mentions: .*$", re.MULTILINE)
"""A placeholder's list of the distinctive strings its output held."""


def seen_text(text: str, *, mention_credit: bool = True) -> str:
    """``text`` as support reads it for the strings it shows: without ctxwarden's
    bookkeeping (:data:`_MARKUP`), and with ``mention_credit`` false also without the
    placeholders' ``[mentions: ...]`` lines (a string listed there out of its context is
    then not taken as seen)."""
    if "ctxwarden: " in text or "cw:" in text:
        text = _MARKUP.sub(" ", text)
    if not mention_credit and "[mentions: " in text:
        text = _MENTIONS.sub(" ", text)
    return text


def describe(
    item: Any,
    count: CountText,
    *,
    overhead: int = MESSAGE_OVERHEAD,
    key: bytes | None = None,
    mention_credit: bool = True,
) -> MessageInfo:
    """Analyse one message item (or a header dict with ``overhead=HEADER_OVERHEAD``);
    ``key`` is the item's :func:`_digest` when the caller has it. Distinctive strings
    are read from :func:`seen_text`."""
    texts = item_texts(item)
    tool: set[str] = set()
    other: set[str] = set()
    errors: set[str] = set()
    tool_errors: set[str] = set()
    tokens = overhead
    for is_tool, text in texts:
        if text == MEDIA_PLACEHOLDER:
            tokens += MEDIA_TOKENS
            continue
        tokens += count(text)
        shown = seen_text(text, mention_credit=mention_credit)
        (tool if is_tool else other).update(distinctive_tokens(shown))
        found = error_lines(text)
        errors.update(found)
        if is_tool:
            tool_errors.update(found)
    joined = "\n".join(t for _, t in texts)
    return MessageInfo(
        item=item,
        key=_digest(item) if key is None else key,
        tokens=tokens,
        role=item_role(item),
        item_type=str(item.get("type", "message")) if isinstance(item, dict) else "text",
        tool_tokens=frozenset(tool),
        other_tokens=frozenset(other),
        errors=frozenset(errors),
        tool_errors=frozenset(tool_errors),
        skeleton=item_skeleton(item),
        refs=tuple(dict.fromkeys(REF_PATTERN.findall(joined))),
        text=joined,
    )


def _header_item(header: dict[str, Any]) -> dict[str, Any]:
    """The part of a header that is priced as input: system text and tool schemas."""
    out: dict[str, Any] = {}
    for key in ("system", "instructions"):
        if key in header:
            out[key] = header[key]
    if header.get("tools"):
        out["tools"] = orjson.dumps(header["tools"]).decode()
    return out


@dataclass(frozen=True, slots=True)
class Step:
    """One request as seen by a view."""

    header: MessageInfo
    header_key: bytes
    messages: tuple[MessageInfo, ...]
    common: int
    """Messages shared with the previous request (message-level prefix), header ignored."""
    cached_tokens: int
    """Tokens of the longest prefix shared with the previous request (header included)."""
    tokens: int


def _add(counter: dict[str, int], keys: frozenset[str], sign: int) -> None:
    for k in keys:
        n = counter.get(k, 0) + sign
        if n:
            counter[k] = n
        else:
            counter.pop(k, None)


class RequestView:
    """Consecutive requests of one session through one configuration (see module doc)."""

    def __init__(
        self,
        count: CountText,
        cache: dict[int, MessageInfo] | None = None,
        by_key: dict[bytes, MessageInfo] | None = None,
        *,
        mention_credit: bool = True,
    ) -> None:
        """Views sharing ``cache`` / ``by_key`` must share ``mention_credit`` too."""
        self._count = count
        self._mention_credit = mention_credit
        self._cache: dict[int, MessageInfo] = {} if cache is None else cache
        """Per-message infos by ``id``; views of one session may share one cache."""
        self._by_key: dict[bytes, MessageInfo] = {} if by_key is None else by_key
        """Per-message infos by content: a condensed message is re-rendered as a new
        object every turn, with the same content (shareable like ``cache``)."""
        self._headers: dict[bytes, MessageInfo] = {}
        self.prev: Step | None = None
        self.tool_tokens: dict[str, int] = {}
        """Multiset of distinctive strings in tool outputs of the current request."""
        self.other_tokens: dict[str, int] = {}
        """Multiset of distinctive strings elsewhere (header included)."""
        self.errors: dict[str, int] = {}
        """Multiset of error lines of the current request's messages."""
        self.tool_errors: dict[str, int] = {}
        """Multiset of error lines of the current request's tool outputs."""

    def info(self, item: Any) -> MessageInfo:
        found = self._cache.get(id(item))
        if found is not None and found.item is item:
            return found
        key = _digest(item)
        found = self._by_key.get(key)
        if found is None or found.item != item:  # equal content: the same analysis
            found = self._by_key[key] = describe(
                item, self._count, key=key, mention_credit=self._mention_credit
            )
        if found.item is item:
            self._cache[id(item)] = found
        return found

    def advance(self, request: Any, api: str) -> Step:
        """Account the next request of the session and return its step."""
        header = header_of(request, api)
        header_key = _digest(header)
        hinfo = self._headers.get(header_key)
        if hinfo is None:
            hinfo = describe(
                _header_item(header),
                self._count,
                overhead=HEADER_OVERHEAD,
                mention_credit=self._mention_credit,
            )
            self._headers[header_key] = hinfo
        items = items_of(request, api)
        prev = self.prev
        old: tuple[MessageInfo, ...] = prev.messages if prev else ()
        same = 0
        limit = min(len(old), len(items))
        while same < limit and old[same].item is items[same]:
            same += 1
        infos = old[:same] + tuple(self.info(item) for item in items[same:])
        common = same
        while common < limit and (
            old[common] is infos[common] or old[common].key == infos[common].key
        ):
            common += 1
        for gone in old[common:]:
            self._account(gone, -1)
        for new in infos[common:]:
            self._account(new, +1)
        if prev is None or prev.header is not hinfo:
            if prev is not None:
                _add(self.other_tokens, prev.header.other_tokens | prev.header.tool_tokens, -1)
            _add(self.other_tokens, hinfo.other_tokens | hinfo.tool_tokens, +1)
        total = hinfo.tokens + sum(m.tokens for m in infos)
        cached = 0
        if prev is not None and prev.header_key == header_key:
            cached = hinfo.tokens + sum(m.tokens for m in infos[:common])
        step = Step(hinfo, header_key, infos, common, cached, total)
        self.prev = step
        return step

    def _account(self, info: MessageInfo, sign: int) -> None:
        _add(self.tool_tokens, info.tool_tokens, sign)
        _add(self.other_tokens, info.other_tokens, sign)
        _add(self.errors, info.errors, sign)
        _add(self.tool_errors, info.tool_errors, sign)

    def visible(self, token: str) -> bool:
        """True when ``token`` is a distinctive string anywhere in the current request."""
        return token in self.tool_tokens or token in self.other_tokens
