"""Property tests across OpenAI Responses and Anthropic Messages: long, valid agent
histories mixing every item kind the adapters know, fed turn by turn as a proxy would
(each request a fresh decode of the growing history) through ``balanced`` and
``aggressive`` with the planner forced (``FORCE``), so that condensing really happens.

Every turn of every example must hold:

1. no exception and no fallback;
2. the replay's integrity checks (ids, pairing, protected messages, shape, ...) find
   nothing;
3. the request passed in is never mutated;
4. every reference in the output recalls, every rewritten text names one that recalls
   its exact original, and the original's error lines are still visible;
5. two fresh engines (separate stores), and one that served many sessions before, send
   byte-identical requests;
6. the newest tool result (all of its texts) is sent whole;

and, stricter than the integrity checks' shape, only text payloads change (never a
reasoning summary, thinking, signature, encrypted content, media or cache marker).

Property 6 once failed where a newest result repeated an earlier output: it became a
pointer to that copy, itself masked in the same step; a test with such newest results
holds the fix (one of pretty-printed JSON may be normalized: its content stays). A
fixed history per API and preset shows that condensing really happens (the hypothesis
statistics show it too: ``--hypothesis-show-statistics``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from ctxwarden import CondenseResult, Engine
from ctxwarden.adapters.openai_responses import is_model_item
from ctxwarden.replay import signals as replay_signals
from ctxwarden.replay.integrity import check_integrity
from ctxwarden.replay.view import RequestView
from ctxwarden.replay.wire import MESSAGE_KEYS
from ctxwarden.signals import argument_error_lines, error_lines
from ctxwarden.tokens.counter import TokenCounter
from tests.passes.convo import FORCE, dumps, make_engine, refs_in
from tests.passes.strategies import COMMANDS as CHAT_COMMANDS
from tests.passes.strategies import fresh_session
from tests.wire_diff import changed_texts

RESPONSES = "openai.responses"
ANTHROPIC = "anthropic.messages"
APIS = (RESPONSES, ANTHROPIC)
PRESETS = ("balanced", "aggressive")
ENGINES: dict[str, Engine] = {p: make_engine(p, FORCE) for p in PRESETS}
COUNT = TokenCounter().count_text

PROPERTY = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)

SYSTEM = "You are a coding agent. Use the tools."
TASK = "Fix the failing build in src/app.py and make the tests pass."
COMMANDS = (*CHAT_COMMANDS, "grep -rn parse_header src")
ERRORS = (
    "Traceback (most recent call last):",
    "src/x.py:3:1: error: boom",
    "ValueError: bad value for parse_header",
    "FAILED tests/test_app.py::test_run - AssertionError: 3 != 4",
    "bash: frobctl: command not found",
)
TAGS = ("alpha", "beta", "gamma", "delta", "omega")
ENC = "gAAAAABo-encrypted-"
SIG = "EqQBCkYIBxgCKkD-signature-"

# -- texts --------------------------------------------------------------------------------


def lines(tag: str, n: int, errors: tuple[tuple[int, str], ...] = ()) -> str:
    """``n`` numbered rows with identifiers unique to ``tag``; ``errors`` inserted."""
    rows = [f"{tag} row {i}: checked {tag}_item_{i} in module_{tag}.py ok" for i in range(n)]
    for at, line in errors:
        rows.insert(min(at, len(rows)), line)
    return "\n".join(rows)


def diff(tag: str, n: int) -> str:
    body = [f"+    value_{i} = compute_{tag}({i})  # {tag} step {i}" for i in range(n)]
    return "\n".join(["@@ -1,3 +1,3 @@", *body])


def prose(tag: str, n: int) -> str:
    return " ".join(f"Step {i} of {tag} looked fine in part_{tag}_{i}." for i in range(n))


def source(tag: str, n: int, error: bool) -> str:
    """A file an agent writes through a call (an ``except`` / ``raise`` line in it)."""
    rows = [f"def f_{tag}_{i}(x):\n    return x + {i}" for i in range(n)]
    if error:
        rows.insert(n // 2, "    raise ValueError('bad header in parse_header')")
    return "\n".join(rows)


@st.composite
def outputs(draw: st.DrawFn, earlier: list[str], empty: bool = False, plain: bool = False) -> str:
    """A tool output: mostly large, sometimes with error lines, small, (``empty``)
    nothing, and unless ``plain`` a duplicate of an earlier one, pretty-printed JSON or
    past the truncation guardrail (2,000 lines)."""
    kinds = ["lines"] * 3 + ["errors"] * 2 + ["small"]
    if not plain:
        kinds += ["json", "dup", "huge"]
    kind = draw(st.sampled_from([*kinds, "empty"] if empty else kinds))
    if kind == "empty":
        return ""
    if kind == "dup" and earlier:
        return draw(st.sampled_from(earlier))
    tag = f"{draw(st.sampled_from(TAGS))}{draw(st.integers(0, 9))}"
    if plain:  # no output repeats another
        tag += f"n{len(earlier)}"
    if kind == "small":
        return f"ok {tag}"
    if kind == "huge":  # short rows: the guardrail counts lines
        rows = [f"{tag} {i} ok" for i in range(2100)]
        rows.insert(draw(st.integers(0, 2100)), draw(st.sampled_from(ERRORS)))
        return "\n".join(rows)
    if kind == "json":
        data = {"items": [{"id": i, "name": f"{tag}_{i}"} for i in range(draw(st.integers(5, 40)))]}
        return json.dumps(data, indent=2)
    n = draw(st.integers(20, 150))
    errors: tuple[tuple[int, str], ...] = ()
    if kind == "errors":
        errors = tuple(
            draw(
                st.lists(
                    st.tuples(st.integers(0, n), st.sampled_from(ERRORS)), min_size=1, max_size=3
                )
            )
        )
    text = lines(tag, n, errors)
    earlier.append(text)
    return text


# -- OpenAI Responses ---------------------------------------------------------------------

R_TOOLS: list[dict[str, Any]] = [
    {"type": "shell", "environment": {"type": "local"}},
    {"type": "apply_patch"},
    {"type": "custom", "name": "apply_patch_text"},
    {"type": "function", "name": "shell", "parameters": {"type": "object"}},
    {"type": "function", "name": "write_file", "parameters": {"type": "object"}},
]
CALL_KINDS = ("function_call", "custom_tool_call", "shell_call", "apply_patch_call")


def r_message(role: str, text: str, parts: bool, k: int = 0) -> dict[str, Any]:
    if not parts:
        return {"role": role, "content": text}
    if role == "assistant":
        part = {"type": "output_text", "text": text, "annotations": []}
        return {
            "type": "message",
            "role": role,
            "id": f"msg_{k}",
            "status": "completed",
            "content": [part],
        }
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def r_reasoning(k: int, summary: str | None, parts: int = 1) -> dict[str, Any]:
    texts = [] if summary is None else [{"type": "summary_text", "text": summary}] * parts
    return {
        "type": "reasoning",
        "id": f"rs_{k}",
        "summary": texts,
        "encrypted_content": f"{ENC}{k}==",
    }


def r_call(
    kind: str, cid: str, command: str, big: str | None = None, op: str = "update_file"
) -> dict[str, Any]:
    """A call of ``kind``: ``big`` is a file written through ``write_file``, a custom
    tool's patch or an apply_patch diff (none: a short command, or no diff)."""
    if kind == "function_call":
        if big is None:
            name, args = "shell", {"cmd": command}
        else:
            name, args = "write_file", {"path": f"src/mod_{cid}.py", "content": big}
        return {
            "type": "function_call",
            "id": f"fc_{cid}",
            "call_id": f"call_{cid}",
            "name": name,
            "arguments": json.dumps(args),
        }
    if kind == "custom_tool_call":
        patch = f"*** Begin Patch\n*** Update File: src/{cid}.py\n{big or '+x'}\n*** End Patch"
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{cid}",
            "call_id": f"call_{cid}",
            "name": "apply_patch_text",
            "input": patch,
        }
    if kind == "shell_call":
        return {
            "type": "shell_call",
            "id": f"sh_{cid}",
            "call_id": f"call_{cid}",
            "action": {"commands": [command], "timeout_ms": 60000},
            "status": "completed",
        }
    operation: dict[str, Any] = {"type": op, "path": f"src/pkg/mod_{cid}.py"}
    if big is not None:
        operation["diff"] = big
    return {
        "type": "apply_patch_call",
        "id": f"ap_{cid}",
        "call_id": f"call_{cid}",
        "status": "completed",
        "operation": operation,
    }


