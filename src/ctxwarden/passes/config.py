"""One config model per pass: typed, bounded, unknown keys rejected, floats finite.

Each model's defaults are the balanced preset's settings for its pass (a
``PipelineConfig()`` is made of them), so a model built with a few fields is the
balanced table with those changed, as it prints. A pass that reads no size threshold
(``suppress``, which goes by tool name, and the ``truncate`` guardrail, which goes by
its own limits) has no ``min_tokens``: the key is refused as unknown rather than
accepted and never read. Built directly, a model raises
:class:`~ctxwarden.errors.ConfigError` (:class:`~ctxwarden.config.ConfigModel`).
"""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from ctxwarden.config import ConfigModel
from ctxwarden.tokens.budget import Band

__all__ = [
    "DedupeConfig",
    "MaskConfig",
    "NormalizeConfig",
    "PassConfig",
    "SizedPassConfig",
    "SummarizeConfig",
    "SupersedeConfig",
    "SuppressConfig",
    "TrimArgsConfig",
    "TruncateConfig",
]


class PassConfig(ConfigModel):
    """Settings every pass has: on/off and a pressure condition."""

    enabled: StrictBool = True
    min_band: Band | None = Field(
        None, description="Run only when the request's pressure band is at least this."
    )
    min_request_tokens: StrictInt = Field(
        0,
        ge=0,
        description="Run only when the request holds at least this many tokens (as sent "
        "so far: earlier replacements applied), e.g. a summarizer for long sessions only.",
    )


class SizedPassConfig(PassConfig):
    """A pass that leaves segments under a size threshold alone."""

    min_tokens: StrictInt = Field(
        40, ge=0, description="Segments smaller than this are left alone."
    )


class DedupeConfig(SizedPassConfig):
    """Exact duplicates become a reference to the first copy (lossless)."""

    min_tokens: StrictInt = Field(24, ge=0)


class SupersedeConfig(SizedPassConfig):
    """Outputs made stale by a newer run of the same action (lossless via reference)."""

    keep_newest: StrictInt = Field(
        1, ge=1, le=20, description="Attempts of one action kept in full."
    )
    file_reads: StrictBool = Field(
        True, description="A later full read of a file supersedes earlier."
    )
    min_overlap: StrictFloat = Field(
        0.2,
        ge=0,
        le=1,
        description="A newer run supersedes an older one only when it shows at least this "
        "share of the older output's distinct non-blank lines (an output of at most two "
        "such lines is superseded whatever it shares; 0: whatever any shares). A re-read "
        "after an edit shares about 1.0, a test re-run 0.8, a script re-run after a fix "
        "0.12 to 0.8; a poll of a background process 0.05, a snapshot of another page 0.09.",
    )


class NormalizeConfig(SizedPassConfig):
    """ANSI escapes, progress bars, repeated lines, trailing whitespace, pretty JSON."""

    min_saving_tokens: StrictInt = Field(32, ge=0)
    repeat_run: StrictInt = Field(
        4, ge=2, description="Identical consecutive lines collapsed from."
    )
    minify_json: StrictBool = True


class MaskConfig(SizedPassConfig):
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
    keywords_per_1k_tokens: StrictFloat = Field(
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
    """Old outputs of tools whose policy says ``suppress = true`` become a stub,
    whatever their size (the tool was named for it: no ``min_tokens``)."""


class TrimArgsConfig(SizedPassConfig):
    """Long string values in old tool-call arguments keep head and tail lines."""

    min_tokens: StrictInt = Field(60, ge=0)
    max_value_chars: StrictInt = Field(160, ge=40, description="String values longer are trimmed.")
    min_saved_chars: StrictInt = Field(
        128,
        ge=0,
        description="A trim that shortens a value by fewer characters (about 32 tokens at "
        "128) is not made: an old call's identifying one-line command stays whole.",
    )
    head_lines: StrictInt = Field(1, ge=0, le=100)
    tail_lines: StrictInt = Field(0, ge=0, le=100)


class TruncateConfig(PassConfig):
    """Guardrail: any output over a size limit keeps head, tail and error lines.

    It goes by these limits (it has no ``min_tokens``), and recency does not keep an
    output whole; a tool's ``exclude`` does, and so does a tool's ``min_tokens`` for
    outputs smaller than it."""

    max_bytes: StrictInt = Field(50_000, gt=0)
    max_lines: StrictInt = Field(2_000, gt=0)
    head_lines: StrictInt = Field(60, ge=0)
    tail_lines: StrictInt = Field(40, ge=0)


class SummarizeConfig(SizedPassConfig):
    """Deterministic extractive condensation of old assistant message text."""

    keep_sentences: StrictInt = Field(1, ge=1, le=20)
