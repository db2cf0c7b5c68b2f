"""The newest outputs are counted per tool result: every text of the newest result
(a shell output's stdout and stderr, a result's several text blocks) stays whole,
even where the result is no longer in the protected tail."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ctxwarden import Engine, EngineConfig


def _lines(tag: str, n: int = 150) -> str:
    return "\n".join(f"{tag} line {i}: ident_{i} src/{tag}_{i}.py" for i in range(n))


def _anthropic(turns: int) -> tuple[dict[str, Any], list[Any], int]:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(turns):
        use = {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"cmd": f"ls {i}"}}
        blocks = [{"type": "text", "text": _lines(f"o{i}")}, {"type": "text", "text": "exit 0"}]
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": blocks}
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "next"},
        ]
    request = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": messages}
    return request, messages, len(messages) - 3


def _responses(turns: int, shell: bool) -> tuple[dict[str, Any], list[Any], int]:
    items: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(turns):
        if shell:
            chunk = {"stdout": _lines(f"o{i}"), "stderr": "", "outcome": {"type": "timeout"}}
            call = {"type": "shell_call", "call_id": f"c{i}", "action": {"commands": [f"ls {i}"]}}
            output = {"type": "shell_call_output", "call_id": f"c{i}", "output": [chunk]}
        else:
            texts = [_lines(f"o{i}"), "exit 0"]
            call = {"type": "function_call", "call_id": f"c{i}", "name": "bash", "arguments": "{}"}
            output = {
                "type": "function_call_output",
                "call_id": f"c{i}",
                "output": [{"type": "input_text", "text": t} for t in texts],
            }
        reply = {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                      "text": "ok"}]}  # fmt: skip
        items += [call, output, reply, {"role": "user", "content": "next"}]
    return {"model": "gpt-5", "input": items}, items, len(items) - 3


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
@pytest.mark.parametrize("shape", ["shell", "function_call_list", "anthropic_blocks"])
def test_the_newest_result_stays_whole(shape: str, preset: str) -> None:
    if shape == "anthropic_blocks":
        request, items, newest = _anthropic(8)
        api, key = "anthropic.messages", "messages"
    else:
        request, items, newest = _responses(8, shell=shape == "shell")
        api, key = "openai.responses", "input"
    engine = Engine(EngineConfig(preset=preset, store={"backend": "memory"}))
    result = engine.condense(request, api=api)
    sent = result.request[key]
    assert result.report["rewritten"], "nothing condensed: the test shows nothing"
    assert sent[newest] == items[newest]
    assert sent[2] != items[2]  # the oldest output was condensed


def _chat_parallel(turns: int) -> dict[str, Any]:
    """Turns of two parallel calls with large arguments; the last turn's outputs are
    the newest messages."""
    messages: list[Any] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "go"},
    ]
    for i in range(turns):
        calls = [
            {"id": f"c{i}_{k}", "type": "function", "function": {
                "name": "write", "arguments": orjson.dumps({"path": f"src/m{i}_{k}.py",
                                                            "text": _lines(f"w{i}{k}")}).decode()}}
            for k in range(2)
        ]  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [
            {"role": "tool", "tool_call_id": c["id"], "content": f"wrote {i}"} for c in calls
        ]
        if i < turns - 1:
            messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "on"}]
    return {"model": "gpt-4o", "messages": messages}


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
def test_every_parallel_call_of_the_newest_turn_keeps_its_arguments(preset: str) -> None:
    request = _chat_parallel(6)
    engine = Engine(EngineConfig(preset=preset, store={"backend": "memory"}))
    result = engine.condense(request)
    sent = result.request["messages"]
    assert result.report["rewritten"]
    newest = max(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[newest] == request["messages"][newest]  # both calls' arguments whole
    assert sent[2] != request["messages"][2]  # the oldest turn's arguments were trimmed


def test_every_text_block_of_the_newest_turn_is_kept() -> None:
    messages: list[Any] = [{"role": "user", "content": "go"}]
    for i in range(6):
        blocks = [
            {"type": "text", "text": _lines(f"plan{i}", 60)},
            {"type": "text", "text": _lines(f"then{i}", 60)},
            {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"cmd": f"ls {i}"}},
        ]
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"done {i}"}
        messages += [{"role": "assistant", "content": blocks},
                     {"role": "user", "content": [result]}]  # fmt: skip
    request = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": messages}
    engine = Engine(EngineConfig(preset="balanced", store={"backend": "memory"}))  # 1 turn
    sent = engine.condense(request, api="anthropic.messages").request["messages"]
    assert sent[-2] == messages[-2]  # the newest turn: both its text blocks whole
    assert sent[1] != messages[1]  # the oldest turn's texts were condensed


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
def test_every_parallel_call_item_of_the_newest_responses_turn_keeps_its_arguments(
    preset: str,
) -> None:
    """In Responses each parallel call is an item of its own: the newest turn is the
    run of assistant items (reasoning, calls), not the last item alone (only its last
    call kept its arguments; a patch the model was about to see the result of was cut)."""
    content = "\n".join(f"line {j} of the new file" for j in range(60))
    items: list[Any] = [{"role": "user", "content": "go"}]
    for t in range(4):
        items.append({"type": "reasoning", "id": f"rs_{t}", "summary": [],
                      "encrypted_content": "gAAAA" + "x" * 100})  # fmt: skip
        calls = [f"call_{t}_{c}" for c in range(3)]
        for c, call_id in enumerate(calls):
            arguments = orjson.dumps({"path": f"f{t}_{c}.py", "content": content}).decode()
            items.append({"type": "function_call", "id": f"fc_{t}_{c}", "call_id": call_id,
                          "name": "write_file", "arguments": arguments})  # fmt: skip
        items += [{"type": "function_call_output", "call_id": call_id, "output": _lines(call_id)}
                  for call_id in calls]  # fmt: skip
    request = {"model": "gpt-5", "input": items}
    engine = Engine(EngineConfig(preset=preset, store={"backend": "memory"}))
    result = engine.condense(request, api="openai.responses")
    sent = result.request["input"]
    assert result.report["rewritten"]
    newest = [i for i, item in enumerate(items) if str(item.get("id", "")).startswith("fc_3")]
    assert len(newest) == 3 and all(sent[i] == items[i] for i in newest)
    oldest = [i for i, item in enumerate(items) if str(item.get("id", "")).startswith("fc_0")]
    assert all(sent[i] != items[i] for i in oldest)  # older turns' arguments were trimmed
