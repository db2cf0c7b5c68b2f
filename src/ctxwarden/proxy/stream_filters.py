"""Streaming recall: per-API filters that hold back recall tool-call events.

A filter sees every SSE event of one upstream round and returns the bytes to
forward now. Everything that is not the recall tool streams through immediately
(except a Responses reasoning item, held until the next item shows whether it may be
shown: :mod:`.reasoning_links`, and a Chat tool call whose name so far could still be
the recall tool's: :meth:`ChatFilter._split_calls`); the recall tool's events are
swallowed, and the
round's final events (finish chunk, usage chunk and ``[DONE]``;
``message_delta``/``message_stop``; ``response.completed``) are held until the proxy
knows whether another round follows. Across rounds the
client sees one coherent stream: one opening event, indexes renumbered without gaps,
and the final events of the last round, with the stop reason patched when recall
calls were removed. When a round fails after the stream started, the filter gives
the error event the API's SDKs raise on (:meth:`StreamFilter.error_event`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ctxwarden.proxy.reasoning_links import is_reasoning, is_recall_call
from ctxwarden.proxy.recall import RECALL_TOOL_NAME, RecallCall, RoundResult
from ctxwarden.proxy.shapes import Family, error_body
from ctxwarden.proxy.sse import SSEEvent, encode_event

__all__ = ["FILTERS", "ChatFilter", "MessagesFilter", "ResponsesFilter", "StreamFilter"]


class StreamFilter:
    """Base: round bookkeeping shared by the three APIs."""

    family: Family = "openai"
    error_name: str | None = None  # the SSE event name of a mid-stream error

    def __init__(self) -> None:
        self.round = 0
        self.held: list[bytes] = []
        self.result = RoundResult()

    def start_round(self) -> None:
        """Called before each continuation round (not before the first). A round's
        final events are given only by the round itself: a continuation that fails or
        stops short ends the stream with an error (see ``round_ended``)."""
        self.round += 1
        self.held = []
        self.result = RoundResult()
        self.errored = False

    def process(self, event: SSEEvent) -> list[bytes]:
        raise NotImplementedError

    def round_result(self) -> RoundResult:
        return self.result

    def round_ended(self) -> bool:
        """Whether this round's stream reached its final events (a continuation that
        stops short, or with an upstream error event, must not be given the previous
        round's ending: the client would take a truncated answer for a complete one)."""
        raise NotImplementedError

    errored = False
    """An upstream error event passed through in this round."""

    def finish(self) -> list[bytes]:
        """The held final events, patched for the client (the stream ends after them)."""
        return self._patched()

    def _patched(self) -> list[bytes]:
        return self.held

    def error_event(self, status: int, body: bytes, message: str) -> bytes:
        """The event that ends a failed stream: ``body`` (an upstream error body) when
        it has the API's error shape, else an error of that shape saying ``message``."""
        return encode_event(self._error_payload(status, body, message), self.error_name)

    def _error_payload(self, status: int, body: bytes, message: str) -> dict[str, Any]:
        try:
            given = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            given = None
        if isinstance(given, dict) and isinstance(given.get("error"), dict):
            shaped: dict[str, Any] = given
            if self.family == "openai" or shaped.get("type") == "error":
                return shaped
        made: dict[str, Any] = orjson.loads(error_body(self.family, status, message))
        return made


_CHUNK_IDENTITY = ("id", "created", "model", "system_fingerprint", "service_tier")