def r_output(call: dict[str, Any], texts: list[str], form: str = "string") -> dict[str, Any]:
    """The output answering ``call``. Function / custom outputs: ``texts[0]`` as a
    string, or (``parts`` / ``parts_image``) every text as an input_text part. Shell:
    one chunk per (stdout, stderr) pair of ``texts``. Patch: ``texts[0]`` if any."""
    kind, cid = call["type"], call["call_id"]
    out: dict[str, Any] = {"type": f"{kind}_output", "call_id": cid}
    if kind in ("function_call", "custom_tool_call"):
        if form == "string":
            out["output"] = texts[0]
        else:
            parts: list[dict[str, Any]] = [{"type": "input_text", "text": t} for t in texts]
            if form == "parts_image":
                parts.append({"type": "input_image", "image_url": "data:image/png;base64,AAAA"})
            out["output"] = parts
    elif kind == "shell_call":
        chunks = []
        for j in range(0, len(texts), 2):
            outcome = {"type": "exit", "exit_code": j} if j < 4 else {"type": "timeout"}
            chunks.append({"stdout": texts[j], "stderr": texts[j + 1], "outcome": outcome})
        out["output"] = chunks
        out["max_output_length"] = 100000
    else:
        out["status"] = "completed" if texts else "failed"
        if texts:
            out["output"] = texts[0]
    return out


