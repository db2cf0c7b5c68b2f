"""Request shapes the provider SDKs type as valid, through the adapters and the engine.

Every shape below is built from the request parameter types of the installed SDKs:
openai 3.57 (``openai/types/chat/*param*.py``, ``openai/types/responses/*param*.py``:
``ResponseInputItemParam`` and every item and content type in it) and anthropic 2.14
(``anthropic/types/*param*.py``, ``anthropic/types/beta/*param*.py``: ``MessageParam``,
every content block and tool-result content type). For each shape:

- ``render(parse(x))`` is ``x`` byte for byte;
- ``Engine().condense`` neither raises nor falls back;
- placed early in a long history that the balanced and aggressive presets do condense,
  its control-plane items come back byte-identical; payload shapes (tool output text)
  may change only in their text leaves, each of which recalls its original.

Cases tagged with a :class:`Fixed` note once failed: the note says how, so a
regression reads as what it is.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from ctxwarden import Engine, EngineConfig
from ctxwarden.adapters import get_adapter
from ctxwarden.model import classify
from ctxwarden.store.base import REF_PATTERN
from tests.wire_diff import changed_texts, value_at

R, C, A = "openai.responses", "openai.chat", "anthropic.messages"

SIG = "EqQBCkgIARABGAIiQ" + "s" * 60
ENC = "gAAAAABo" + "Z" * 200
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"

Item = dict[str, Any]


def _dumps(value: Any) -> str:
    """JSON text in key order (the standard library: it writes any integer exactly)."""
    return json.dumps(value, ensure_ascii=False)


def _lines(tag: str, n: int = 100) -> str:
    """``n`` distinct lines: enough tokens that a condensing pass would take them."""
    return "\n".join(
        f"{tag} line {i}: checked src/{tag}/mod_{i}.py value={i * 7} ok" for i in range(n)
    )


# -- bugs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixed:
    """A bug a case once ran into (it is fixed): what the SDK allows, what failed."""

    reason: str


UNTYPED_REF = Fixed(
    "Responses ItemReference's `type` is optional in the SDK ({'id': ...} alone is valid); "
    "openai_responses._item read a type-less item as a message and raised "
    "MalformedRequest at /input/N/role"
)
OUTPUT_NO_CALL_ID = Fixed(
    "Responses FunctionCallOutput's `call_id` is Optional in openai 3.57; "
    "openai_responses._item required it and raised MalformedRequest at /input/N/call_id"
)
SYSTEM_NO_CONTENT = Fixed(
    "Anthropic BetaSystemMessageParam's `content` is optional (a system message carrying "
    "only output_config is valid); anthropic_messages._message required content and "
    "raised MalformedRequest at /messages/N/content"
)


@dataclass(frozen=True)
class Shape:
    """Items of one API shape: placed after the opening messages of a request."""

    id: str
    api: str
    items: list[Item]
    fixed: Fixed | None = None
    payload: frozenset[tuple[str, ...]] = frozenset()
    """Index-free paths (relative to an item) where condensing may rewrite text."""
    long: bool = True
    """Whether the shape fits in the middle of a history (not only at its end)."""


def _fc(call_id: str, name: str = "bash", arguments: str = '{"command": "ls"}') -> Item:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def _tool_use(tid: str, name: str = "bash", **extra: Any) -> Item:
    return {"type": "tool_use", "id": tid, "name": name, "input": {"command": "ls"}, **extra}


def _chat_call(cid: str, name: str = "bash") -> Item:
    fn = {"name": name, "arguments": '{"command": "ls"}'}
    return {"id": cid, "type": "function", "function": fn}


_TEXT = frozenset({("output",), ("output", "#", "text")})
_CHAT_TOOL = frozenset({("content",), ("content", "#", "text")})
_TOOL_RESULT = frozenset({("content", "#", "content"), ("content", "#", "content", "#", "text")})

# -- OpenAI Responses ------------------------------------------------------------------

RESPONSES: list[Shape] = [
    Shape(
        "message_input_parts",
        R,
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "see the screenshot",
                        "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"},
                    },
                    {"type": "input_image", "image_url": PNG, "detail": "high"},
                    {"type": "input_file", "file_id": "file-abc", "detail": "auto"},
                ],
            }
        ],
    ),
    Shape(
        "message_system_typed",
        R,
        [
            {
                "type": "message",
                "role": "system",
                "status": "completed",
                "content": [{"type": "input_text", "text": "be brief"}],
            }
        ],
    ),
    Shape("message_developer", R, [{"role": "developer", "content": "use the tests"}]),
    Shape(
        "output_message_phase_refusal",
        R,
        [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "phase": "commentary",
                "content": [
                    {"type": "output_text", "text": "checking", "annotations": []},
                    {"type": "refusal", "refusal": "I can't run that."},
                ],
            }
        ],
    ),
    Shape(
        "output_text_annotated",
        R,
        [
            {
                "type": "message",
                "id": "msg_2",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": _lines("cited"),
                        "annotations": [
                            {
                                "type": "url_citation",
                                "url": "https://docs.example.com",
                                "title": "docs",
                                "start_index": 0,
                                "end_index": 5,
                            }
                        ],
                    }
                ],
            }
        ],
    ),
    Shape(
        "function_call_namespace_caller",
        R,
        [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_ns",
                "name": "lookup",
                "namespace": "crm",
                "arguments": '{"q": "x"}',
                "caller": {"type": "direct"},
                "status": "completed",
            },
            {
                "type": "function_call_output",
                "id": "fco_1",
                "call_id": "call_ns",
                "name": "lookup",
                "namespace": "crm",
                "caller": {"type": "direct"},
                "status": "completed",
                "output": _lines("crm"),
            },
        ],
        payload=_TEXT,
    ),
    Shape(
        "parallel_function_calls",
        R,
        [
            _fc("call_p1"),
            _fc("call_p2"),
            {"type": "function_call_output", "call_id": "call_p1", "output": _lines("p1")},
            {"type": "function_call_output", "call_id": "call_p2", "output": _lines("p2")},
        ],
        payload=_TEXT,
    ),
    Shape(
        "function_call_output_array",
        R,
        [
            _fc("call_arr"),
            {
                "type": "function_call_output",
                "call_id": "call_arr",
                "output": [
                    {"type": "input_text", "text": _lines("arr")},
                    {"type": "input_image", "image_url": PNG, "detail": "low"},
                    {"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"},
                ],
            },
        ],
        payload=_TEXT,
    ),
    Shape(
        "custom_tool_call_pair",
        R,
        [
            {
                "type": "custom_tool_call",
                "id": "ctc_1",
                "call_id": "call_cu",
                "name": "apply_patch",
                "input": "*** Begin Patch\n*** End Patch",
            },
            {"type": "custom_tool_call_output", "call_id": "call_cu", "output": _lines("cu")},
        ],
        payload=_TEXT,
    ),
    Shape(
        "custom_tool_call_output_array",
        R,
        [
            {"type": "custom_tool_call", "call_id": "call_ca", "name": "grep", "input": "TODO"},
            {
                "type": "custom_tool_call_output",
                "call_id": "call_ca",
                "output": [
                    {"type": "input_text", "text": _lines("ca")},
                    {"type": "input_image", "file_id": "file-img", "detail": "auto"},
                ],
            },
        ],
        payload=_TEXT,
    ),
    Shape(
        "reasoning_encrypted",
        R,
        [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": _lines("sum", 30)}],
                "content": [{"type": "reasoning_text", "text": _lines("raw", 30)}],
                "encrypted_content": ENC,
                "status": "completed",
            },
            _fc("call_rs"),
            {"type": "function_call_output", "call_id": "call_rs", "output": "ok"},
        ],
    ),
    Shape("compaction", R, [{"type": "compaction", "id": "cmp_1", "encrypted_content": ENC}]),
    Shape("compaction_trigger", R, [{"type": "compaction_trigger", "id": "ct_1"}]),
    Shape("item_reference_typed", R, [{"type": "item_reference", "id": "msg_0"}]),
    Shape("item_reference_untyped", R, [{"id": "msg_0"}], fixed=UNTYPED_REF),
    Shape("item_reference_null_type", R, [{"id": "msg_0", "type": None}], fixed=UNTYPED_REF),
    Shape(
        "item_reference_untyped_holds_the_call",
        R,
        [
            {"id": "fc_upstream"},
            {"type": "function_call_output", "call_id": "call_up", "output": _lines("up")},
        ],
        fixed=UNTYPED_REF,
        payload=_TEXT,
    ),
    Shape(
        "function_call_output_without_call_id",
        R,
        [
            _fc("call_nc", name="lookup"),
            {"type": "function_call_output", "id": "fco_nc", "name": "lookup", "output": "ok"},
        ],
        fixed=OUTPUT_NO_CALL_ID,
    ),
    Shape(
        "shell_call_pair",
        R,
        [
            {
                "type": "shell_call",
                "id": "sh_1",
                "call_id": "call_sh",
                "action": {"commands": ["pytest -q"], "timeout_ms": 60000},
                "environment": {"type": "local"},
                "caller": {"type": "direct"},
                "status": "completed",
            },
            {
                "type": "shell_call_output",
                "call_id": "call_sh",
                "max_output_length": 100000,
                "output": [
                    {
                        "stdout": _lines("shell"),
                        "stderr": "warning: x",
                        "outcome": {"type": "exit", "exit_code": 1},
                    },
                    {"stdout": "", "stderr": "", "outcome": {"type": "timeout"}},
                ],
            },
        ],
        payload=frozenset({("output", "#", "stdout"), ("output", "#", "stderr")}),
    ),
    Shape(
        "local_shell_call_pair",
        R,
        [
            {
                "type": "local_shell_call",
                "id": "lsh_1",
                "call_id": "call_lsh",
                "action": {"type": "exec", "command": ["ls", "-la"], "env": {"A": "1"}},
                "status": "completed",
            },
            {"type": "local_shell_call_output", "id": "lsh_1", "output": _lines("lsh")},
        ],
    ),
    Shape(
        "apply_patch_call_pair",
        R,
        [
            {
                "type": "apply_patch_call",
                "id": "ap_1",
                "call_id": "call_ap",
                "status": "completed",
                "operation": {"type": "update_file", "path": "src/a.py", "diff": _lines("diff")},
            },
            {
                "type": "apply_patch_call_output",
                "call_id": "call_ap",
                "status": "failed",
                "output": _lines("aplog"),
            },
            {
                "type": "apply_patch_call",
                "call_id": "call_ap2",
                "status": "completed",
                "operation": {"type": "delete_file", "path": "src/b.py"},
            },
            {"type": "apply_patch_call_output", "call_id": "call_ap2", "status": "completed"},
        ],
        payload=frozenset({("operation", "diff"), ("output",)}),
    ),
    Shape(
        "computer_call_pair",
        R,
        [
            {
                "type": "computer_call",
                "id": "cu_1",
                "call_id": "call_cc",
                "action": {"type": "click", "button": "left", "x": 10, "y": 20},
                "pending_safety_checks": [{"id": "sc_1", "code": "x", "message": "m"}],
                "status": "completed",
            },
            {
                "type": "computer_call_output",
                "call_id": "call_cc",
                "output": {"type": "computer_screenshot", "image_url": PNG},
                "acknowledged_safety_checks": [{"id": "sc_1"}],
            },
        ],
    ),
    Shape(
        "mcp_items",
        R,
        [
            {
                "type": "mcp_list_tools",
                "id": "mcpl_1",
                "server_label": "gh",
                "tools": [{"name": "search", "input_schema": {"type": "object"}}],
            },
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "server_label": "gh",
                "name": "search",
                "arguments": '{"q": "bug"}',
            },
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
            {
                "type": "mcp_call",
                "id": "mcp_1",
                "server_label": "gh",
                "name": "search",
                "arguments": '{"q": "bug"}',
                "approval_request_id": "mcpr_1",
                "output": _lines("mcp"),
                "status": "completed",
            },
        ],
    ),
    Shape(
        "hosted_tool_calls",
        R,
        [
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {"type": "search", "query": "pytest fixtures"},
            },
            {
                "type": "file_search_call",
                "id": "fs_1",
                "queries": ["q"],
                "status": "completed",
                "results": [{"file_id": "f", "text": _lines("fs", 30), "score": 0.5}],
            },
            {
                "type": "image_generation_call",
                "id": "ig_1",
                "result": "AAAA",
                "status": "completed",
            },
            {
                "type": "code_interpreter_call",
                "id": "ci_1",
                "code": "print(1)",
                "container_id": "cntr_1",
                "outputs": [{"type": "logs", "logs": _lines("ci", 30)}],
                "status": "completed",
            },
        ],
    ),
    Shape(
        "tool_search_pair",
        R,
        [
            {
                "type": "tool_search_call",
                "id": "tsc_1",
                "call_id": "call_ts",
                "arguments": {"query": "crm"},
                "execution": "client",
                "status": "completed",
            },
            {
                "type": "tool_search_output",
                "call_id": "call_ts",
                "execution": "client",
                "status": "completed",
                "tools": [
                    {"type": "function", "name": "lookup", "parameters": {}, "strict": False}
                ],
            },
        ],
    ),
    Shape(
        "additional_tools",
        R,
        [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [{"type": "function", "name": "late", "parameters": {}, "strict": True}],
            }
        ],
    ),
    Shape(
        "configuration_update",
        R,
        [{"type": "configuration_update", "reasoning": {"effort": "low"}}],
    ),
    Shape(
        "program_items",
        R,
        [
            {
                "type": "program",
                "id": "pg_1",
                "call_id": "call_pg",
                "code": "lookup('x')",
                "fingerprint": "fp_1",
            },
            {
                **_fc("call_inner", name="lookup"),
                "caller": {"type": "program", "caller_id": "call_pg"},
            },
            {
                "type": "function_call_output",
                "call_id": "call_inner",
                "caller": {"type": "program", "caller_id": "call_pg"},
                "output": "found",
            },
            {
                "type": "program_output",
                "id": "pgo_1",
                "call_id": "call_pg",
                "result": _lines("prog"),
                "status": "completed",
            },
        ],
    ),
]

RESPONSES_TOP: list[tuple[str, dict[str, Any]]] = [
    ("string_input", {"model": "gpt-5", "input": "hello", "instructions": "be brief"}),
    ("prompt_only", {"model": "gpt-5", "prompt": {"id": "pmpt_1", "variables": {"a": "b"}}}),
    (
        "previous_response_id",
        {
            "model": "gpt-5",
            "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "call_up", "output": "ok"}],
        },
    ),
    (
        "conversation_object",
        {
            "model": "gpt-5",
            "conversation": {"id": "conv_1"},
            "input": [{"type": "function_call_output", "call_id": "call_up", "output": "ok"}],
        },
    ),
    (
        "previous_response_id_output_without_call_id",
        {
            "model": "gpt-5",
            "previous_response_id": "resp_1",
            # once refused: see OUTPUT_NO_CALL_ID
            "input": [{"type": "function_call_output", "name": "lookup", "output": "ok"}],
        },
    ),
]

# -- OpenAI Chat Completions -----------------------------------------------------------

CHAT: list[Shape] = [
    Shape(
        "system_parts_and_names",
        C,
        [
            {"role": "system", "name": "ops", "content": [{"type": "text", "text": "sys 2"}]},
            {"role": "developer", "content": [{"type": "text", "text": "dev"}]},
            {"role": "developer", "name": "dev", "content": "dev 2"},
        ],
    ),
    Shape(
        "user_media_parts",
        C,
        [
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {
                        "type": "text",
                        "text": "look",
                        "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"},
                    },
                    {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                    {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}},
                    {"type": "file", "file": {"file_data": "JVBERi0="}},
                ],
            }
        ],
    ),
    Shape(
        "assistant_null_content_tool_calls",
        C,
        [
            {"role": "assistant", "content": None, "tool_calls": [_chat_call("call_n")]},
            {"role": "tool", "tool_call_id": "call_n", "content": _lines("n")},
        ],
        payload=_CHAT_TOOL,
    ),
    Shape(
        "assistant_without_content_key",
        C,
        [
            {"role": "assistant", "tool_calls": [_chat_call("call_k")]},
            {"role": "tool", "tool_call_id": "call_k", "content": _lines("k")},
        ],
        payload=_CHAT_TOOL,
    ),
    Shape(
        "tool_content_text_parts",
        C,
        [
            {"role": "assistant", "content": None, "tool_calls": [_chat_call("call_tp")]},
            {
                "role": "tool",
                "tool_call_id": "call_tp",
                "content": [
                    {"type": "text", "text": _lines("tpa", 60)},
                    {"type": "text", "text": _lines("tpb", 60)},
                ],
            },
        ],
        payload=_CHAT_TOOL,
    ),
    Shape(
        "parallel_tool_calls",
        C,
        [
            {
                "role": "assistant",
                "content": "two at once",
                "tool_calls": [_chat_call("call_a"), _chat_call("call_b")],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": _lines("pa")},
            {"role": "tool", "tool_call_id": "call_b", "content": _lines("pb")},
        ],
        payload=_CHAT_TOOL,
    ),
    Shape(
        "custom_tool_call",
        C,
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_cu",
                        "type": "custom",
                        "custom": {"name": "apply_patch", "input": _lines("patch")},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_cu", "content": _lines("cu")},
        ],
        payload=_CHAT_TOOL | {("tool_calls", "#", "custom", "input")},
    ),
    Shape(
        "legacy_function_call",
        C,
        [
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "bash", "arguments": '{"command": "ls"}'},
            },
            {"role": "function", "name": "bash", "content": _lines("fn")},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "bash", "arguments": "{}"},
            },
            {"role": "function", "name": "bash", "content": None},
        ],
        payload=frozenset({("content",), ("function_call", "arguments")}),
    ),
    Shape(
        "refusal_audio",
        C,
        [
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            {"role": "user", "content": "ok, something else"},
            {
                "role": "assistant",
                "name": "bot",
                "content": [
                    {"type": "text", "text": "partly"},
                    {"type": "refusal", "refusal": "the rest I can't"},
                ],
            },
            {"role": "user", "content": "say it"},
            {"role": "assistant", "content": None, "audio": {"id": "audio_abc"}},
            {"role": "user", "content": "thanks"},
        ],
    ),
]

# -- Anthropic Messages ----------------------------------------------------------------

_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
_THINKING = {"type": "thinking", "thinking": _lines("think", 30), "signature": SIG}
_REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy" + "r" * 80}

ANTHROPIC: list[Shape] = [
    Shape(
        "tool_result_block_array",
        A,
        [
            {"role": "assistant", "content": [_tool_use("toolu_arr")]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_arr",
                        "content": [
                            {"type": "text", "text": _lines("tr")},
                            _IMAGE,
                            {
                                "type": "search_result",
                                "source": "https://kb.example.com/a",
                                "title": "KB",
                                "content": [{"type": "text", "text": _lines("sr", 30)}],
                                "citations": {"enabled": True},
                            },
                            {
                                "type": "document",
                                "source": {
                                    "type": "text",
                                    "media_type": "text/plain",
                                    "data": _lines("doc", 30),
                                },
                                "title": "notes",
                            },
                        ],
                    }
                ],
            },
        ],
        payload=_TOOL_RESULT,
    ),
    Shape(
        "tool_result_tool_reference",
        A,
        [
            {"role": "assistant", "content": [_tool_use("toolu_ref", "find_tools")]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_ref",
                        "content": [{"type": "tool_reference", "tool_name": "lookup"}],
                    }
                ],
            },
        ],
    ),
    Shape(
        "tool_result_browser_state",
        A,
        [
            {"role": "assistant", "content": [_tool_use("toolu_br", "browser")]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_br",
                        "content": [
                            {"type": "text", "text": _lines("br")},
                            {"type": "browser_state", "tabs": []},
                        ],
                    }
                ],
            },
        ],
        payload=_TOOL_RESULT,
    ),
    Shape(
        "parallel_tool_use_then_other_blocks",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "two checks"},
                    _tool_use("toolu_p1"),
                    _tool_use("toolu_p2", cache_control={"type": "ephemeral"}),
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_p1", "content": _lines("p1")},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_p2",
                        "is_error": True,
                        "content": [{"type": "text", "text": _lines("p2")}],
                    },
                    {"type": "text", "text": "also look at this"},
                    _IMAGE,
                    {"type": "container_upload", "file_id": "file_up"},
                ],
            },
        ],
        payload=_TOOL_RESULT,
    ),
    Shape(
        "tool_result_without_content_and_cited",
        A,
        [
            {"role": "assistant", "content": [_tool_use("toolu_e"), _tool_use("toolu_c")]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_e"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_c",
                        "content": [
                            {
                                "type": "text",
                                "text": _lines("cite"),
                                "citations": [
                                    {
                                        "type": "char_location",
                                        "cited_text": "x",
                                        "document_index": 0,
                                        "start_char_index": 0,
                                        "end_char_index": 1,
                                    }
                                ],
                            }
                        ],
                    },
                ],
            },
        ],
    ),
    Shape(
        "thinking_signatures",
        A,
        [
            {"role": "assistant", "content": [_THINKING, _REDACTED, _tool_use("toolu_th")]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_th", "content": "ok"}],
            },
            {
                "role": "assistant",
                "content": [_THINKING, {"type": "text", "text": "interleaved"}, _THINKING],
            },
            {"role": "user", "content": "go on"},
        ],
    ),
    Shape(
        "server_tool_web_search",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_ws",
                        "name": "web_search",
                        "input": {"query": "pytest"},
                        "caller": {"type": "direct"},
                    },
                    {
                        "type": "web_search_tool_result",
                        "tool_use_id": "srvtoolu_ws",
                        "content": [
                            {
                                "type": "web_search_result",
                                "url": "https://docs.pytest.org",
                                "title": "pytest",
                                "encrypted_content": ENC,
                                "page_age": "1 day",
                            }
                        ],
                    },
                    {
                        "type": "text",
                        "text": _lines("ws", 20),
                        "citations": [
                            {
                                "type": "web_search_result_location",
                                "url": "https://docs.pytest.org",
                                "title": "pytest",
                                "encrypted_index": "EqgB",
                                "cited_text": "fixtures",
                            }
                        ],
                    },
                ],
            },
            {"role": "user", "content": "thanks"},
        ],
    ),
    Shape(
        "server_tool_web_fetch",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_wf",
                        "name": "web_fetch",
                        "input": {"url": "https://example.com"},
                    },
                    {
                        "type": "web_fetch_tool_result",
                        "tool_use_id": "srvtoolu_wf",
                        "content": {
                            "type": "web_fetch_result",
                            "url": "https://example.com",
                            "content": {
                                "type": "document",
                                "source": {
                                    "type": "text",
                                    "media_type": "text/plain",
                                    "data": _lines("page"),
                                },
                            },
                            "retrieved_at": "2026-01-01T00:00:00Z",
                        },
                    },
                ],
            },
            {"role": "user", "content": "ok"},
        ],
    ),
    Shape(
        "code_execution_results",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_ce",
                        "name": "code_execution",
                        "input": {"code": "print(1)"},
                    },
                    {
                        "type": "code_execution_tool_result",
                        "tool_use_id": "srvtoolu_ce",
                        "content": {
                            "type": "code_execution_result",
                            "stdout": _lines("ce"),
                            "stderr": "",
                            "return_code": 0,
                            "content": [],
                        },
                    },
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_bc",
                        "name": "bash_code_execution",
                        "input": {"command": "ls"},
                    },
                    {
                        "type": "bash_code_execution_tool_result",
                        "tool_use_id": "srvtoolu_bc",
                        "content": {
                            "type": "bash_code_execution_result",
                            "stdout": _lines("bc"),
                            "stderr": "",
                            "return_code": 0,
                            "content": [{"type": "bash_code_execution_output", "file_id": "f1"}],
                        },
                    },
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_te",
                        "name": "text_editor_code_execution",
                        "input": {"command": "view", "path": "/tmp/a.py"},
                    },
                    {
                        "type": "text_editor_code_execution_tool_result",
                        "tool_use_id": "srvtoolu_te",
                        "content": {
                            "type": "text_editor_code_execution_view_result",
                            "content": _lines("te"),
                            "file_type": "text",
                            "num_lines": 100,
                            "start_line": 1,
                            "total_lines": 100,
                        },
                    },
                ],
            },
            {"role": "user", "content": "ok"},
        ],
    ),
    Shape(
        "tool_search_tool_result",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_ts",
                        "name": "tool_search_tool_regex",
                        "input": {"pattern": "crm"},
                    },
                    {
                        "type": "tool_search_tool_result",
                        "tool_use_id": "srvtoolu_ts",
                        "content": {
                            "type": "tool_search_tool_search_result",
                            "tool_references": [{"type": "tool_reference", "tool_name": "lookup"}],
                        },
                    },
                ],
            },
            {"role": "user", "content": "ok"},
        ],
    ),
    Shape(
        "mcp_tool_use_and_result",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "mcp_tool_use",
                        "id": "mcptoolu_1",
                        "name": "search",
                        "server_name": "gh",
                        "input": {"q": "bug"},
                    },
                    {
                        "type": "mcp_tool_result",
                        "tool_use_id": "mcptoolu_1",
                        "is_error": False,
                        "content": [{"type": "text", "text": _lines("mcp")}],
                    },
                    {
                        "type": "mcp_tool_listing",
                        "mcp_server_name": "gh",
                        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
                    },
                ],
            },
            {"role": "user", "content": "ok"},
        ],
    ),
    Shape(
        "top_level_search_result_and_document",
        A,
        [
            {"role": "assistant", "content": "Send me the sources."},
            {
                "role": "user",
                "content": [
                    {
                        "type": "search_result",
                        "source": "https://kb.example.com/b",
                        "title": "KB",
                        "content": [{"type": "text", "text": _lines("srt")}],
                    },
                    {
                        "type": "document",
                        "source": {"type": "url", "url": "https://example.com/a.pdf"},
                        "title": "spec",
                        "context": "the spec",
                        "citations": {"enabled": True},
                    },
                    {"type": "text", "text": "here"},
                ],
            },
        ],
    ),
    Shape(
        "compaction_block",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "compaction", "content": _lines("compacted")},
                    {"type": "text", "text": "continuing"},
                ],
            },
            {"role": "user", "content": "go"},
        ],
    ),
    Shape(
        "fallback_block",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    _THINKING,
                    {"type": "fallback", "to": {"model": "claude-sonnet-4-5"}, "trigger": None},
                    _THINKING,
                    {"type": "text", "text": "after the hop"},
                ],
            },
            {"role": "user", "content": "go"},
        ],
    ),
    Shape(
        "advisor_tool_result",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_ad",
                        "name": "advisor",
                        "input": {},
                    },
                    {
                        "type": "advisor_tool_result",
                        "tool_use_id": "srvtoolu_ad",
                        "content": {"type": "advisor_result", "text": _lines("adv")},
                    },
                ],
            },
            {"role": "user", "content": "go"},
        ],
    ),
    Shape(
        "programmatic_tool_caller",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_pg",
                        "name": "code_execution",
                        "input": {"code": "lookup('x')"},
                    },
                    {
                        **_tool_use("toolu_pg", "lookup"),
                        "caller": {"type": "code_execution_20250825", "tool_id": "srvtoolu_pg"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_pg", "content": _lines("pg")}
                ],
            },
        ],
        payload=_TOOL_RESULT,
    ),
    Shape(
        "response_blocks_echoed",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "checking", "citations": None},
                    {**_tool_use("toolu_rb"), "caller": {"type": "direct"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_rb", "content": "ok"}],
            },
        ],
    ),
    Shape(
        "system_message",
        A,
        [
            {"role": "assistant", "content": "done with step one"},
            {"role": "system", "content": "from now on, be terse"},
            {"role": "user", "content": "next"},
        ],
    ),
    Shape(
        "beta_system_message_blocks",
        A,
        [
            {"role": "assistant", "content": "done with step one"},
            {
                "role": "system",
                "clear_at": "next_user_message",
                "content": [
                    {"type": "text", "text": "a new tool"},
                    {"type": "tool_addition", "tool": {"type": "tool_reference", "tool_name": "x"}},
                    {"type": "tool_removal", "tool": {"type": "tool_reference", "tool_name": "y"}},
                ],
                "output_config": {"effort": "low"},
            },
            {"role": "user", "content": "next"},
        ],
    ),
    Shape(
        "beta_system_message_output_config_only",
        A,
        [
            {"role": "assistant", "content": "done with step one"},
            {"role": "user", "content": "next"},
            {"role": "system", "output_config": {"effort": "high"}},
        ],
        fixed=SYSTEM_NO_CONTENT,
    ),
    Shape(
        "pause_turn_continuation",
        A,
        [
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_pt",
                        "name": "web_search",
                        "input": {"query": "q"},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_pt", "content": []},
                ],
            }
        ],
        long=False,
    ),
]

SHAPES = RESPONSES + CHAT + ANTHROPIC
ANTHROPIC_BY_ID = {s.id: s for s in ANTHROPIC}


def _param(shape: Shape) -> Any:
    return pytest.param(shape, id=f"{shape.api}-{shape.id}")


# -- requests --------------------------------------------------------------------------


def _short(shape: Shape) -> dict[str, Any]:
    """A minimal realistic request holding the shape."""
    items = copy.deepcopy(shape.items)
    if shape.api == R:
        body: dict[str, Any] = {
            "model": "gpt-5",
            "instructions": "You are a coding agent.",
            "input": [{"role": "user", "content": "fix the bug"}, *items],
        }
    elif shape.api == C:
        body = {
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "fix the bug"},
                *items,
            ],
        }
    else:
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a coding agent."}],
            "messages": [{"role": "user", "content": "fix the bug"}, *items],
        }
    return body


def _turn(api: str, k: int) -> list[Item]:
    """One old turn: a call and its big output."""
    command = json.dumps({"command": f"pytest -k t{k}"})
    if api == R:
        return [
            _fc(f"call_{k}", arguments=command),
            {"type": "function_call_output", "call_id": f"call_{k}", "output": _lines(f"t{k}")},
        ]
    if api == C:
        return [
            {"role": "assistant", "content": None, "tool_calls": [_chat_call(f"call_{k}")]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": _lines(f"t{k}")},
        ]
    return [
        {
            "role": "assistant",
            "content": [{"type": "text", "text": f"Running t{k}."}, _tool_use(f"toolu_{k}")],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": _lines(f"t{k}")}
            ],
        },
    ]


TURNS = 32
AT = 3


def _long(shape: Shape) -> tuple[dict[str, Any], str, int]:
    """A long history with the shape among its old turns: the request, its message key
    and the index of the shape's first item."""
    body = _short(shape)
    key = "input" if shape.api == R else "messages"
    head = body[key][: len(body[key]) - len(shape.items)]
    items: list[Item] = list(head)
    start = -1
    for k in range(TURNS):
        if k == AT:
            start = len(items)
            items.extend(copy.deepcopy(shape.items))
        items.extend(_turn(shape.api, k))
    items.append({"role": "assistant", "content": "Looking at the results."})
    items.append({"role": "user", "content": "please continue"})
    return {**body, key: items}, key, start


