"""Integrity of a condensed request against its original: every violation counted.

Categories (each a count per request):

- ``json``: the condensed request does not serialize, or its API adapter rejects it;
- ``fields``: a top-level field other than the message list changed (model, tools,
  system / instructions, ``previous_response_id``, ...);
- ``order``: the number of message items changed (counted once), or an item's role
  or type changed (once per item);
- ``ids``: an item's tool calls / results (ids, names, order) changed;
- ``pairing``: a tool call id left without its result, or a result without an
  earlier call, that the original did not already have;
- ``protected``: a system / developer message, the first user message or a message
  after the last assistant message is not byte-identical;
- ``shape``: a changed item differs in anything but its text payload (``content``,
  ``text``, ``output``, ``arguments``, a custom tool call's ``input``, a patch's
  ``diff``, a shell output's ``stdout`` / ``stderr`` strings and the strings inside an
  Anthropic call's ``input`` object): a
  key added or removed, a type, an id, a content list turned into a string; or
  tool-call arguments that were JSON are JSON no more (checked when the rewrite of an
  item is new).

Only items whose rendered bytes differ are inspected, so an unchanged request costs
one comparison per item.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ctxwarden.adapters import get_adapter
from ctxwarden.errors import CtxwardenError
from ctxwarden.model.conversation import newest_start
from ctxwarden.replay.view import MessageInfo, Step
from ctxwarden.replay.wire import MESSAGE_KEYS

__all__ = ["CATEGORIES", "check_integrity", "protected_positions", "unpaired_ids"]

CATEGORIES = ("json", "fields", "order", "ids", "pairing", "protected", "shape")

_PAYLOAD_KEYS = frozenset(
    {"content", "text", "output", "arguments", "input", "diff", "stdout", "stderr"}
)
"""Keys whose string values a pass may rewrite; everything else of an item is exact."""


def protected_positions(messages: Sequence[MessageInfo]) -> frozenset[int]:
    """System / developer items, the first user message, the newest messages (everything
    after the last assistant message, or from the one before a trailing prefill:
    :func:`ctxwarden.model.conversation.newest_start`)."""
    out: set[int] = set()
    first_user = False
    for i, m in enumerate(messages):
        if m.role in ("system", "developer"):
            out.add(i)
        elif m.role == "user" and not first_user and not any(k == "result" for k, *_ in m.skeleton):
            first_user = True
            out.add(i)
    out.update(range(newest_start([m.role for m in messages]), len(messages)))
    return frozenset(out)


def unpaired_ids(messages: Sequence[MessageInfo]) -> set[tuple[str, str]]:
    """``("result", id)`` for results without an earlier call, ``("call", id)`` for calls
    never answered."""
    calls: set[str] = set()
    answered: set[str] = set()
    out: set[tuple[str, str]] = set()
    for m in messages:
        for kind, cid, _ in m.skeleton:
            if kind == "call":
                calls.add(cid)
            elif cid in calls:
                answered.add(cid)
            else:
                out.add(("result", cid))
    out.update(("call", c) for c in calls - answered)
    return out


def _shape(node: Any, key: str | None = None, in_input: bool = False) -> Any:
    """``node`` with every rewritable text payload replaced by a marker: a string under
    a payload key, or any string inside an ``input`` object (an Anthropic call's
    arguments)."""
    if isinstance(node, str):
        return "\x00payload" if in_input or key in _PAYLOAD_KEYS else node
    if isinstance(node, dict):
        inner = in_input or key == "input"
        return {k: _shape(v, k, inner) for k, v in node.items()}
    if isinstance(node, list):
        return [_shape(v, key, in_input) for v in node]
    return node


def _arguments(node: Any) -> list[str]:
    """The ``arguments`` strings of an item (tool calls), in order."""
    if isinstance(node, dict):
        own = node.get("arguments")
        found = [own] if isinstance(own, str) else []
        return found + [a for k, v in node.items() if k != "arguments" for a in _arguments(v)]
    if isinstance(node, list):
        return [a for v in node for a in _arguments(v)]
    return []


_NOT_JSON = object()


def _json_or_not(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return _NOT_JSON


def _arguments_reshaped(before: str, after: str) -> bool:
    """Whether call arguments that were JSON are no longer JSON, or no longer JSON of
    the same shape: the same keys, list lengths and non-string values, strings aside
    (as an Anthropic call's ``input`` is checked)."""
    if before == after:
        return False
    old = _json_or_not(before)
    if old is _NOT_JSON:
        return False
    new = _json_or_not(after)
    return new is _NOT_JSON or _shape(old, in_input=True) != _shape(new, in_input=True)


def _shape_violations(before: Any, after: Any) -> int:
    """1 when ``after`` differs from ``before`` beyond its text payload, or reshaped
    JSON call arguments (:func:`_arguments_reshaped`); else 0."""
    if _shape(before) != _shape(after):
        return 1
    pairs = zip(_arguments(before), _arguments(after), strict=False)
    return int(any(_arguments_reshaped(a, b) for a, b in pairs))


def _probe(
    condensed: dict[str, Any], api: str, b: Sequence[MessageInfo], fresh: list[int], same: bool
) -> dict[str, Any]:
    """What the adapter must accept: the whole request, or - when only items changed and
    the skeleton did not - the header with the new items and the items holding their
    calls (the rest is byte-identical to an original the adapter accepted)."""
    if not same or any(b[i].role in ("system", "developer") for i in fresh):
        return condensed
    wanted = set(fresh)
    ids = {cid for i in fresh for kind, cid, _ in b[i].skeleton if kind == "result"}
    for j, m in enumerate(b):
        if any(kind == "call" and cid in ids for kind, cid, _ in m.skeleton):
            wanted.add(j)
    key = MESSAGE_KEYS.get(api, "messages")
    return {**condensed, key: [b[j].item for j in sorted(wanted)]}


def check_integrity(
    original: dict[str, Any],
    condensed: dict[str, Any],
    api: str,
    orig: Step,
    cond: Step,
    validated: set[bytes] | None = None,
) -> dict[str, int]:
    """Violations of ``condensed`` against ``original`` by category (empty when clean).

    ``validated`` (kept per session by the caller) holds keys of changed items already
    seen in a request the API adapter accepted; the adapter runs again only when a
    changed item is new or the skeleton changed, so a rewrite that is simply carried
    over from turn to turn is not re-parsed.
    """
    if condensed is original:
        return {}
    out: dict[str, int] = {}
    if cond.header_key != orig.header_key:
        out["fields"] = 1
    a, b = orig.messages, cond.messages
    changed = [i for i in range(min(len(a), len(b))) if a[i] is not b[i] and a[i].key != b[i].key]
    if len(a) != len(b):
        out["order"] = 1
    if not changed and len(a) == len(b):
        return out
    fresh = [i for i in changed if validated is None or b[i].key not in validated]
    if fresh or len(a) != len(b):
        try:
            orjson.dumps(condensed)
            get_adapter(api).parse(_probe(condensed, api, b, fresh, len(a) == len(b)))
            if validated is not None:
                validated.update(b[i].key for i in changed)
        except (TypeError, CtxwardenError):
            out["json"] = 1
    protected = protected_positions(a)
    skeleton_changed = len(a) != len(b)
    for i in changed:
        if (a[i].role, a[i].item_type) != (b[i].role, b[i].item_type):
            out["order"] = out.get("order", 0) + 1
        if a[i].skeleton != b[i].skeleton:
            out["ids"] = out.get("ids", 0) + 1
            skeleton_changed = True
        if i in protected:
            out["protected"] = out.get("protected", 0) + 1
    for i in fresh:  # a rewrite carried over unchanged was checked when it was new
        if _shape_violations(a[i].item, b[i].item):
            out["shape"] = out.get("shape", 0) + 1
    if len(b) < len(a):
        missing = [i for i in protected if i >= len(b)]
        if missing:
            out["protected"] = out.get("protected", 0) + len(missing)
    if skeleton_changed:
        extra = unpaired_ids(b) - unpaired_ids(a)
        if extra:
            out["pairing"] = len(extra)
    return out