@st.composite
def _r_call(draw: st.DrawFn, kind: str, cid: str) -> dict[str, Any]:
    command = draw(st.sampled_from(COMMANDS))
    big: str | None = None
    op = "update_file"
    tag = f"{draw(st.sampled_from(TAGS))}{cid}"
    if kind == "function_call" and draw(st.integers(0, 2)) == 0:
        big = source(tag, draw(st.integers(3, 60)), draw(st.booleans()))
    elif kind == "custom_tool_call":
        big = diff(tag, draw(st.integers(1, 120)))
    elif kind == "apply_patch_call":
        op = draw(st.sampled_from(["update_file", "create_file", "delete_file"]))
        if draw(st.booleans()):
            big = diff(tag, draw(st.integers(1, 150)))
    return r_call(kind, cid, command, big, op)


@st.composite
def _r_output(
    draw: st.DrawFn, call: dict[str, Any], earlier: list[str], plain: bool
) -> dict[str, Any]:
    kind = call["type"]
    if kind in ("function_call", "custom_tool_call"):
        form = draw(st.sampled_from(["string", "string", "parts", "parts_image"]))
        n = 1 if form == "string" else draw(st.integers(1, 3))
        return r_output(call, [draw(outputs(earlier, plain=plain)) for _ in range(n)], form)
    if kind == "shell_call":
        texts = []
        for _ in range(draw(st.integers(1, 3))):
            texts.append(draw(outputs(earlier, True, plain)))
            texts.append(draw(st.one_of(st.just(""), outputs(earlier, True, plain))))
        return r_output(call, texts)
    return r_output(call, [draw(outputs(earlier, plain=plain))] if draw(st.booleans()) else [])


@st.composite
def responses_histories(draw: st.DrawFn, plain: bool = False) -> dict[str, Any]:
    """A valid Responses request: a long agent history of every item kind (``plain``:
    see :func:`outputs`)."""
    earlier: list[str] = []
    items: list[dict[str, Any]] = [r_message("user", TASK, draw(st.booleans()))]
    if draw(st.booleans()):
        items.append(r_message("developer", "Repository: /repo", True))
    wire: dict[str, Any] = {
        "model": "gpt-5",
        "instructions": SYSTEM,
        "tools": R_TOOLS,
        "include": ["reasoning.encrypted_content"],
        "store": False,
    }
    if draw(st.booleans()):  # a continuation: items sent by reference, a call upstream
        wire["previous_response_id"] = "resp_prev_1"
        for j, typed in enumerate(draw(st.lists(st.booleans(), min_size=1, max_size=2))):
            items.append(
                {"type": "item_reference", "id": f"msg_up{j}"} if typed else {"id": f"fc_up{j}"}
            )
        if draw(st.booleans()):
            up = {"type": "function_call", "call_id": "call_up0"}
            items.append(r_output(up, [draw(outputs(earlier, plain=plain))]))
    for k in range(draw(st.integers(4, 9))):
        if draw(st.booleans()):
            summary = draw(st.sampled_from([None, "Check the tests.", prose(f"sum{k}", 30)]))
            items.append(r_reasoning(k, summary, draw(st.integers(1, 2))))
        if draw(st.integers(0, 2)) == 0:
            text = draw(st.sampled_from(["Let me check.", prose(f"say{k}", 40)]))
            items.append(r_message("assistant", text, draw(st.booleans()), k))
        kinds = draw(st.lists(st.sampled_from(CALL_KINDS), min_size=1, max_size=3))
        calls = [draw(_r_call(kind, f"{k}_{j}")) for j, kind in enumerate(kinds)]
        answers = [draw(_r_output(call, earlier, plain)) for call in calls]
        if len(answers) > 1 and draw(st.booleans()):
            answers = list(draw(st.permutations(answers)))
        items += calls + answers
        between = draw(st.sampled_from(["none", "none", "assistant_user", "user", "developer"]))
        if between == "assistant_user":
            items.append(r_message("assistant", prose(f"note{k}", 20), draw(st.booleans()), k))
        if between == "developer":
            items.append(r_message("developer", "From now on, be terse.", draw(st.booleans())))
        elif between != "none":
            items.append(r_message("user", "Also check the docs please.", draw(st.booleans())))
    ending = draw(st.sampled_from(["tools", "user", "assistant_user"]))
    if ending == "assistant_user":  # the newest result leaves the protected tail
        items.append(r_message("assistant", "Summary so far.", draw(st.booleans()), 99))
    if ending != "tools":
        items.append(r_message("user", "continue", draw(st.booleans())))
    wire["input"] = items
    return wire


# -- Anthropic Messages -------------------------------------------------------------------

A_TOOLS: list[dict[str, Any]] = [
    {"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}},
    {"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object"}},
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
]
CACHE = {"type": "ephemeral"}


def a_tool_use(cid: str, command: str, big: str | None = None) -> dict[str, Any]:
    if big is None:
        return {
            "type": "tool_use",
            "id": f"toolu_{cid}",
            "name": "bash",
            "input": {"command": command},
        }
    return {
        "type": "tool_use",
        "id": f"toolu_{cid}",
        "name": "write_file",
        "input": {"path": f"src/mod_{cid}.py", "content": big},
    }


