"""One config model per pass: typed, bounded, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from ctxwarden.tokens.budget import Band

__all__ = [
    "DedupeConfig",
    "MaskConfig",
    "NormalizeConfig",
    "PassConfig",
    "SummarizeConfig",
    "SupersedeConfig",
    "SuppressConfig",
    "TrimArgsConfig",
    "TruncateConfig",
]


class PassConfig(BaseModel):
    """Settings every pass has: on/off, a size threshold and a pressure condition."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: StrictBool = True
    min_tokens: StrictInt = Field(
        40, ge=0, description="Segments smaller than this are left alone."
    )
    min_band: Band | None = Field(
        None, description="Run only when the request's pressure band is at least this."
    )
    min_request_tokens: StrictInt = Field(
        0,
        ge=0,
        description="Run only when the request holds at least this many tokens (as sent "
        "so far: earlier replacements applied), e.g. a summarizer for long sessions only.",
    )


class DedupeConfig(PassConfig):
    """Exact duplicates become a reference to the first copy (lossless)."""

    min_tokens: StrictInt = Field(24, ge=0)


class SupersedeConfig(PassConfig):
    """Outputs made stale by a newer run of the same action (lossless via reference)."""

    keep_newest: StrictInt = Field(
        1, ge=1, le=20, description="Attempts of one action kept in full."
    )
    file_reads: StrictBool = Field(
        True, description="A later full read of a file supersedes earlier."
    )


class NormalizeConfig(PassConfig):
    """ANSI escapes, progress bars, repeated lines, trailing whitespace, pretty JSON."""

    min_saving_tokens: StrictInt = Field(32, ge=0)
    repeat_run: StrictInt = Field(
        4, ge=2, description="Identical consecutive lines collapsed from."
    )
    minify_json: StrictBool = True


class MaskConfig(PassConfig):
    """Old outputs outside the recency budget become placeholders (original in store)."""

    min_tokens: StrictInt = Field(60, ge=0)
    head_lines: StrictInt = Field(1, ge=0, le=200)
    tail_lines: StrictInt = Field(1, ge=0, le=200)
    head_tail_min_tokens: StrictInt = Field(
        1000,
        ge=0,
        description="Outputs smaller than this show no head or tail line: their mentions and "
        "error lines say more per token (on the corpus, a head and tail line on every "
        "placeholder cost 4 points of median reduction and lowered next-action support).",
    )
    line_chars: StrictInt = Field(
        240, ge=20, le=10_000, description="Head and tail lines are clipped to this length."
    )
    max_keywords: StrictInt = Field(
        100,
        ge=0,
        le=2000,
        description="Distinctive strings (paths, identifiers, numbers) the placeholder keeps; "
        "the agent's own messages already show theirs, so only the output's are listed.",
    )
    keywords_per_1k_tokens: float = Field(
        0,
        ge=0,
        le=1000,
        description="Large outputs may keep more mentions: this many per 1,000 tokens of the "
        "output when that exceeds max_keywords.",
    )
    min_mention_score: StrictFloat = Field(
        0.0,
        ge=0,
        description="Mentions the agent is less likely to need are left out: the score of "
        "ctxwarden.signals.mention_scores (1.0: a snake_case name early in the output).",
    )
    max_ratio: StrictFloat = Field(
        0.8, gt=0, le=1, description="Mask only when the placeholder is at most this share."
    )
    shared_mentions: StrictBool = Field(
        True,
        description="Skip mentions another placeholder of the request already shows; each "
        "string stays visible somewhere (adopted placeholders stay as sent, while an output "
        "in full or normalized may later become a pointer or a placeholder that shows none "
        "of its strings).",
    )


class SuppressConfig(PassConfig):
    """Old outputs of tools whose policy says ``suppress = true`` become a stub."""

    min_tokens: StrictInt = Field(0, ge=0)


class TrimArgsConfig(PassConfig):
    """Long string values in old tool-call arguments keep head and tail lines."""

    min_tokens: StrictInt = Field(60, ge=0)
    max_value_chars: StrictInt = Field(160, ge=40, description="String values longer are trimmed.")
    head_lines: StrictInt = Field(1, ge=0, le=100)
    tail_lines: StrictInt = Field(0, ge=0, le=100)


class TruncateConfig(PassConfig):
    """Guardrail: any output over a size limit keeps head, tail and error lines.

    It goes by these limits: ``min_tokens`` is not read, and recency does not keep an
    output whole; a tool's ``exclude`` does, and so does a tool's ``min_tokens`` for
    outputs smaller than it."""

    max_bytes: StrictInt = Field(50_000, gt=0)
    max_lines: StrictInt = Field(2_000, gt=0)
    head_lines: StrictInt = Field(60, ge=0)
    tail_lines: StrictInt = Field(40, ge=0)


class SummarizeConfig(PassConfig):
    """Deterministic extractive condensation of old assistant message text."""

    enabled: StrictBool = False
    min_tokens: StrictInt = Field(300, ge=0)
    keep_sentences: StrictInt = Field(2, ge=1, le=20)