def _engine(preset: str) -> Engine:
    return Engine(EngineConfig(preset=preset, store={"backend": "memory"}))


# -- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [_param(s) for s in SHAPES])
def test_round_trip_is_exact(shape: Shape) -> None:
    request = _short(shape)
    before = _dumps(request)
    adapter = get_adapter(shape.api)
    rendered = adapter.render(classify(adapter.parse(request)))
    assert _dumps(rendered) == before
    assert _dumps(request) == before  # input not mutated


@pytest.mark.parametrize("shape", [_param(s) for s in SHAPES])
def test_condense_accepts_the_shape(shape: Shape) -> None:
    request = _short(shape)
    before = _dumps(request)
    engine = _engine("aggressive")
    result = engine.condense(request, api=shape.api)
    assert result.report["fallback_reason"] is None
    assert _dumps(request) == before
    assert _dumps(result.request) == before  # nothing old enough to condense


@pytest.mark.parametrize(
    ("name", "request_body"),
    [pytest.param(name, body, id=name) for name, body in RESPONSES_TOP],
)
def test_responses_top_level_shapes(name: str, request_body: dict[str, Any]) -> None:
    before = _dumps(request_body)
    adapter = get_adapter(R)
    assert _dumps(adapter.render(classify(adapter.parse(request_body)))) == before
    result = _engine("aggressive").condense(request_body, api=R)
    assert result.report["fallback_reason"] is None
    assert _dumps(result.request) == before


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
@pytest.mark.parametrize("shape", [_param(s) for s in SHAPES if s.long])
def test_long_history_keeps_the_shape_exact(shape: Shape, preset: str) -> None:
    """Condensing a long history leaves the shape's items as they were, but for text
    leaves of tool output (``payload``), each of which then names a reference that
    recalls its original."""
    request, key, start = _long(shape)
    before = _dumps(request)
    engine = _engine(preset)
    result = engine.condense(request, api=shape.api, session=f"sdk-{shape.id}")
    assert _dumps(request) == before
    assert result.report["fallback_reason"] is None
    assert result.report["rewritten"], "the history must be condensed for the test to mean much"
    sent = result.request
    edits = [path for path, _, _ in changed_texts(request, sent)]
    assert edits
    end = start + len(shape.items)
    for path in edits:
        assert path[0] == key and isinstance(path[1], int), path
        if not start <= path[1] < end:
            continue
        rel = tuple(k if isinstance(k, str) else "#" for k in path[2:])
        assert rel in shape.payload, f"{path} is not payload of {shape.id}"
        original, text = value_at(request, path), value_at(sent, path)
        named = REF_PATTERN.findall(text) or REF_PATTERN.findall(_dumps(sent[key][path[1]]))
        # the original, or one block of an output of several (masked as one): its first
        # block names the output's reference, and a later block's stub none
        assert any(original in engine.recall(ref) for ref in named), path
    inside = [path for path in edits if start <= path[1] < end]
    if shape.payload:  # its tool output was condensed, and only that
        assert inside, f"no payload of {shape.id} condensed"
    else:  # byte-identical
        assert not inside
        assert _dumps(sent[key][start:end]) == _dumps(shape.items)