def a_tool_result(
    use: dict[str, Any],
    texts: list[str],
    form: str = "string",
    extra: str | None = None,
    is_error: bool = False,
    cache: bool = False,
) -> dict[str, Any]:
    """``texts[0]`` as a string, or every text as a text block (``extra``: an image or a
    search result after them)."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use["id"]}
    if form == "string":
        block["content"] = texts[0]
    else:
        content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
        if extra == "image":
            content.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                }
            )
        elif extra == "search_result":
            content.append(
                {
                    "type": "search_result",
                    "source": "https://kb.example.com/1",
                    "title": "KB",
                    "content": [{"type": "text", "text": "kb text"}],
                    "citations": {"enabled": True},
                }
            )
        block["content"] = content
    if is_error:
        block["is_error"] = True
    if cache:
        block["cache_control"] = CACHE
    return block


def a_web_search(cid: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "server_tool_use",
            "id": f"srvtoolu_{cid}",
            "name": "web_search",
            "input": {"query": f"pytest failure {cid}"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": f"srvtoolu_{cid}",
            "content": [
                {
                    "type": "web_search_result",
                    "url": f"https://docs.example.com/{cid}",
                    "title": f"Docs {cid}",
                    "encrypted_content": f"{ENC}{cid}",
                    "page_age": "1 day",
                }
            ],
        },
    ]


@st.composite
def _a_result(
    draw: st.DrawFn, use: dict[str, Any], earlier: list[str], plain: bool
) -> dict[str, Any]:
    form = draw(st.sampled_from(["string", "string", "blocks"]))
    n = 1 if form == "string" else draw(st.integers(1, 3))
    texts = [draw(outputs(earlier, plain=plain)) for _ in range(n)]
    extra = draw(st.sampled_from([None, None, None, "image", "search_result"]))
    error = draw(st.integers(0, 4)) == 0
    return a_tool_result(use, texts, form, extra, error, draw(st.integers(0, 4)) == 0)


@st.composite
def anthropic_histories(draw: st.DrawFn, plain: bool = False) -> dict[str, Any]:
    """A valid Messages request: a long agent history of every block kind (``plain``:
    see :func:`outputs`)."""
    earlier: list[str] = []
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for k in range(draw(st.integers(4, 9))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            thought = draw(st.sampled_from(["Run it.", prose(f"think{k}", 30)]))
            blocks.append({"type": "thinking", "thinking": thought, "signature": f"{SIG}{k}"})
        if draw(st.integers(0, 3)) == 0:
            blocks.append({"type": "redacted_thinking", "data": f"EmwKAhgBEgy-redacted-{k}"})
        for _ in range(draw(st.integers(0, 2))):
            text = draw(st.sampled_from(["Let me check.", prose(f"say{k}", 40)]))
            blocks.append({"type": "text", "text": text})
        if draw(st.integers(0, 3)) == 0:
            blocks += a_web_search(str(k))
        uses = []
        for j in range(draw(st.integers(1, 3))):
            big = None
            if draw(st.integers(0, 3)) == 0:
                big = source(f"w{k}{j}", draw(st.integers(3, 60)), draw(st.booleans()))
            uses.append(a_tool_use(f"{k}_{j}", draw(st.sampled_from(COMMANDS)), big))
        results: list[dict[str, Any]] = [draw(_a_result(use, earlier, plain)) for use in uses]
        if len(results) > 1 and draw(st.booleans()):
            results = list(draw(st.permutations(results)))
        if draw(st.integers(0, 3)) == 0:
            results.append({"type": "text", "text": "here is the output", "cache_control": CACHE})
        messages += [
            {"role": "assistant", "content": blocks + uses},
            {"role": "user", "content": results},
        ]
        if draw(st.integers(0, 3)) == 0:
            messages += [
                {"role": "assistant", "content": prose(f"note{k}", 20)},
                {"role": "user", "content": "Also check the docs please."},
            ]
    ending = draw(st.sampled_from(["tools", "assistant_user", "prefill"]))
    if ending == "assistant_user":  # the newest result leaves the protected tail
        messages += [
            {"role": "assistant", "content": [{"type": "text", "text": "Summary so far."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "go on", "cache_control": CACHE}],
            },
        ]
    elif ending == "prefill":
        messages.append({"role": "assistant", "content": "The fix is"})
    system = [{"type": "text", "text": SYSTEM, "cache_control": CACHE}]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": system,
        "tools": A_TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": messages,
    }


HISTORIES = {RESPONSES: responses_histories(), ANTHROPIC: anthropic_histories()}
PLAIN_HISTORIES = {RESPONSES: responses_histories(True), ANTHROPIC: anthropic_histories(True)}

# -- sessions -----------------------------------------------------------------------------


def _model_turn(api: str, item: Any) -> bool:
    return is_model_item(item) if api == RESPONSES else item.get("role") == "assistant"


def turn_requests(api: str, history: dict[str, Any], turns: int) -> list[dict[str, Any]]:
    """The requests an agent sent on its way to ``history``: each ending where the
    model's next turn starts, the last ``turns - 1`` of them, then ``history`` itself;
    each a fresh decode (as a proxy reads a body)."""
    key = MESSAGE_KEYS[api]
    items = history[key]
    starts = [k for k in range(2, len(items)) if _model_turn(api, items[k])]
    starts = [k for k in starts if not _model_turn(api, items[k - 1])]
    ends = [*starts[len(starts) - (turns - 1) :], len(items)]
    raw = [orjson.dumps({**history, key: items[:end]}) for end in ends]
    return [orjson.loads(r) for r in raw]


def run_session(
    engine: Engine, api: str, history: dict[str, Any], turns: int
) -> Iterator[tuple[dict[str, Any], CondenseResult]]:
    session = fresh_session()
    for request in turn_requests(api, history, turns):
        yield request, engine.condense(request, api=api, session=session)


# -- checks -------------------------------------------------------------------------------


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)


def visible_text(request: Any) -> str:
    """Every string of ``request``, and every string inside those that are JSON."""
    out: list[str] = []
    for s in _strings(request):
        out.append(s)
        if s.startswith(("{", "[")):
            with contextlib.suppress(orjson.JSONDecodeError):
                out.extend(_strings(orjson.loads(s)))
    return "\n".join(out)


def _is_arguments(api: str, request: dict[str, Any], path: tuple[Any, ...]) -> bool:
    """Whether ``path`` is a call's arguments text, or a string inside an Anthropic
    ``tool_use`` block's ``input`` object."""
    if len(path) < 3:
        return False
    if api == ANTHROPIC:
        return len(path) >= 5 and path[4] == "input"
    kind = request["input"][path[1]].get("type")
    return kind in ("function_call", "custom_tool_call", "apply_patch_call")


