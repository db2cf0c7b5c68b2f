"""The summary's lead search: the same summary as testing every line against the lead
with ``in``, and bounded on a text that opens with a long list."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden import signals
from ctxwarden.passes import summarize
from ctxwarden.passes.summarize import extract_summary

_PIECES = st.sampled_from(
    ["Fixed it", ". ", "! ", "\n", "  ", "see src/app.py", "- item", "Error: boom", "done",
     "the parser now reads headers and keeps them", "x", "tests/test_a.py::test_b", "?"]
)  # fmt: skip


def _plain(text: str, keep: int, monkeypatch: Any) -> tuple[str, tuple[str, ...]]:
    class Plain:
        def __init__(self, lead: str, *_args: Any, **_kwargs: Any) -> None:
            self.lead = lead

        def __contains__(self, line: str) -> bool:
            return line in self.lead

    monkeypatch.setattr(summarize, "TextSearch", Plain)
    try:
        return extract_summary.__wrapped__(text, keep)  # type: ignore[attr-defined,no-any-return]
    finally:
        monkeypatch.undo()


@settings(max_examples=300)
@given(st.lists(_PIECES, max_size=40).map("".join), st.integers(1, 2))
def test_the_summary_is_the_one_plain_in_gives(text: str, keep: int) -> None:
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        assert extract_summary.__wrapped__(text, keep) == _plain(text, keep, mp)  # type: ignore[attr-defined]


def test_past_the_budget_a_line_counts_as_not_in_the_lead(monkeypatch: Any) -> None:
    listing = "; ".join(f"step {i} touches src/mod_{i}.py" for i in range(40))
    text = listing + ". Then more. \nsrc/mod_1.py"  # a part of the lead, not a line of it
    full, _ = extract_summary.__wrapped__(text, 1)
    assert "\nsrc/mod_1.py" not in full  # searched: the lead holds it
    monkeypatch.setattr(signals, "SEARCH_BUDGET", 0)
    bounded, _ = extract_summary.__wrapped__(text, 1)
    assert bounded == full + "\nsrc/mod_1.py"  # not searched: kept, nothing lost


def test_a_summary_lead_never_ends_on_a_numbered_lists_marker() -> None:
    # a real summary ended on a bare "2.": the splitter took the marker for a sentence
    text = (
        "The check fails for subclasses of the wrapper class in the module. "
        "Two ways to fix it:\n1. Unwrap the value before the check (an instance)\n"
        "2. Register the subclass with the checker. I will try the first."
    )
    lead = extract_summary(text, 3)[0].split("\n")[0]
    assert lead.endswith("(an instance)")
    assert "1. Unwrap" in lead


@given(st.lists(st.sampled_from(["Do it.", "1.", "\n", " ", "2. Then this.", "ok:"]), max_size=20))
def test_no_lead_sentence_is_a_bare_list_marker(pieces: list[str]) -> None:
    import re

    # only the text's own last piece may be a marker (nothing follows it to open)
    for sentence in summarize._sentences("".join(pieces), 30)[:-1]:
        assert not re.search(r"(?:^|\n)\s*\d{1,3}\.$", sentence)


def test_a_colon_inside_a_line_does_not_cut_the_lead() -> None:
    # "ot line 1:" ended the lead, and the whole line followed it as a path line
    text = "\n".join(f"ot line {i}: checked src/ot/mod_{i}.py value={i * 7} ok" for i in range(40))
    summary = extract_summary(text, 1)[0]
    lines = summary.split("\n")
    assert not any(line.rstrip().endswith(":") for line in lines)
    assert lines[0].startswith("ot line 0: checked src/ot/mod_0.py value=0 ok")
    assert sum("ot line 1:" in line for line in lines) == 1


def test_a_long_lead_over_a_numbered_list_is_still_a_lead() -> None:
    # with keep_sentences 12, a list's markers used up the splits and the lead took
    # the rest of the text (then too long to be a summary at all)
    items = "\n".join(f"{i}. Change module {i} so that it reads the header." for i in range(1, 40))
    text = "I found the cause. The fix needs many steps:\n" + items
    summary = extract_summary(text, 12)[0]  # no error or path line: the lead alone
    assert summary.endswith("10. Change module 10 so that it reads the header.")  # 12
    assert "module 11" not in summary