class ChatFilter(StreamFilter):
    def __init__(self) -> None:
        super().__init__()
        self.identity: dict[str, Any] = {}
        """The first round's ``id``, ``created``, ``model``, ``system_fingerprint`` and
        ``service_tier``: every chunk of a stream carries the same (a later round's
        would show the recall rounds)."""
        self._role_sent = False  # the client gets the assistant role once
        self._reset()

    def round_ended(self) -> bool:
        return self._finished or self._done  # some servers end with [DONE] alone

    def start_round(self) -> None:
        super().start_round()
        self._reset()

    def _reset(self) -> None:
        self._finished = False
        self._done = False
        self._recall: dict[int, dict[str, str]] = {}
        self._others: dict[int, int] = {}
        self._pending: dict[int, list[dict[str, Any]]] = {}
        """Tool-call deltas held per index while its name may still become the recall
        tool's (see :meth:`_split_calls`)."""
        self._names: dict[int, str] = {}
        self._unindexed: tuple[int, str] | None = None
        """The index given to the call that deltas without an ``index`` belong to, and
        its id (some OpenAI-compatible servers send none: a new id starts a call)."""
        self._content: list[str] = []

    def process(self, event: SSEEvent) -> list[bytes]:
        obj = event.json()
        if event.data == "[DONE]":
            self._done = True
        if self._finished or event.data == "[DONE]":
            out = self._flush_pending()  # a stream that ends with no finish chunk
            self.held.append(event.raw if obj is None else self._retag(obj))
            return out
        if not isinstance(obj, dict):
            return [event.raw]
        if obj.get("error"):
            self.errored = True
        changed = self.round > 0
        for key in _CHUNK_IDENTITY:
            if key in obj and key not in self.identity:
                self.identity[key] = obj[key]
        choices = obj.get("choices") or []
        announces = False  # this chunk carries the role the client has not had yet
        for choice in choices:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            announces = "role" in delta and not self._role_sent
            if "role" in delta and self._role_sent:  # a later round's opening chunk
                delta = {k: v for k, v in delta.items() if k != "role"}
                choice["delta"] = delta
                changed = True
            if isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            calls = delta.get("tool_calls")
            if (calls and isinstance(calls, list)) or (
                choice.get("finish_reason") and self._pending
            ):
                given = calls if isinstance(calls, list) else []
                kept = self._split_calls(given)
                if choice.get("finish_reason"):  # every call is whole by now
                    kept += self._release_pending()
                if len(kept) != len(given) or kept != given:
                    changed = True
                    delta = {k: v for k, v in delta.items() if k != "tool_calls"}
                    if kept:
                        delta["tool_calls"] = kept
                    choice["delta"] = delta
            if choice.get("finish_reason"):
                self._finished = True
                if not kept_anything(delta):  # held: sent only if this round is the last
                    self.held.append(self._retag(obj))
                    return []
                # text or a client call in the closing chunk (some providers send it
                # all at once): it goes out now, without usage; only the finish (with
                # usage, without logprobs) waits for the round's outcome
                finish = choice["finish_reason"]
                choice["finish_reason"] = None
                now = self._retag({k: v for k, v in obj.items() if k != "usage"})
                choice["finish_reason"], choice["delta"] = finish, {}
                choice.pop("logprobs", None)
                self.held.append(self._retag(obj))
                return self._sent([now], announces)
            if changed and not kept_anything(delta) and not choice.get("logprobs"):
                if announces:  # the role still goes out, alone
                    return self._sent([self._retag(obj)], announces)
                return []
        return self._sent([self._retag(obj) if changed else event.raw], announces)

    def _sent(self, chunks: list[bytes], announces: bool) -> list[bytes]:
        self._role_sent = self._role_sent or announces
        return chunks

    def _split_calls(self, calls: list[Any]) -> list[Any]:
        """The tool-call deltas of a chunk the client gets now (renumbered without the
        recall calls). Calls are gathered per ``index`` as the openai SDK gathers
        them: name and argument pieces joined, the id kept once given; a name the
        server repeats whole on every delta (some OpenAI-compatible ones do) counts
        once. The deltas of an index are held while its name so far is empty or a
        prefix of the recall tool's, until the name tells (it is the recall tool's,
        or cannot become it) or the call is whole (a later index starts, the finish
        chunk, the end): then a recall call's deltas are swallowed and a client
        call's go out as they came, so the client never sees a recall call, nor a
        call without its name, id or first argument pieces."""
        kept: list[Any] = []
        for call in calls:
            if not isinstance(call, dict):
                kept.append(call)
                continue
            index = self._index_of(call)
            if index in self._others:
                kept.append(self._renumbered(index, call))
            elif index in self._recall:
                self._gather(index, call)
            else:
                for earlier in [i for i in self._pending if i != index]:
                    kept += self._release(earlier)  # a later call started: it is whole
                self._pending.setdefault(index, []).append(call)
                fn = call.get("function")
                piece = fn.get("name") if isinstance(fn, dict) else None
                name = self._names.get(index, "")
                if isinstance(piece, str) and piece and piece != name:  # not a repeat
                    name += piece
                self._names[index] = name
                if name == RECALL_TOOL_NAME:
                    self._recall[index] = {"id": "", "args": ""}
                    for held in self._pending.pop(index):
                        self._gather(index, held)
                elif name and not RECALL_TOOL_NAME.startswith(name):
                    kept += self._release(index)
        return kept

    def _index_of(self, call: dict[str, Any]) -> int:
        """The call index of a tool-call delta: its ``index``, or for a delta without one,
        the index of the call its id (or, with no id, the last such call) names; a new id
        is a new call, after every index seen in this round."""
        index = call.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        new_id = call.get("id")
        if self._unindexed is not None and (
            not isinstance(new_id, str) or not new_id or new_id == self._unindexed[1]
        ):
            return self._unindexed[0]
        seen = [*self._others, *self._recall, *self._pending]
        number = max(seen, default=-1) + 1
        self._unindexed = (number, new_id if isinstance(new_id, str) else "")
        return number

    def _gather(self, index: int, call: dict[str, Any]) -> None:
        """Add a delta of the recall call at ``index``: the id once, argument pieces."""
        entry = self._recall[index]
        if not entry["id"] and isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        fn = call.get("function")
        pieces = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(pieces, str):
            entry["args"] += pieces

    def _renumbered(self, index: int, call: dict[str, Any]) -> dict[str, Any]:
        mapped = self._others[index]
        return call if mapped == index else {**call, "index": mapped}

    def _release(self, index: int) -> list[dict[str, Any]]:
        """The held deltas of the call at ``index``, a client's call after all."""
        self._others.setdefault(index, len(self._others))
        return [self._renumbered(index, call) for call in self._pending.pop(index, [])]

    def _release_pending(self) -> list[dict[str, Any]]:
        """Every held call's deltas, in the order the calls started (they are whole)."""
        out: list[dict[str, Any]] = []
        for index in list(self._pending):
            out += self._release(index)
        return out

    def _flush_pending(self) -> list[bytes]:
        """A chunk carrying the calls still held, for a stream ending without a finish
        chunk that released them (none when nothing is held)."""
        calls = self._release_pending()
        if not calls:
            return []
        chunk = {**self.identity, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"tool_calls": calls},
                              "finish_reason": None}]}  # fmt: skip
        return [encode_event(chunk)]

    def _retag(self, obj: dict[str, Any]) -> bytes:
        """A chunk with the stream's identity (:attr:`identity`) where it has its own."""
        differs = {k: v for k, v in self.identity.items() if k in obj and obj[k] != v}
        return encode_event({**obj, **differs} if differs else obj)

    def round_result(self) -> RoundResult:
        for index, entry in self._recall.items():  # a server that gave no id: one made
            entry["id"] = entry["id"] or f"call_{RECALL_TOOL_NAME}_{index}"
        calls = [RecallCall(c["id"], c["args"]) for c in self._recall.values()]
        tool_calls = [
            {"id": c["id"], "type": "function",
             "function": {"name": RECALL_TOOL_NAME, "arguments": c["args"]}}
            for c in self._recall.values()
        ]  # fmt: skip
        content = "".join(self._content) or None
        assistant = {"role": "assistant", "content": content, "tool_calls": tool_calls}
        others = len(self._others) + len(self._pending)  # held ones: a stream cut short
        return RoundResult(calls, others, assistant)

    def _patched(self) -> list[bytes]:
        if not self._recall or self._others:
            return self.held
        out = []
        for raw in self.held:
            if b'"tool_calls"' in raw:
                obj = orjson.loads(raw.split(b"data: ", 1)[1])
                for choice in obj.get("choices") or []:
                    if choice.get("finish_reason") == "tool_calls":
                        choice["finish_reason"] = "stop"
                raw = encode_event(obj)
            out.append(raw)
        return out