def _recalls(api: str, recalled: set[str], old: str) -> bool:
    """Whether a recalled original holds ``old``: is it, or (the arguments of an
    Anthropic call, one string of which is ``old``) holds it as a string value."""
    if old in recalled or any(old in r for r in recalled):  # or one block of an output
        return True
    return api == ANTHROPIC and any(old in _strings(orjson.loads(r)) for r in recalled)


PART_STUB = re.compile(r"\[ctxwarden: part \d+/\d+, see above\]")
"""The stub of a later text block of a tool result masked as one output."""


def check_recall_and_errors(
    engine: Engine, api: str, request: dict[str, Any], out: dict[str, Any]
) -> int:
    """Property 4; returns how many texts were rewritten."""
    visible = visible_text(out)
    for ref in set(refs_in(visible)):
        engine.recall(ref)  # raises when missing or corrupt
    rewritten = 0
    for path, old, new in changed_texts(request, out):
        rewritten += 1
        assert new.strip(), f"{path}: rewritten to nothing"
        refs = refs_in(new)
        if not refs and PART_STUB.match(new):  # a later block of an output masked as one:
            refs = refs_in(visible_text(out[MESSAGE_KEYS[api]][path[1]]))  # its first's
        assert refs, f"{path}: rewritten without a reference"
        recalled = {engine.recall(r) for r in refs}
        assert _recalls(api, recalled, old), f"{path}: no reference recalls it"
        if _is_arguments(api, request, path):
            lost = [e for e in argument_error_lines(old) if e not in visible]
        else:
            wanted = set(error_lines(old)) | replay_signals.error_lines(old)
            lost = [e for e in wanted if e not in visible]
        assert not lost, f"{path}: error lines lost: {lost}"
    return rewritten


_TEXT_PARTS = ("input_text", "output_text")
_CALL_PAYLOAD = {
    "function_call": ("arguments",),
    "custom_tool_call": ("input",),
    "apply_patch_call": ("operation", "diff"),
}


def payload_path(api: str, request: dict[str, Any], path: tuple[Any, ...]) -> bool:
    """Whether ``path`` is a text the safety model lets a pass rewrite: message text,
    tool-output text, a call's argument text. Never a reasoning summary, thinking,
    signature, encrypted content, media, cache marker, id or item reference (an
    Anthropic call's ``input`` is an object: the strings inside it are its text)."""
    item = request[MESSAGE_KEYS[api]][path[1]]
    rest = path[2:]
    if api == ANTHROPIC:
        if rest == ("content",):
            return True
        block = item["content"][rest[1]]
        if rest[2:] == ("text",):
            return bool(block["type"] == "text")
        if block["type"] == "tool_use":  # a string value inside an old call's input
            return rest[2] == "input" and len(rest) > 3
        if block["type"] != "tool_result" or rest[2] != "content":
            return False
        return len(rest) == 3 or (
            rest[4:] == ("text",) and block["content"][rest[3]]["type"] == "text"
        )
    kind = item.get("type", "message")
    if kind == "message":
        if item["role"] in ("system", "developer"):
            return False
        return rest == ("content",) or (
            rest[2:] == ("text",) and item["content"][rest[1]]["type"] in _TEXT_PARTS
        )
    if kind in _CALL_PAYLOAD:
        return rest == _CALL_PAYLOAD[kind]
    if kind == "shell_call_output":
        return rest[0] == "output" and rest[2:] in (("stdout",), ("stderr",))
    if kind in ("function_call_output", "custom_tool_call_output", "apply_patch_call_output"):
        return rest == ("output",) or (
            rest[2:] == ("text",) and item["output"][rest[1]]["type"] == "input_text"
        )
    return False