def test_untyped_item_reference_is_an_item_reference() -> None:
    """Parsed as the typed form is: an item reference, which lifts the pairing check
    for outputs whose calls it may hold."""
    output = {"type": "function_call_output", "call_id": "call_up", "output": "ok"}
    untyped = {"model": "gpt-5", "input": [{"id": "fc_1"}, output]}
    conversation = get_adapter(R).parse(untyped)
    assert conversation.messages[0].item_type == "item_reference"
    assert conversation.messages[-1].tool_results[0].call_id == "call_up"


def test_anthropic_results_answer_calls_made_after_other_blocks() -> None:
    """tool_use after thinking, text and server-tool blocks; the results first in the
    next user message (as the API requires), then text and an image."""
    request = _short(ANTHROPIC_BY_ID["parallel_tool_use_then_other_blocks"])
    assistant = request["messages"][1]
    assistant["content"] = [_THINKING, *assistant["content"]]
    conversation = get_adapter(A).parse(request)
    calls = [c.call_id for c in conversation.messages[1].tool_calls]
    results = [r.call_id for r in conversation.messages[2].tool_results]
    assert calls == results == ["toolu_p1", "toolu_p2"]
    assert conversation.messages[2].tool_results[1].is_error


_BIG_INT_REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "messages": [
        {"role": "user", "content": "fetch order 1180591620717411303424"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_big", "name": "get", "input": {"id": 2**70}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": "ok"}],
        },
    ],
}


