"""A tool result held in many text blocks (an MCP server's hits, one per block) is
masked as one output: the whole output's placeholder on its first block, a stub on
each other, taken or rolled back together."""

from __future__ import annotations

from typing import Any

from ctxwarden.store import MemoryStore
from ctxwarden.tokens.counter import TokenCounter
from tests.passes.convo import FORCE, make_engine, refs_in
from tests.pipeline.test_cross_api_properties import PART_STUB

ERROR = "Traceback (most recent call last): ValueError: bad query 'parser 0'"


def _block(k: int, j: int) -> str:
    lines = [
        f"hit {k}.{j}.{i}: issue #{1000 * k + 10 * j + i} in org/proj-{j} open" for i in range(3)
    ]
    return "\n".join([*lines, ERROR] if (k, j) == (0, 6) else lines)


def _request(blocks: int = 40, turns: int = 6) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the parser issues."}]
    for k in range(turns):
        use = {"type": "tool_use", "id": f"t{k}", "name": "search", "input": {"q": f"parser {k}"}}
        content = [{"type": "text", "text": _block(k, j)} for j in range(blocks)]
        result = {"type": "tool_result", "tool_use_id": f"t{k}", "content": content}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}


def _oldest(request: dict[str, Any]) -> list[str]:
    return [b["text"] for b in request["messages"][2]["content"][0]["content"]]


def test_a_many_block_result_is_masked_as_one_output() -> None:
    engine = make_engine("balanced", FORCE)
    request = _request()
    sent = engine.condense(request, api="anthropic.messages", session="s").request
    before, after = _oldest(request), _oldest(sent)
    first, stubs = after[0], after[1:]
    (ref,) = set(refs_in(first))
    assert engine.recall(ref) == "\n".join(before)  # every block, one recall away
    assert ERROR in first  # the whole output's error lines, in its placeholder
    for number, (stub, original) in enumerate(zip(stubs, before[1:], strict=True), start=2):
        assert PART_STUB.match(stub) and stub.startswith(f"[ctxwarden: part {number}/40,")
        assert (ERROR in stub) is (ERROR in original)  # a block's own error lines stay
    count = TokenCounter().count_text
    assert sum(map(count, after)) < 0.6 * sum(map(count, before))  # block by block: 0%


def test_the_first_block_saving_nothing_alone_is_taken_with_the_stubs() -> None:
    # a first block of one short line: its placeholder is longer than it
    request = _request()
    for message in request["messages"][2::2]:
        message["content"][0]["content"][0]["text"] = "3 hits"
    sent = make_engine("balanced", FORCE).condense(request, api="anthropic.messages").request
    after = _oldest(sent)
    assert after[0] != "3 hits" and refs_in(after[0])
    assert all(PART_STUB.match(stub) for stub in after[1:])


def test_a_result_with_a_block_kept_in_full_is_masked_block_by_block() -> None:
    # the oldest result's last block repeats an earlier output: dedupe takes it first,
    # so the result is not open as a whole and no stub stands for a block left in full
    request = _request(blocks=4)
    oldest = request["messages"][2]["content"][0]["content"]
    oldest[3]["text"] = oldest[2]["text"]
    sent = make_engine("balanced", FORCE).condense(request, api="anthropic.messages").request
    assert not any(PART_STUB.match(text) for text in _oldest(sent))


