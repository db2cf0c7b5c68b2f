"""Hand-made OpenAI chat conversations and helpers shared by the pass and pipeline tests.

``FORCE`` is a pipeline override that makes the planner adopt every proposal (no
recency budget, no relevance retention, no floor, no cache-rewrite cap), so a test sees
what the passes do rather than what prompt-cache economics allow.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from ctxwarden import Engine, EngineConfig
from ctxwarden.model.conversation import Conversation
from ctxwarden.passes.base import PassContext, Segment
from ctxwarden.pipeline.presets import PipelineConfig, PlannerConfig, resolve_pipeline
from ctxwarden.pipeline.segments import segment_view
from ctxwarden.store import MemoryStore, Store
from ctxwarden.store.base import REF_PATTERN
from ctxwarden.tokens.counter import TokenCounter

__all__ = [
    "FORCE",
    "MODEL",
    "call",
    "call_with",
    "context",
    "dumps",
    "finds",
    "lines_of",
    "make_engine",
    "output_segment",
    "refs_in",
    "request",
    "result",
    "segment_at",
]

MODEL = "gpt-4o"

_FORCE_PLANNER: dict[str, Any] = {
    "floor_tokens": 0,
    "floor_ratio": 0,
    "max_session_deficit": 1.0,
    "free_step_deficit_requests": 1000.0,
    "min_expected_turns": 1000,
    "max_expected_turns": 1000,
    "max_rewrite_tokens": None,
    "free_step_cost": 1.0,
}
FORCE: dict[str, Any] = {
    "recency_tokens": 0,
    "relevance_turns": 0,
    # The planner's knobs are being tuned; force with whichever of them exist.
    "planner": {k: v for k, v in _FORCE_PLANNER.items() if k in PlannerConfig.model_fields},
}

_COUNTER = TokenCounter()


def dumps(value: Any) -> bytes:
    """Canonical bytes for byte-identity comparisons."""
    return orjson.dumps(value)


def lines_of(tag: str, n: int, *, extra: tuple[str, ...] = ()) -> str:
    """``n`` numbered lines with identifiers unique to ``tag`` (a few tokens each)."""
    body = [f"{tag} row {i}: checked {tag}_item_{i} in module_{tag}.py ok" for i in range(n)]
    return "\n".join([*body, *extra])


def call(call_id: str, command: str, name: str = "bash", text: str | None = None) -> dict[str, Any]:
    """An assistant message with one tool call running ``command``."""
    return call_with(call_id, name, {"command": command}, text)


def call_with(
    call_id: str, name: str, arguments: dict[str, Any], text: str | None = None
) -> dict[str, Any]:
    """An assistant message with one call of tool ``name`` with ``arguments``."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def request(*turns: dict[str, Any], tail: str = "please continue") -> dict[str, Any]:
    """System, first user message, ``turns``, a closing assistant and user message."""
    return {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing build."},
            *turns,
            {"role": "assistant", "content": "Looking at the results."},
            {"role": "user", "content": tail},
        ],
    }


def finds(turns: int) -> dict[str, Any]:
    """A request of ``turns`` ``find`` calls, each listing 150 files of its own."""
    steps = []
    for i in range(turns):
        lines = "\n".join(f"src/pkg_{i}/module_{j}.py" for j in range(150))
        steps += [call(f"c{i}", f"find src/pkg_{i}"), result(f"c{i}", lines)]
    return request(*steps)


def output_segment(tool_name: str, command: str) -> Segment:
    """An empty tool-output segment of ``tool_name`` running ``command`` (what action
    keys and labels are made from)."""
    return Segment(
        path=("messages", 3, "content"),
        message_index=3,
        position=0,
        kind="tool_output",
        text="",
        tokens=0,
        tool_name=tool_name,
        command=command,
    )


def make_engine(
    preset: str = "balanced",
    pipeline: dict[str, Any] | None = None,
    store: Store | None = None,
    **config: Any,
) -> Engine:
    """An engine over ``store`` (a fresh MemoryStore by default)."""
    cfg = EngineConfig(preset=preset, pipeline=pipeline or {}, **config)
    return Engine(cfg, store=store if store is not None else MemoryStore())


def context(
    wire: dict[str, Any], pipeline: PipelineConfig | None = None, api: str = "openai.chat"
) -> tuple[PassContext, Conversation]:
    """The pass context the condenser would build for ``wire`` (no early-exit target)."""
    config = pipeline if pipeline is not None else resolve_pipeline("balanced", FORCE)
    conversation = Engine(EngineConfig(store={"backend": "memory"})).parse(wire, api)
    view = segment_view(conversation, _COUNTER, config)
    ctx = PassContext(
        segments=view.segments,
        eligible=view.eligible,
        recent=view.recent,
        relevant=view.relevant,
        counter=_COUNTER,
        visible=view.visible,
    )
    return ctx, conversation


def segment_at(ctx: PassContext, message_index: int) -> Segment:
    """The (first) segment of message ``message_index``."""
    return next(s for s in ctx.segments if s.message_index == message_index)


def refs_in(text: str) -> list[str]:
    return REF_PATTERN.findall(text)