def kept_anything(delta: dict[str, Any]) -> bool:
    return any(v not in (None, "", []) for k, v in delta.items() if k != "role")


class MessagesFilter(StreamFilter):
    family = "anthropic"
    error_name = "error"

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0  # next client-visible block index
        self._map: dict[int, int] = {}
        self._recall: set[int] = set()
        self._blocks: dict[int, dict[str, Any]] = {}
        self._args: dict[int, list[str]] = {}

    def start_round(self) -> None:
        super().start_round()
        self._map, self._recall, self._blocks, self._args = {}, set(), {}, {}
        self._stopped = False
        self._start_usage = None

    _stopped = False
    _start_usage: dict[str, Any] | None = None
    """The usage a later round's (swallowed) ``message_start`` reported: its input
    figures go into the final ``message_delta``, so a stream tells the last round's
    context size, as the whole answer does."""

    def round_ended(self) -> bool:
        return self._stopped

    def process(self, event: SSEEvent) -> list[bytes]:
        obj = event.json()
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind == "error":
            self.errored = True
        if kind == "message_start":
            if self.round == 0:
                return [event.raw]
            message = obj.get("message") if isinstance(obj, dict) else None
            usage = message.get("usage") if isinstance(message, dict) else None
            self._start_usage = dict(usage) if isinstance(usage, dict) else None
            return []
        if kind in ("message_delta", "message_stop"):
            self._stopped = self._stopped or kind == "message_stop"
            self.held.append(event.raw)
            return []
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return [event.raw]
        assert isinstance(obj, dict)
        index = obj.get("index", 0)
        if kind == "content_block_start":
            block = dict(obj.get("content_block") or {})
            self._blocks[index] = block
            if block.get("type") == "tool_use" and block.get("name") == RECALL_TOOL_NAME:
                self._recall.add(index)
            else:
                self._map[index] = self.offset
                self.offset += 1
        elif kind == "content_block_delta":
            self._accumulate(index, obj.get("delta") or {})
        if index in self._recall:
            return []
        mapped = self._map.get(index, index)
        return [event.raw if mapped == index else encode_event({**obj, "index": mapped}, kind)]

    def _accumulate(self, index: int, delta: dict[str, Any]) -> None:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
        elif kind == "input_json_delta":
            self._args.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")

    def round_result(self) -> RoundResult:
        blocks = []
        result = RoundResult()
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if str(block.get("type")) in _TOOL_USE_BLOCKS:  # their input came as JSON deltas
                args = "".join(self._args.get(index, [])) or "{}"
                try:
                    block["input"] = orjson.loads(args)
                except orjson.JSONDecodeError:
                    block["input"] = {}
                if index in self._recall:
                    result.calls.append(RecallCall(str(block.get("id")), args))
                elif block.get("type") == "tool_use":  # server tools ran upstream
                    result.other_calls += 1
            blocks.append(block)
        result.assistant = blocks
        return result

    def _patched(self) -> list[bytes]:
        end_turn = bool(self._recall) and not any(
            b.get("type") == "tool_use" for i, b in self._blocks.items() if i not in self._recall
        )
        started = {k: v for k, v in (self._start_usage or {}).items() if k != "output_tokens"}
        if not end_turn and not started:
            return self.held
        out = []
        for raw in self.held:
            event = _reparse(raw)
            obj = event.json()
            if isinstance(obj, dict) and obj.get("type") == "message_delta":
                patched = dict(obj)
                delta = obj.get("delta") or {}
                if end_turn and delta.get("stop_reason") == "tool_use":
                    patched["delta"] = {**delta, "stop_reason": "end_turn"}
                given = obj.get("usage")
                if started and isinstance(given, dict | None):
                    own = {k: v for k, v in (given or {}).items() if v is not None}
                    patched["usage"] = {**started, **own}  # the delta's own figures win
                if patched != obj:
                    raw = encode_event(patched, event.name)
            out.append(raw)
        return out


