"""Segments of a classified conversation, with recency and relevance sets."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.model.classify import protected_message_indexes
from ctxwarden.model.conversation import Conversation
from ctxwarden.model.parts import Path, TextPart, ToolCallPart, ToolResultPart
from ctxwarden.passes.base import Segment
from ctxwarden.pipeline.presets import PipelineConfig
from ctxwarden.signals import command_of, distinctive_set, paths_in
from ctxwarden.tokens.counter import TokenCounter

__all__ = ["SegmentView", "segment_view"]


@dataclass(frozen=True, slots=True)
class SegmentView:
    """All segments in order, which are eligible, recent and relevant."""

    segments: list[Segment]
    eligible: frozenset[Path]
    recent: frozenset[Path]
    relevant: frozenset[Path]
    visible: frozenset[str] = frozenset()
    """Distinctive strings of the agent's own messages and tool calls."""
    by_path: dict[Path, Segment] = field(default_factory=dict, compare=False)
    """Every segment by its path (filled from ``segments``)."""

    def __post_init__(self) -> None:
        if not self.by_path:
            self.by_path.update((s.path, s) for s in self.segments)

    def segment(self, path: Path) -> Segment | None:
        return self.by_path.get(path)

    def text(self, path: Path) -> str:
        segment = self.by_path.get(path)
        return segment.text if segment else ""


def segment_view(
    conversation: Conversation, counter: TokenCounter, config: PipelineConfig
) -> SegmentView:
    """Collect segments: tool-output texts and assistant / user message texts."""
    protected = protected_message_indexes(conversation)
    calls: dict[str, ToolCallPart] = {}
    segments: list[Segment] = []
    eligible: set[Path] = set()
    positions = {"tool_output": 0, "tool_args": 0, "assistant_text": 0, "user_text": 0}
    recent_commands: list[str] = []
    visible: set[str] = set()
    for i, message in enumerate(conversation.messages):
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls[part.call_id] = part
                recent_commands.append(command_of(part.arguments))
                visible |= distinctive_set(part.arguments)
                if part.arguments_path is not None:
                    segments.append(
                        Segment(
                            path=part.arguments_path,
                            message_index=i,
                            position=positions["tool_args"],
                            kind="tool_args",
                            text=part.arguments,
                            tokens=counter.count_text(part.arguments),
                            tool_name=part.name,
                            call_id=part.call_id,
                        )
                    )
                    positions["tool_args"] += 1
                    if i not in protected:
                        eligible.add(part.arguments_path)
            elif isinstance(part, ToolResultPart):
                call = calls.get(part.call_id)
                name = call.name if call else ""
                policy = config.tools.get(name)
                command = command_of(call.arguments) if call else ""
                for sub in part.content:
                    if not isinstance(sub, TextPart):
                        continue
                    seg = Segment(
                        path=sub.path,
                        message_index=i,
                        position=positions["tool_output"],
                        kind="tool_output",
                        text=sub.text,
                        tokens=counter.count_text(sub.text),
                        tool_name=name,
                        command=command,
                        call_id=part.call_id,
                        is_error=part.is_error,
                    )
                    positions["tool_output"] += 1
                    segments.append(seg)
                    excluded = policy is not None and (
                        policy.exclude
                        or (policy.min_tokens is not None and seg.tokens < policy.min_tokens)
                    )
                    if i not in protected and sub.safety.editable and not excluded:
                        eligible.add(sub.path)
            elif isinstance(part, TextPart) and message.role in ("assistant", "user"):
                kind = "assistant_text" if message.role == "assistant" else "user_text"
                visible |= distinctive_set(part.text)
                segments.append(
                    Segment(
                        path=part.path,
                        message_index=i,
                        position=positions[kind],
                        kind=kind,  # type: ignore[arg-type]
                        text=part.text,
                        tokens=counter.count_text(part.text),
                    )
                )
                positions[kind] += 1
                if i not in protected and part.safety.editable:
                    eligible.add(part.path)
    return SegmentView(
        segments=segments,
        eligible=frozenset(eligible),
        recent=_recent(segments, config),
        relevant=_relevant(segments, recent_commands, config),
        visible=frozenset(visible),
    )


def _recent(segments: list[Segment], config: PipelineConfig) -> frozenset[Path]:
    recent: set[Path] = set()
    budget = config.recency_tokens
    used = 0
    outputs = [s for s in segments if s.kind == "tool_output"]
    for count, segment in enumerate(reversed(outputs)):
        used += segment.tokens
        if count < config.keep_newest_outputs or used <= budget:
            recent.add(segment.path)
        else:
            break
    texts = [s for s in segments if s.kind == "assistant_text"]
    if config.keep_newest_texts:
        recent.update(s.path for s in texts[-config.keep_newest_texts :])
    calls = [s for s in segments if s.kind == "tool_args"]
    if config.keep_newest_calls:
        recent.update(s.path for s in calls[-config.keep_newest_calls :])
    return frozenset(recent)


def _relevant(
    segments: list[Segment], commands: list[str], config: PipelineConfig
) -> frozenset[Path]:
    if config.relevance_turns <= 0 or not commands:
        return frozenset()
    focus: set[str] = set()
    for command in commands[-config.relevance_turns :]:
        focus |= paths_in(command)
    if not focus:
        return frozenset()
    return frozenset(
        s.path
        for s in segments
        if s.kind == "tool_output" and s.command and paths_in(s.command) & focus
    )