def test_anthropic_tool_use_input_beyond_64_bits_round_trips() -> None:
    """Once a TypeError: ``anthropic_messages._block`` called orjson unguarded."""
    request = copy.deepcopy(_BIG_INT_REQUEST)
    adapter = get_adapter(A)
    assert _dumps(adapter.render(classify(adapter.parse(request)))) == _dumps(request)


def test_anthropic_tool_use_input_beyond_64_bits_is_forwarded_as_sent() -> None:
    """The engine forwards a request with an integer orjson cannot write unchanged
    (documented in engine.py: "huge integers: forward as is"); it must not raise."""
    request = copy.deepcopy(_BIG_INT_REQUEST)
    result = _engine("aggressive").condense(request, api=A)
    assert _dumps(result.request) == _dumps(_BIG_INT_REQUEST)


@pytest.mark.parametrize(
    "kind", ["shell_call", "apply_patch_call", "tool_search_call", "program", "compaction"]
)
def test_items_the_model_produced_are_the_assistants(kind: str) -> None:
    """Once read as tool output: the newest exact messages then reached back past the
    model's last action (more kept than the issue asks, never less)."""
    from ctxwarden.adapters.openai_responses import is_model_item

    item = {"type": kind, "id": f"{kind}_1", "call_id": "call_1"}
    request = {"model": "gpt-5", "input": [{"role": "user", "content": "go"}, item]}
    (_, message) = get_adapter(R).parse(request).messages
    assert is_model_item(item) and message.role == "assistant"