def tool_results(api: str, request: dict[str, Any]) -> list[tuple[int, int | None]]:
    """Where each tool result is: ``(item, None)`` or ``(message, block)``."""
    if api == RESPONSES:
        return [
            (i, None)
            for i, item in enumerate(request["input"])
            if str(item.get("type", "")).endswith("_output") and item.get("call_id") is not None
        ]
    return [
        (i, j)
        for i, m in enumerate(request["messages"])
        if isinstance(m["content"], list)
        for j, b in enumerate(m["content"])
        if b.get("type") == "tool_result"
    ]


def _at(api: str, request: dict[str, Any], where: tuple[int, int | None]) -> Any:
    item = request[MESSAGE_KEYS[api]][where[0]]
    return item if where[1] is None else item["content"][where[1]]


def result_texts(api: str, result: dict[str, Any]) -> list[str]:
    """The texts of a tool result the engine reads (its segments), in order."""
    if api == ANTHROPIC:
        content = result.get("content")
        if isinstance(content, str):
            return [content]
        return [
            b["text"] for b in content or () if b.get("type") == "text" and not b.get("citations")
        ]
    output = result.get("output")
    if isinstance(output, str):
        return [output]
    if result["type"] == "shell_call_output":
        return [
            c[s] for c in output or () for s in ("stdout", "stderr") if isinstance(c.get(s), str)
        ]
    return [
        b["text"]
        for b in output or ()
        if b.get("type") == "input_text" and not b.get("annotations")
    ]


def _exempt(text: str) -> bool:
    """Whether a pass that ignores recency by design may rewrite ``text``: the
    truncation guardrail (over 2,000 lines or 50 KB), or normalization, which keeps the
    content (pretty-printed JSON minified). A repeat of an earlier output is no excuse:
    dedupe never points a recent output at a copy a lossy pass condenses."""
    if text.count("\n") >= 2000 or len(text.encode()) > 50_000:
        return True
    return text.startswith(("{", "[")) and "\n" in text


def check_newest_result(
    api: str, request: dict[str, Any], out: dict[str, Any], strict: bool = True
) -> bool:
    """Property 6: the last tool result, and the last one holding texts, sent whole.
    Not ``strict``: a text a pass that ignores recency may rewrite is let be (returns
    whether one was rewritten)."""
    found = tool_results(api, request)
    with_text = [w for w in found if result_texts(api, _at(api, request, w))]
    exempt = False
    for where in {*found[-1:], *with_text[-1:]}:
        before, after = _at(api, request, where), _at(api, out, where)
        if strict or dumps(after) == dumps(before):
            assert dumps(after) == dumps(before), where
            continue
        for path, old, _ in changed_texts(before, after):
            assert _exempt(old), (where, path)
            exempt = True
    return exempt


# -- properties ---------------------------------------------------------------------------

parametrize = pytest.mark.parametrize


def cross_api_property(test: Callable[..., None]) -> Callable[..., None]:
    """``test(api, preset, data)`` as a hypothesis property over both APIs and both
    presets."""
    prop = PROPERTY(given(data=st.data())(test))
    marked: Callable[..., None] = parametrize("preset", PRESETS)(parametrize("api", APIS)(prop))
    return marked


def drawn_session(data: st.DataObject, api: str) -> tuple[dict[str, Any], int]:
    """A history of ``api`` and how many of its turns to send, drawn for one example."""
    return data.draw(HISTORIES[api], label="history"), data.draw(st.integers(3, 6), label="turns")


@cross_api_property
def test_no_exception_and_no_fallback(api: str, preset: str, data: st.DataObject) -> None:
    history, turns = drawn_session(data, api)
    rewritten = False
    for _, result in run_session(ENGINES[preset], api, history, turns):
        assert result.report["fallback_reason"] is None, result.report["fallback_reason"]
        assert isinstance(result.request, dict)
        rewritten = bool(result.report.get("rewritten"))
    event(f"last turn rewritten: {rewritten}")


@cross_api_property
def test_integrity_checks_find_no_violation(api: str, preset: str, data: st.DataObject) -> None:
    history, turns = drawn_session(data, api)
    original, condensed = RequestView(COUNT), RequestView(COUNT)
    validated: set[bytes] = set()  # kept per session, as the replay does
    for request, result in run_session(ENGINES[preset], api, history, turns):
        o = original.advance(request, api)
        c = condensed.advance(result.request, api)
        assert check_integrity(request, result.request, api, o, c, validated) == {}


@cross_api_property
def test_only_text_payloads_change(api: str, preset: str, data: st.DataObject) -> None:
    """Stricter than the integrity checks' shape: each changed string is a text the
    safety model lets a pass rewrite, in an item or block of a type that has it."""
    history, turns = drawn_session(data, api)
    for request, result in run_session(ENGINES[preset], api, history, turns):
        assert list(result.request) == list(request)
        for key in request:
            if key != MESSAGE_KEYS[api]:
                assert dumps(result.request[key]) == dumps(request[key]), key
        for path, _, _ in changed_texts(request, result.request):
            assert payload_path(api, request, path), path


