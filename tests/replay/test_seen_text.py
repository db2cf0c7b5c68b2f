"""What support takes as seen in a condensed text: never ctxwarden's own bookkeeping
(its notes' counts, its references' hex digits), and a placeholder's mention list only
while mention credit is on."""

from __future__ import annotations

from ctxwarden.replay.signals import distinctive_tokens
from ctxwarden.replay.view import describe

_PLACEHOLDER = (
    "[ctxwarden: condensed output; original cw:95c73768bf60 (exit 0, 318 lines, 4,213 tokens)]\n"
    "def load_config(path):\n"
    "[mentions: settings_v2.yaml 8080 parse_args]"
)


def _tool(text: str) -> dict[str, object]:
    return {"role": "tool", "tool_call_id": "c1", "content": text}


def test_bookkeeping_numbers_and_reference_digits_are_not_seen() -> None:
    assert {"318", "4213", "73768"} & distinctive_tokens(_PLACEHOLDER)  # the raw text has them
    seen = describe(_tool(_PLACEHOLDER), len).tool_tokens
    assert not {"318", "4213", "4,213", "95", "73768", "60"} & seen
    assert {"load_config", "settings_v2.yaml", "8080"} <= seen
    trimmed = '{"command": "cat app.py...[ctxwarden: 27 more lines in cw:0123456789ab]"}'
    assert "27" not in describe(_tool(trimmed), len).tool_tokens


def test_mention_lines_count_only_with_mention_credit() -> None:
    without = describe(_tool(_PLACEHOLDER), len, mention_credit=False).tool_tokens
    assert "load_config" in without
    assert not {"settings_v2.yaml", "8080", "parse_args"} & without


def test_an_original_text_reads_the_same_either_way() -> None:
    text = "line 318 of settings_v2.yaml: port 8080\ncw:95c73768bf60 is a reference"
    plain = describe(_tool(text), len, mention_credit=False).tool_tokens
    assert {"318", "settings_v2.yaml", "8080"} <= plain


def test_the_replay_reports_support_without_mention_credit_when_asked() -> None:
    from pathlib import Path

    from ctxwarden.replay.runner import ReplayOptions, run_replay

    bundled = sorted((Path(__file__).parents[2] / "src/ctxwarden/data/sessions").glob("*.gz"))
    figures = {}
    for credit in (True, False):
        result = run_replay(bundled[:1], ["preset:aggressive"], baselines=(),
                            options=ReplayOptions(mention_credit=credit))  # fmt: skip
        support = result.subjects[0].aggregate()["support"]["total"]
        assert support is not None
        figures[credit] = support
    assert figures[False] < figures[True]