class _FailsOnce(MemoryStore):
    """A store whose first write of a text holding ``marker`` fails."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.failed = False

    def put(self, tenant: str, text: str) -> str:
        if self.marker in text and not self.failed:
            self.failed = True
            raise OSError("disk full")
        return super().put(tenant, text)


def test_a_result_whose_placeholder_is_rolled_back_keeps_every_block() -> None:
    request = _request(turns=3)
    store = _FailsOnce(_block(0, 0) + "\n" + _block(0, 1))  # the oldest output, whole
    engine = make_engine("balanced", FORCE, store=store)
    result = engine.condense(request, api="anthropic.messages", session="s")
    assert store.failed
    assert _oldest(result.request) == _oldest(request)  # stubs rolled back with it
    assert result.report["segment_failures"] == 1
    assert result.report["rollbacks"] >= 40
    newer = result.request["messages"][4]["content"][0]["content"]
    assert PART_STUB.match(newer[1]["text"])  # another result's group stands


_WORD_LIST = [
    "apple",
    "river",
    "stone",
    "cloud",
    "green",
    "table",
    "window",
    "garden",
    "silver",
    "forest",
    "candle",
    "mirror",
]


def _plain(k: int) -> str:  # no distinctive string at all, distinct per block
    def row(i: int) -> str:
        return " ".join(_WORD_LIST[(k * 7 + i * 3 + j) % 12] for j in range(14))

    return "\n".join(row(i) for i in range(12))


def _edited_history(clear: bool, extra: int) -> dict[str, Any]:
    """A result of seven blocks whose placeholder leaves out the names a newer
    output's placeholder lists; the client clears that newer output (``clear``)."""
    names = [f"mod_alpha_{i}.py" for i in range(8)]
    first = "results for the query\n" + "\n".join(f"found symbol in {x}" for x in names)
    blocks = [{"type": "text", "text": first}] + [
        {"type": "text", "text": _plain(k)} for k in range(6)
    ]
    newer = "\n".join([f"warning in {x}" for x in names] + [_plain(9)] * 3)

    def turn(cid: str, content: Any) -> list[dict[str, Any]]:
        use = {"type": "tool_use", "id": cid, "name": "search", "input": {"q": cid}}
        result = {"type": "tool_result", "tool_use_id": cid, "content": content}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]

    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    messages += turn("a", blocks) + turn("b", "[cleared]" if clear else newer) + turn("c", "done")
    for i in range(extra):
        messages += [
            {"role": "assistant", "content": f"step {i}"},
            {"role": "user", "content": "go"},
        ]
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "continue"}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages}


def test_stubs_never_outlive_the_placeholder_that_names_their_original() -> None:
    engine = make_engine("balanced", FORCE)
    originals = [
        b["text"] for b in _edited_history(False, 0)["messages"][2]["content"][0]["content"]
    ]
    for clear, extra in [(False, 0), (True, 1), (True, 2)]:
        request = _edited_history(clear, extra)
        sent = engine.condense(request, api="anthropic.messages", session="s").request
        blocks = _oldest(sent)
        recalled = [engine.recall(ref) for ref in refs_in(blocks[0])]
        for block, original in zip(blocks[1:], originals[1:], strict=True):
            if PART_STUB.match(block):  # its original one recall away, from the first block
                assert any(original in text for text in recalled), (clear, extra)


class _Refuses(MemoryStore):
    """A store that refuses every write of a text holding ``marker``, and counts them."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.refused = 0

    def put(self, tenant: str, text: str) -> str:
        if self.marker in text:
            self.refused += 1
            raise OSError("disk full")
        return super().put(tenant, text)


def test_a_joint_whose_original_cannot_be_stored_is_tried_once() -> None:
    request = _request(turns=3)
    store = _Refuses(_block(0, 0) + "\n" + _block(0, 1))  # the oldest output, whole
    engine = make_engine("balanced", FORCE, store=store)
    result = engine.condense(request, api="anthropic.messages", session="s")
    assert _oldest(result.request) == _oldest(request)
    assert store.refused == 1  # not once more for each of its 39 stubs
    assert result.report["segment_failures"] == 1


def test_blocks_shorter_than_any_stub_are_not_given_one(monkeypatch: Any) -> None:
    # thousands of short blocks had a stub built for each, every request
    from ctxwarden.passes import mask, result_groups

    made: list[int] = []
    real = result_groups.part_stub

    def counted(number: int, count: int, block: Any) -> tuple[str, tuple[str, ...]]:
        made.append(number)
        return real(number, count, block)

    monkeypatch.setattr(mask, "part_stub", counted)
    request = _request()
    for message in request["messages"][2::2]:
        blocks = message["content"][0]["content"]
        blocks[1:] = [{"type": "text", "text": f"{j}"} for j in range(200)]  # 1 token each
    sent = make_engine("balanced", FORCE).condense(request, api="anthropic.messages").request
    assert made == []
    assert [b["text"] for b in sent["messages"][2]["content"][0]["content"][1:]] == [
        f"{j}" for j in range(200)
    ]
    stub_tokens = TokenCounter().count_text(result_groups.shortest_stub())
    assert stub_tokens <= TokenCounter().count_text(result_groups._STUB.format(number=2, count=2))