@pytest.mark.parametrize("kind", ["shell_call_output", "apply_patch_call_output"])
def test_a_builtin_tool_output_pairs_with_its_call(kind: str) -> None:
    """Built-in shell and apply_patch outputs are tool results (condensable, once kept
    opaque): like a function call's output, one without its call is refused unless
    the call may be held upstream."""
    from ctxwarden.errors import MalformedRequest

    output = {"type": kind, "call_id": "call_x", "output": "ok" if "patch" in kind else []}
    request: dict[str, Any] = {"model": "gpt-5", "input": [output]}
    with pytest.raises(MalformedRequest) as info:
        get_adapter(R).parse(request)
    assert info.value.pointer == "/input/0/call_id"
    continued = get_adapter(R).parse({**request, "previous_response_id": "resp_1"})
    assert continued.messages[0].tool_results[0].call_id == "call_x"


def test_only_a_later_patch_of_the_same_file_supersedes_a_patch_output() -> None:
    """A patch's command is its operation and file (its diff is its argument text):
    the same diff on another file is another action."""
    diff = "@@\n-import os\n+import os\n+import sys\n"
    items: list[Item] = [{"role": "user", "content": "go"}]
    for i, file in enumerate(["src/a.py", "src/b.py", "src/a.py"]):
        operation = {"type": "update_file", "path": file, "diff": diff}
        log = "\n".join([*(f"{file}: check {k} passed ok_{k}" for k in range(120)), f"run {i}"])
        items += [
            {"type": "apply_patch_call", "call_id": f"p{i}", "operation": operation},
            {"type": "apply_patch_call_output", "call_id": f"p{i}", "output": log},
        ]
    done = {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                 "text": "done"}]}  # fmt: skip
    items += [done, {"role": "user", "content": "next"}]
    conversation = get_adapter(R).parse({"model": "gpt-5", "input": items})
    assert conversation.messages[1].tool_calls[0].command == "update_file src/a.py"
    sent = _engine("balanced").condense({"model": "gpt-5", "input": items}, api=R).request
    first_a, b = sent["input"][2]["output"], sent["input"][4]["output"]
    assert "superseded by the same action in message #6" in first_a  # the later a.py patch
    assert "superseded" not in b  # b.py was patched once