@cross_api_property
def test_request_is_never_mutated(api: str, preset: str, data: st.DataObject) -> None:
    history, turns = drawn_session(data, api)
    requests = turn_requests(api, history, turns)
    before = copy.deepcopy(requests)
    session = fresh_session()
    for request, kept in zip(requests, before, strict=True):
        ENGINES[preset].condense(request, api=api, session=session)
        assert request == kept and dumps(request) == dumps(kept)
    assert requests == before  # nor an earlier turn's, through the values they share


@cross_api_property
def test_references_recall_and_error_lines_stay_visible(
    api: str, preset: str, data: st.DataObject
) -> None:
    history, turns = drawn_session(data, api)
    engine = ENGINES[preset]
    rewritten = 0
    for request, result in run_session(engine, api, history, turns):
        rewritten = check_recall_and_errors(engine, api, request, result.request)
    event(f"texts rewritten on the last turn: {min(rewritten, 10)}{'+' * (rewritten >= 10)}")


@cross_api_property
def test_two_fresh_engines_send_the_same_bytes(api: str, preset: str, data: st.DataObject) -> None:
    history, turns = drawn_session(data, api)
    first, second = make_engine(preset, FORCE), make_engine(preset, FORCE)
    session, elsewhere = fresh_session(), fresh_session()
    for turn, request in enumerate(turn_requests(api, history, turns)):
        a = first.condense(request, api=api, session=session)
        b = second.condense(copy.deepcopy(request), api=api, session=session)
        assert orjson.dumps(a.request) == orjson.dumps(b.request), f"turn {turn}"
        # nor does an engine that served many sessions before (warm memos) send other bytes
        c = ENGINES[preset].condense(copy.deepcopy(request), api=api, session=elsewhere)
        assert orjson.dumps(c.request) == orjson.dumps(a.request), f"turn {turn} (warm engine)"


@cross_api_property
def test_the_newest_tool_result_stays_whole(api: str, preset: str, data: st.DataObject) -> None:
    """Over any outputs (a newest result the truncation guardrail cuts excepted)."""
    history, turns = drawn_session(data, api)
    exempt = False
    for request, result in run_session(ENGINES[preset], api, history, turns):
        exempt |= check_newest_result(api, request, result.request, strict=False)
    event(f"newest result rewritten by a pass that ignores recency: {exempt}")


def _set_first_text(api: str, result: dict[str, Any], text: str) -> None:
    key = "content" if api == ANTHROPIC else "output"
    value = result[key]
    if isinstance(value, str):
        result[key] = text
    elif result.get("type") == "shell_call_output":
        chunk = value[0]
        chunk["stdout" if isinstance(chunk.get("stdout"), str) else "stderr"] = text
    else:
        next(b for b in value if b.get("type") in ("text", "input_text"))["text"] = text


@st.composite
def lossless_newest(draw: st.DrawFn, api: str, how: str) -> dict[str, Any]:
    """A history whose newest result (outside the protected tail) repeats an earlier
    output, or is pretty-printed JSON."""
    history = draw(HISTORIES[api])
    key = MESSAGE_KEYS[api]
    items = history[key]
    while _model_turn(api, items[-1]):  # a prefill: the last results would be protected
        items.pop()
    items += [
        {"role": "assistant", "content": "Summary so far."},
        {"role": "user", "content": "go"},
    ]
    found = [w for w in tool_results(api, history) if result_texts(api, _at(api, history, w))]
    assume(len(found) >= 2)
    if how == "repeat":
        text = lines("again", 60)
        _set_first_text(api, _at(api, history, found[0]), text)
    else:
        text = json.dumps({"items": [{"id": i, "name": f"item_{i}"} for i in range(40)]}, indent=2)
    _set_first_text(api, _at(api, history, found[-1]), text)
    return history


@parametrize("how", ["repeat", "pretty_json"])
@parametrize("preset", PRESETS)
@parametrize("api", APIS)
@settings(PROPERTY, max_examples=3)
@given(data=st.data())
def test_the_newest_result_stays_whole_where_a_lossless_pass_applies(
    api: str, preset: str, how: str, data: st.DataObject
) -> None:
    history = data.draw(lossless_newest(api, how), label="history")
    result = ENGINES[preset].condense(history, api=api, session=fresh_session())
    check_newest_result(api, history, result.request, strict=False)  # truncation aside


# -- fixed examples: the histories above really are condensed ----------------------------