_Held = tuple[dict[str, Any], str | None]
"""An event held back: its JSON and SSE event name."""


class ResponsesFilter(StreamFilter):
    """Lifecycle identity: clients (the openai SDK enforces it) need one response id
    on every lifecycle event, and ``previous_response_id`` must name the LAST round's
    response, the one that holds the whole turn (an earlier one ends in a recall call
    nobody answered). So the opening events (``response.created``, ...) are held
    until the first client-visible event and then sent with the current round's id,
    which ``response.completed`` repeats: a round that only calls recall is never
    announced, and the client sees the final round's id, as non-streamed. When a
    round showed output before calling recall, its id was announced already and is
    kept (changing it would break the client's stream); the request that continues
    it then gets the rest of the turn (:mod:`ctxwarden.proxy.owed`)."""

    error_name = "error"

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[str, Any] = {}
        """The request as sent (recall tool included): what answers echo of it."""
        self.seq = 0
        self.offset = 0
        self.items: list[Any] = []  # client-visible output items, all rounds
        self._map: dict[int, int] = {}
        self._recall: set[int] = set()
        self._final: tuple[str | None, dict[str, Any]] | None = None
        self._opening: list[tuple[str | None, dict[str, Any]]] = []  # held, this round
        self._round_id: str | None = None
        self.response_id: str | None = None  # the id announced to the client
        self.announced_round: int | None = None  # the round whose id that is
        self.may_ask_again = True
        """Whether a tangled round may be asked again (the loop's round limit allows)."""
        self._reset_links()

    def _reset_links(self) -> None:
        """This round's reasoning bookkeeping (see :meth:`_added`)."""
        self._held: dict[int, list[_Held]] = {}  # reasoning, not yet known to be shown
        self._unshown: dict[int, list[_Held]] = {}  # reasoning hidden with a recall call
        self._after_unshown = False  # the latest reasoning item was hidden
        self._shown_round = False  # an event of this round's items reached the client
        self.tangled = False
        """A shown item followed hidden reasoning: nothing of the round after it is
        shown, and the round is asked again (:mod:`.reasoning_links`)."""

    def start_round(self) -> None:
        super().start_round()
        self._map, self._recall, self._final = {}, set(), None
        self._opening, self._round_id = [], None
        self._reset_links()

    def process(self, event: SSEEvent) -> list[bytes]:
        obj = event.json()
        if not isinstance(obj, dict):
            return [event.raw]
        kind = obj.get("type", "")
        if kind == "error":
            self.errored = True
        if kind in ("response.created", "response.in_progress", "response.queued"):
            self._round_id = self._round_id or (obj.get("response") or {}).get("id")
            if self.response_id is None:
                self._opening.append((event.name, obj))
            return []
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self._final = (event.name, obj)
            response = obj.get("response") or {}
            self.result = ResponsesFilter._result(response.get("output") or [])
            return [] if self.tangled else self._release(self._held)  # it ended with these
        index = obj.get("output_index")
        if not isinstance(index, int):
            return [*self._announce(), self._emit(obj, event.name)]
        if kind == "response.output_item.added":
            return self._added(index, obj, event.name)
        for pending in (self._held, self._unshown):
            if index in pending:
                pending[index].append((obj, event.name))
                return []
        if index in self._recall:
            return []
        return self._shown(index, obj, event.name)

    def _added(self, index: int, obj: dict[str, Any], name: str | None) -> list[bytes]:
        """A new output item: a reasoning item is held until the next item says
        whether the client may see it (:mod:`.reasoning_links`: not before a recall
        call); an item after hidden reasoning tangles the round, unless the client was
        shown some of this round already (asking again would leave it items of a round
        that is thrown away) or the round limit is reached (:attr:`may_ask_again`):
        then the round stands and that reasoning stays hidden with its recall call, as
        a whole answer past the limit shows it (shown, it would come without the item
        that followed it, which OpenAI refuses when a client keeping its own history
        sends it back)."""
        item = obj.get("item")
        if self.tangled:
            self._recall.add(index)
            return []
        if is_reasoning(item):
            self._held[index] = [(obj, name)]
            self._after_unshown = False
            return []
        if is_recall_call(item):
            self._recall.add(index)
            if self._held:
                self._unshown.update(self._held)
                self._held = {}
                self._after_unshown = True
            return []
        out = self._release(self._held)
        if self._after_unshown:
            if not self._shown_round and self.may_ask_again:
                self.tangled = True
                self._recall.add(index)
                return []
            self._recall.update(self._unshown)  # hidden for good: its events swallowed
            self._unshown.clear()
        self._after_unshown = False
        self._map[index] = self.offset
        self.offset += 1
        return [*out, *self._shown(index, obj, name)]

    def _release(self, pending: dict[int, list[_Held]]) -> list[bytes]:
        """The events of the reasoning items in ``pending``, shown now in order (it is
        emptied)."""
        out: list[bytes] = []
        for index, events in sorted(pending.items()):
            self._map[index] = self.offset
            self.offset += 1
            for obj, name in events:
                out += self._shown(index, obj, name)
        pending.clear()
        return out

    def _shown(self, index: int, obj: dict[str, Any], name: str | None) -> list[bytes]:
        """An event of a client-visible item, renumbered."""
        if obj.get("type") == "response.output_item.done":
            self.items.append(obj.get("item"))
        self._shown_round = True
        mapped = {**obj, "output_index": self._map.get(index, index)}
        return [*self._announce(), self._emit(mapped, name)]

    def round_ended(self) -> bool:
        return self._final is not None

    def announced(self) -> bool:
        """Whether the client was shown a response id (this round's or an earlier's)."""
        return self.announced_round is not None

    def announced_before(self) -> bool:
        """Whether the id the client was shown is an earlier round's."""
        return self.announced_round is not None and self.announced_round < self.round

    def client_response_id(self) -> str | None:
        """The response id the client sees: the announced one, else this round's."""
        return self._round_id if self.response_id is None else self.response_id

    def _announce(self) -> list[bytes]:
        """The held opening events, once, before the first client-visible event."""
        if self.response_id is not None:
            return []
        self.response_id = self._round_id or ""
        self.announced_round = self.round
        return [self._emit(self._hidden(obj), name) for name, obj in self._opening]

    def _hidden(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A lifecycle event whose echoed request does not show the recall tool."""
        from ctxwarden.proxy.dialects import hide_recall_tool

        response = obj.get("response")
        if not isinstance(response, dict):
            return obj
        hidden = hide_recall_tool(response, self.asked)
        return obj if hidden is None else {**obj, "response": hidden}

    def _emit(self, obj: dict[str, Any], name: str | None) -> bytes:
        if "sequence_number" in obj:
            obj = {**obj, "sequence_number": self.seq}
        self.seq += 1
        return encode_event(obj, name)

    @staticmethod
    def _result(output: list[Any]) -> RoundResult:
        from ctxwarden.proxy.dialects import DIALECTS

        return DIALECTS["openai.responses"].find_calls({"output": output})

    def _patched(self) -> list[bytes]:
        """The final event with the announced id; when nothing was announced (no
        round showed anything), this round's opening events first. Does not mark
        them announced."""
        if self._final is None:
            return []
        name, obj = self._final
        response = dict(obj.get("response") or {})
        if self.round > 0 or self._recall:
            response["output"] = list(self.items)
        opening: list[bytes] = []
        if self.response_id is None:
            opening = [self._emit(self._hidden(o), n) for n, o in self._opening]
        elif self.response_id:
            response["id"] = self.response_id
        return [*opening, self._emit(self._hidden({**obj, "response": response}), name)]

    def error_event(self, status: int, body: bytes, message: str) -> bytes:
        payload = {"type": "error", "sequence_number": 0,
                   **self._error_payload(status, body, message)}  # fmt: skip
        return self._emit(payload, self.error_name)


_TOOL_USE_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _reparse(raw: bytes) -> SSEEvent:
    from ctxwarden.proxy.sse import SSESplitter

    events = SSESplitter().feed(raw)
    return events[0] if events else SSEEvent(raw, None, "")


FILTERS: dict[str, type[StreamFilter]] = {
    "openai.chat": ChatFilter,
    "openai.responses": ResponsesFilter,
    "anthropic.messages": MessagesFilter,
}