def fixed_responses() -> dict[str, Any]:
    err = ((40, ERRORS[0]), (70, ERRORS[1]))
    items: list[dict[str, Any]] = [
        r_message("user", TASK, False),
        {"id": "fc_up0"},
        {"type": "item_reference", "id": "msg_up1"},
    ]
    for k in range(4):
        sh = r_call("shell_call", f"{k}s", COMMANDS[k])
        ap = r_call("apply_patch_call", f"{k}p", "", diff(f"p{k}", 120))
        fn = r_call("function_call", f"{k}f", "", source(f"f{k}", 40, True))
        cu = r_call("custom_tool_call", f"{k}c", "", diff(f"c{k}", 80))
        items += [
            r_reasoning(k, prose(f"s{k}", 30)),
            sh,
            ap,
            fn,
            cu,
            r_output(sh, [lines(f"out{k}", 120, err), "", lines(f"e{k}", 60), ""]),
            r_output(ap, [lines(f"ap{k}", 80)]),
            r_output(fn, [lines(f"fn{k}", 90), "done"], "parts_image"),
            r_output(cu, [lines(f"cu{k}", 100, err)]),
        ]
    items.append(r_message("assistant", "Summary so far.", True, 9))
    items.append(r_message("user", "continue", False))
    return {
        "model": "gpt-5",
        "instructions": SYSTEM,
        "tools": R_TOOLS,
        "previous_response_id": "resp_prev_1",
        "input": items,
    }


def fixed_anthropic() -> dict[str, Any]:
    err = ((40, ERRORS[0]), (70, ERRORS[1]))
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for k in range(4):
        uses = [
            a_tool_use(f"{k}a", COMMANDS[k]),
            a_tool_use(f"{k}b", "", source(f"w{k}", 40, True)),
        ]
        results = [
            a_tool_result(uses[0], [lines(f"out{k}", 120, err)], is_error=True),
            a_tool_result(uses[1], [lines(f"b{k}", 90), "exit 0"], "blocks", "image", cache=True),
        ]
        thinking = {"type": "thinking", "thinking": prose(f"t{k}", 30), "signature": f"{SIG}{k}"}
        blocks = [
            thinking,
            {"type": "redacted_thinking", "data": f"Emw-{k}"},
            {"type": "text", "text": prose(f"say{k}", 40)},
            *a_web_search(str(k)),
        ]
        messages += [
            {"role": "assistant", "content": blocks + uses},
            {"role": "user", "content": results},
        ]
    messages += [
        {"role": "assistant", "content": "Summary so far."},
        {"role": "user", "content": "continue"},
    ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "tools": A_TOOLS,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": CACHE}],
        "messages": messages,
    }


@parametrize("preset", PRESETS)
@parametrize("api", APIS)
def test_a_fixed_history_is_condensed_and_keeps_every_property(api: str, preset: str) -> None:
    history = fixed_responses() if api == RESPONSES else fixed_anthropic()
    engine = ENGINES[preset]
    before = copy.deepcopy(history)
    original, condensed = RequestView(COUNT), RequestView(COUNT)
    for request, result in run_session(engine, api, history, 4):
        assert result.report["fallback_reason"] is None
        o, c = original.advance(request, api), condensed.advance(result.request, api)
        assert check_integrity(request, result.request, api, o, c) == {}
        check_newest_result(api, request, result.request)
        rewritten = check_recall_and_errors(engine, api, request, result.request)
    assert history == before
    assert result.report["rewritten"] and rewritten >= 4
    paths = {path for path, _, _ in changed_texts(history, result.request)}
    keys = {tuple(k for k in p if isinstance(k, str)) for p in paths}
    if api == RESPONSES:  # the oldest turn's shell stdout, patch diff and outputs
        assert ("input", 8, "output", 0, "stdout") in paths
        assert ("input", "output", "stdout") in keys and ("input", "operation", "diff") in keys
        assert ("input", "output") in keys and ("input", "output", "text") in keys
        assert dumps(result.request["input"][3]) == dumps(history["input"][3])  # reasoning
    else:
        assert ("messages", 2, "content", 0, "content") in paths
        assert ("messages", "content", "content", "text") in keys
        # the oldest call's written file (an input object's string), kept as an object
        assert ("messages", 1, "content", 6, "input", "content") in paths
        assert all(
            dumps(a) == dumps(b)
            if a["type"] != "tool_use"
            else dumps({**a, "input": None}) == dumps({**b, "input": None})
            for m, n in zip(history["messages"], result.request["messages"], strict=True)
            if isinstance(m["content"], list)
            for a, b in zip(m["content"], n["content"], strict=True)
            if a["type"] != "tool_result" and a["type"] != "text"
        )


KEEPING_NOTHING = {
    p: make_engine(p, {**FORCE, "keep_newest_calls": 0, "keep_newest_texts": 0}) for p in PRESETS
}
"""Engines that keep no call or text of the newest turns for recency."""


@parametrize("preset", PRESETS)
@PROPERTY
@given(data=st.data())
def test_the_latest_assistant_message_with_thinking_stays_exact(
    preset: str, data: st.DataObject
) -> None:
    """Anthropic refuses a request whose latest assistant message with thinking blocks
    differs from the response it came from: even with no recency kept, its texts and
    call inputs are sent as they were."""
    history, turns = drawn_session(data, ANTHROPIC)
    checked = 0
    for request, result in run_session(KEEPING_NOTHING[preset], ANTHROPIC, history, turns):
        messages = request["messages"]
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        content = messages[last]["content"]
        if isinstance(content, list) and any(
            b["type"] in ("thinking", "redacted_thinking") for b in content
        ):
            assert dumps(result.request["messages"][last]) == dumps(messages[last])
            checked += 1
    event(f"latest assistant messages with thinking checked: {checked > 0}")
