"""Lossy passes on hand-made conversations: mask, truncate, summarize."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.passes.config import MaskConfig, SummarizeConfig, TruncateConfig
from ctxwarden.passes.mask import MaskPass
from ctxwarden.passes.placeholder import informative
from ctxwarden.passes.summarize import SummarizePass, extract_summary
from ctxwarden.passes.truncate import TruncatePass
from ctxwarden.pipeline.presets import resolve_pipeline
from ctxwarden.signals import MAX_ERROR_LINE, error_lines, mention_scores, shown_error_line
from tests.passes.convo import (
    FORCE,
    call,
    context,
    lines_of,
    make_engine,
    refs_in,
    request,
    result,
    segment_at,
)

# -- mask -----------------------------------------------------------------------------

ERRORS = (
    "Traceback (most recent call last):",
    '  File "src/io_utils.py", line 88, in read_config',
    "KeyError: 'database_url'",
)


def _pytest_output() -> str:
    head = ["<returncode>1</returncode>", "===== test session starts ====="]
    body = [
        f"case {i} of the suite passed without anything worth reporting here" for i in range(80)
    ]
    body[50] = "collected fixture frobnicate_widget from conftest.py and it passed as well"
    return "\n".join([*head, *body[:40], *ERRORS, *body[40:], "1 failed, 80 passed"])


def _mask_request() -> dict[str, Any]:
    return request(
        call("c1", "pytest -q tests"),
        result("c1", _pytest_output()),
        call("c2", "git log --oneline -3"),
        result("c2", "a1 one\nb2 two\nc3 three"),
    )


def test_mask_placeholder_keeps_header_errors_head_tail_and_mentions() -> None:
    ctx, _ = context(_mask_request())
    out = MaskPass(MaskConfig(head_lines=3, tail_lines=3, head_tail_min_tokens=0))(ctx, {})
    seg = segment_at(ctx, 3)
    assert seg.path in out
    rep = out[seg.path]
    lines = rep.text.split("\n")
    header = lines[0]
    assert "pytest" not in header  # the call right before the output names the command
    assert "exit 1" in header
    total = seg.text.count("\n") + 1
    assert f"{total:,} lines" in header and f"{seg.tokens:,} tokens" in header
    (ref,) = refs_in(header)
    assert rep.originals == ((ref, seg.text),)
    original = seg.text.split("\n")
    # head: the bare exit-code line says nothing the header does not, but it is an
    # error line that a marker hiding it would list anyway, so it is shown in its place
    # (once) and the head runs on from it, consecutive
    assert lines[1:5] == original[0:4]
    assert lines.count("<returncode>1</returncode>") == 1
    assert original[-3:] == [ln for ln in lines if ln in original[-3:]][-3:]  # tail
    for err in error_lines(seg.text):
        assert err in lines  # verbatim, on its own line
    assert set(rep.kept_lines) == set(error_lines(seg.text))
    mentions = next(ln for ln in lines if ln.startswith("[mentions: "))
    assert "frobnicate_widget" in mentions


@pytest.mark.parametrize(
    "config",
    [
        MaskConfig(head_lines=0, tail_lines=0, head_tail_min_tokens=0),
        MaskConfig(head_lines=2, tail_lines=2, head_tail_min_tokens=10**6),
    ],
    ids=["no-lines", "below-threshold"],
)
def test_mask_placeholder_without_head_or_tail_has_no_elision_line(config: MaskConfig) -> None:
    """With no line shown (none configured, or an output below ``head_tail_min_tokens``)
    the header's line count says everything is hidden: the placeholder is the header,
    the error lines and the mentions."""
    ctx, _ = context(_mask_request())
    out = MaskPass(config)(ctx, {})
    seg = segment_at(ctx, 3)
    lines = out[seg.path].text.split("\n")
    assert lines[0].startswith("[ctxwarden: ") and "lines" in lines[0]
    assert not any(ln.startswith("... (lines") for ln in lines)
    errors = [ln for ln in lines[1:] if not ln.startswith("[mentions: ")]
    assert errors == list(error_lines(seg.text))
    assert lines[-1].startswith("[mentions: ")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("<returncode>0</returncode>", False),
        ("<output>", False),
        ("</output>", False),
        ("bash-$", False),
        ("", False),
        ("   42  ", False),
        ("[File: /repo/src/a.py (154 lines total)]", True),
        ("1 failed, 80 passed", True),
        ("ok", False),
    ],
)
def test_informative_lines(line: str, expected: bool) -> None:
    assert informative(line) is expected


@given(st.text(alphabet=st.sampled_from("ab1_-$# <>/é²\t"), max_size=30))
def test_informative_stops_counting_early_but_says_the_same(line: str) -> None:
    from ctxwarden.passes.placeholder import _MARKUP, _PROMPT

    rest = _MARKUP.sub("", line).strip()
    old = bool(rest) and not _PROMPT.match(rest)
    old = old and sum(c.isalnum() for c in rest) >= 3 and not rest.lstrip("-").isdigit()
    assert informative(line) == old


def test_mentions_rank_repeated_identifiers_before_listed_numbers() -> None:
    text = "\n".join(
        [*(f"{n:04d} item" for n in range(1000, 1040)), "use parse_header", "parse_header"]
    )
    ranked = [w for w, _ in mention_scores(text)]
    assert ranked[0] == "parse_header"  # repeated snake_case name beats 40 line numbers
    scores = dict(mention_scores(text))
    assert scores["1000"] < scores["parse_header"]
    ctx, _ = context(_mask_request())
    strict = MaskPass(MaskConfig(min_mention_score=100.0))(ctx, {})
    assert all("[mentions:" not in r.text for r in strict.values())


def test_a_numbered_listing_line_is_mentioned_by_its_number() -> None:
    # grep -n / an editor's numbered view glue the line number to the line's first word
    text = "17:package com.acme;\n19:import java.util.Map;\n20:import java.util.List;\nline 19"
    ranked = dict(mention_scores(text))
    assert not any(":" in w for w in ranked)  # no "19:import": it would outrank real names
    assert {"17", "19", "20"} <= set(ranked)  # the line numbers stay, ranked as numbers
    assert ranked["java.util.Map"] > ranked["19"]


def test_grep_hits_are_mentioned_as_file_and_line() -> None:
    # ``grep -n`` glues file and line: the agent types them apart (sed -n 189p file)
    text = "\n".join(f"django/http/request.py:{n}:    value = x" for n in (189, 190, 512))
    ranked = [w for w, _ in mention_scores(text)]
    assert not any(":" in w for w in ranked)
    assert ranked[0] == "django/http/request.py"  # one path, seen three times
    assert {"189", "190", "512"} <= set(ranked)
    node = [w for w, _ in mention_scores("FAILED tests/test_a.py::WriterTests::test_enum")]
    assert node == ["test_enum", "WriterTests", "tests/test_a.py"]


def test_a_name_the_output_defines_outranks_names_it_only_uses() -> None:
    # a listing of a test module: the agent's next step names the class it defines
    uses = "\n".join(f"    self.assertEqual(value_{i}, other_{i})" for i in range(40))
    text = f"{uses}\nclass WriterTests(SimpleTestCase):\n    def test_serialize_enums(self):"
    ranked = [w for w, _ in mention_scores(text)]
    assert ranked.index("WriterTests") < ranked.index("SimpleTestCase")
    assert ranked.index("test_serialize_enums") < ranked.index("value_5")


def test_summary_lead_is_never_a_bare_interjection() -> None:
    text = (
        "Ah! I see it now. The signature uses the production NAME, so both aliases look "
        "the same and the second becomes a mirror of the first. Let me check."
    )
    summary, _ = extract_summary(text, keep_sentences=1)
    assert summary.startswith("Ah! I see it now. The signature")
    assert len(summary.split()) >= 8


def test_mask_ref_recalls_the_original_and_line_ranges() -> None:
    wire = _mask_request()
    engine = make_engine(pipeline={**FORCE, "order": ["mask"]})
    res = engine.condense(wire)
    original = wire["messages"][3]["content"]
    sent = res.request["messages"][3]["content"]
    assert sent != original
    (ref,) = refs_in(sent.split("\n")[0])
    assert engine.recall(ref) == original
    assert engine.recall(ref, "10-12") == "\n".join(original.split("\n")[9:12])
    assert engine.recall(ref, "5") == original.split("\n")[4]
    assert ref in res.report["references"]


def test_mask_leaves_recent_relevant_and_small_outputs() -> None:
    wire = _mask_request()
    ctx, _ = context(wire, resolve_pipeline("balanced", {"recency_tokens": 3000}))
    seg = segment_at(ctx, 3)
    assert seg.path in ctx.recent  # inside a 3000-token recency budget
    assert seg.path not in MaskPass(MaskConfig())(ctx, {})
    assert MaskPass(MaskConfig(min_tokens=100_000))(context(wire)[0], {}) == {}
    # Relevance: the last action touches the file the old output was about.
    relevant = request(
        call("c1", "cat src/io_utils.py"),
        result("c1", lines_of("io", 80)),
        call("c2", "sed -i s/a/b/ src/io_utils.py"),
        result("c2", ""),
    )
    ctx2, _ = context(relevant, resolve_pipeline("balanced", {**FORCE, "relevance_turns": 1}))
    seg2 = segment_at(ctx2, 3)
    assert seg2.path in ctx2.relevant
    assert seg2.path not in MaskPass(MaskConfig())(ctx2, {})


def test_mask_recency_budget_is_in_tokens_not_counts() -> None:
    turns: list[dict[str, Any]] = []
    for k in range(6):
        turns += [call(f"c{k}", f"step {k}"), result(f"c{k}", lines_of(f"s{k}", 40))]
    wire = request(*turns)
    tokens = context(wire)[0].segments
    one = next(s for s in tokens if s.kind == "tool_output").tokens
    cfg = resolve_pipeline("balanced", {**FORCE, "recency_tokens": one * 2 + 1})
    ctx, _ = context(wire, cfg)
    outputs = [s for s in ctx.segments if s.kind == "tool_output"]
    assert [s.path in ctx.recent for s in outputs] == [False] * 4 + [True] * 2
    out = MaskPass(MaskConfig())(ctx, {})
    assert [s.path in out for s in outputs] == [True] * 4 + [False] * 2


def test_mask_early_exit_stops_once_target_is_saved() -> None:
    turns: list[dict[str, Any]] = []
    for k in range(5):
        turns += [call(f"c{k}", f"step {k}"), result(f"c{k}", lines_of(f"s{k}", 60))]
    ctx, _ = context(request(*turns))
    everything = MaskPass(MaskConfig())(ctx, {})
    assert len(everything) == 4  # the newest output is always kept (keep_newest_outputs)
    ctx.tokens_to_save = 1
    assert len(MaskPass(MaskConfig())(ctx, {})) == 1


def test_mask_never_eligible_for_newest_messages() -> None:
    wire = _mask_request()
    wire["messages"] += [call("c9", "pytest -q"), result("c9", _pytest_output())]
    ctx, _ = context(wire)
    newest = segment_at(ctx, len(wire["messages"]) - 1)
    assert newest.path not in MaskPass(MaskConfig())(ctx, {})


# -- truncate -------------------------------------------------------------------------


def _huge(lines: int, width: int = 10) -> str:
    rows = [f"{i:06d} " + "x" * width for i in range(lines)]
    rows[lines // 2] = "src/core.c:1201:7: error: use of undeclared identifier 'cfg'"
    return "\n".join(rows)


def test_truncate_cuts_outputs_over_the_line_limit_even_when_recent() -> None:
    big = _huge(2500)
    wire = request(call("c1", "make -j8"), result("c1", big))
    cfg = resolve_pipeline("balanced", {})
    ctx, _ = context(wire, cfg)
    seg = segment_at(ctx, 3)
    assert seg.path in ctx.recent  # recent, yet over the guardrail
    out = TruncatePass(cfg.truncate)(ctx, {})
    rep = out[seg.path]
    lines = rep.text.split("\n")
    assert "truncated output" in lines[0] and "2,500 lines" in lines[0]
    assert lines[1 : 1 + 60] == big.split("\n")[:60]
    assert lines[-40:] == big.split("\n")[-40:] or lines[-41:-1] == big.split("\n")[-40:]
    assert "src/core.c:1201:7: error: use of undeclared identifier 'cfg'" in lines
    (ref,) = refs_in(lines[0])
    assert rep.originals == ((ref, big),)


def test_truncate_cuts_outputs_over_the_byte_limit() -> None:
    wide = _huge(400, width=150)  # ~63 KB in 400 lines
    assert len(wide.encode()) > 50_000
    ctx, _ = context(request(call("c1", "cat data.csv"), result("c1", wide)))
    assert segment_at(ctx, 3).path in TruncatePass(TruncateConfig())(ctx, {})
    assert TruncatePass(TruncateConfig(max_bytes=10**7))(ctx, {}) == {}


def test_truncate_leaves_outputs_under_limits() -> None:
    ctx, _ = context(request(call("c1", "make"), result("c1", _huge(1999))))
    assert TruncatePass(TruncateConfig())(ctx, {}) == {}


@pytest.mark.parametrize(
    ("pipeline", "verb"),
    [({}, "condensed output"), ({"mask": {"enabled": False}}, "truncated output")],
)
def test_truncate_never_touches_the_newest_output(pipeline: dict[str, Any], verb: str) -> None:
    """The older output is condensed, the newest one sent as it is. Mask runs before
    truncate: an old output gets its smaller placeholder (truncation keeps 100 lines
    and 300 mentions, a third of a 33K-token listing, which no step could then afford
    to rewrite), and truncation takes what mask leaves."""
    big = _huge(3000)
    wire = request(call("c1", "make"), result("c1", big))
    wire["messages"] += [call("c2", "make again"), result("c2", big + "\nmore")]
    engine = make_engine("balanced", pipeline)
    res = engine.condense(wire)
    assert res.request["messages"][-1] == wire["messages"][-1]
    sent = res.request["messages"][3]["content"]
    assert sent != big and verb in sent.split("\n")[0]
    (ref,) = refs_in(sent.split("\n")[0])
    assert engine.recall(ref) == big
    assert engine.recall(ref, "1500-1502") == "\n".join(big.split("\n")[1499:1502])


def test_truncate_skips_an_output_all_error_lines_without_looking_for_mentions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A placeholder keeps every error line, so for an output of thousands of them it
    saves nothing: the condenser would drop it, and the mentions (the costly part,
    computed again every turn for a text too large to memo) are not looked for."""
    import ctxwarden.passes.placeholder as placeholder

    errors = "\n".join(f"Error: failure number {i} in module_{i}" for i in range(3_000))
    ctx, _ = context(request(call("c1", "make"), result("c1", errors)))
    scored: list[str] = []
    real = placeholder.mention_scores

    def counting(text: str) -> Any:
        scored.append(text)
        return real(text)

    monkeypatch.setattr(placeholder, "mention_scores", counting)
    assert TruncatePass(TruncateConfig())(ctx, {}) == {}
    assert scored == []
    big = _huge(2500)  # one error line: the placeholder saves, mentions are looked for
    ctx, _ = context(request(call("c1", "make"), result("c1", big)))
    assert segment_at(ctx, 3).path in TruncatePass(TruncateConfig())(ctx, {})
    assert scored == [big]


@pytest.mark.parametrize("kept_every", [1, 2, 3, 50])
def test_a_skipped_truncation_is_one_that_could_save_nothing(kept_every: int) -> None:
    """Skipping is exact: whenever ``build_placeholder`` with a counter gives up, the
    whole placeholder (with its mentions) is at least as long as the output."""
    from ctxwarden.passes.placeholder import Digest, build_placeholder

    rows = [
        f"Error: failure {i} in module_{i}" if i % kept_every == 0 else f"x{i} " + "y" * 30
        for i in range(2_500)
    ]
    text = "\n".join(rows)
    ctx, _ = context(request(call("c1", "make"), result("c1", text)))
    segment = segment_at(ctx, 3)
    digest = Digest(head_lines=60, tail_lines=40, max_keywords=300)
    full = build_placeholder(segment, "cw:000000000000", digest)
    assert full is not None
    skipped = build_placeholder(segment, "cw:000000000000", digest, counter=ctx.counter)
    if skipped is None:
        assert ctx.counter.count_text(full[0]) >= segment.tokens
    else:
        assert skipped == full
    assert (skipped is None) == (kept_every == 1)


# -- summarize ------------------------------------------------------------------------


def _prose(tag: str) -> str:
    sentences = [f"I looked at part {i} of the {tag} module and it seemed fine." for i in range(40)]
    return (
        " ".join(sentences[:20])
        + "\nThe fix goes in src/pkg/io.py next.\n"
        + ("ValueError: bad header in parse_header\n" + " ".join(sentences[20:]))
    )


def _summary_request() -> dict[str, Any]:
    return request(
        {"role": "assistant", "content": _prose("alpha")},
        {"role": "user", "content": "ok"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "assistant", "content": "c"},
        {"role": "assistant", "content": "d"},
    )


def test_extract_summary_keeps_lead_paths_and_errors() -> None:
    text = _prose("alpha")
    summary, errors = extract_summary(text, keep_sentences=2)
    assert summary.startswith("I looked at part 0 of the alpha module and it seemed fine.")
    assert "part 5 " not in summary
    assert "The fix goes in src/pkg/io.py next." in summary
    assert errors == ("ValueError: bad header in parse_header",)
    assert errors[0] in summary


def test_summarize_condenses_old_prose() -> None:
    wire = _summary_request()
    ctx, _ = context(wire)
    seg = segment_at(ctx, 2)
    assert seg.path not in ctx.recent  # older than the newest four assistant texts
    out = SummarizePass(SummarizeConfig(enabled=True, min_tokens=100))(ctx, {})
    assert set(out) == {seg.path}
    rep = out[seg.path]
    assert "[ctxwarden: summary of cw:" in rep.text
    (ref,) = refs_in(rep.text)
    assert rep.originals == ((ref, seg.text),)


def test_summarize_through_engine_when_enabled() -> None:
    wire = _summary_request()
    off = make_engine(pipeline={**FORCE, "summarize": {"enabled": False}}).condense(wire)
    assert off.request["messages"][2] == wire["messages"][2]
    engine = make_engine(pipeline={**FORCE, "summarize": {"enabled": True, "min_tokens": 100}})
    on = engine.condense(wire)
    sent = on.request["messages"][2]["content"]
    assert sent != wire["messages"][2]["content"]
    assert "ValueError: bad header in parse_header" in sent
    (ref,) = refs_in(sent)
    assert engine.recall(ref) == wire["messages"][2]["content"]
    assert on.report["transforms"]["summarize"]["count"] == 1


def test_shared_mentions_keep_every_distinctive_string_visible_somewhere() -> None:
    """Outputs overlap (the same file read twice, a grep of it): each placeholder skips
    strings another output still shows, but no string of a masked output disappears from
    the request, across turns, as outputs are condensed one after another."""
    from ctxwarden.signals import distinctive_strings

    shared = lines_of("alpha", 30)
    turns = [
        (call("c1", "cat alpha.py"), result("c1", shared)),
        (call("c2", "grep -n item alpha.py"), result("c2", shared + "\n" + lines_of("beta", 10))),
        (call("c3", "sed -n 1,40p alpha.py"), result("c3", lines_of("gamma", 20) + "\n" + shared)),
        (call("c4", "ls"), result("c4", lines_of("delta", 25))),
    ]
    engine = make_engine(pipeline={**FORCE, "order": ["mask"], "mask": {"max_keywords": 2000}})
    flat: list[dict[str, Any]] = []
    masked = 0
    for assistant, tool in turns:
        flat += [assistant, tool]
        wire = request(*flat)
        res = engine.condense(wire, session="shared-mentions")
        sent = res.request["messages"]
        visible = "\n".join(str(m.get("content") or "") for m in sent)
        for before, after in zip(wire["messages"], sent, strict=True):
            if before.get("role") == "tool" and before["content"] != after["content"]:
                masked += 1
                for word in distinctive_strings(before["content"]):
                    assert word in visible, word
    assert masked >= 3


@pytest.mark.parametrize("again", ["cat app.py", "grep -n def app.py"])
def test_a_string_stays_visible_when_the_output_showing_it_is_later_deduped(again: str) -> None:
    """The same output twice: the first copy is masked while the second, newest, shows
    every string; then the second copy becomes a pointer to the first (dedupe). The
    placeholder must not have relied on the second copy."""
    from ctxwarden.signals import distinctive_strings

    same = lines_of("handler", 40)
    turns = [
        (call("c1", "cat app.py"), result("c1", same)),
        (call("c2", again), result("c2", same)),
        (call("c3", "ls"), result("c3", lines_of("other", 5))),
    ]
    engine = make_engine(pipeline={**FORCE, "mask": {"max_keywords": 2000}})
    flat: list[dict[str, Any]] = []
    for assistant, tool in turns:
        flat += [assistant, tool]
        wire = request(*flat)
        wire["messages"] = wire["messages"][:-2]  # the agent's turn: the newest output last
        res = engine.condense(wire, session="dedupe-after-mask")
        visible = "\n".join(str(m.get("content") or "") for m in res.request["messages"])
        for word in distinctive_strings(same):
            assert word in visible, word
    assert res.report["transforms"].get("dedupe", {}).get("count") == 1


def test_large_outputs_may_keep_more_mentions_per_1k_tokens() -> None:
    ctx, _ = context(_mask_request())
    seg = segment_at(ctx, 3)
    fixed = MaskPass(MaskConfig(max_keywords=2))(ctx, {})[seg.path].text
    scaled = MaskPass(MaskConfig(max_keywords=2, keywords_per_1k_tokens=1000))(ctx, {})
    text = scaled[seg.path].text

    def mentions(t: str) -> list[str]:
        line = next(ln for ln in t.split("\n") if ln.startswith("[mentions: "))
        return line[len("[mentions: ") : -1].split(" ")

    assert len(mentions(fixed)) == 2
    assert len(mentions(text)) > 2


# -- trim_args ------------------------------------------------------------------------


def _script_request(script: str) -> dict[str, Any]:
    return request(
        call("c1", script),
        result("c1", "written"),
        call("c2", "python t.py"),
        result("c2", "ok"),
    )


def test_trim_args_keeps_head_and_error_lines_and_recalls_the_original() -> None:
    body = [f"    step_{i}()" for i in range(40)]
    script = "\n".join(
        [
            "cat > t.py <<'EOF'",
            "try:",
            *body,
            "except ValueError:",
            "    print('Error: bad')",
            "EOF",
        ]
    )
    wire = _script_request(script)
    engine = make_engine(pipeline={**FORCE, "order": ["trim_args"], "keep_newest_calls": 1})
    res = engine.condense(wire)
    sent = res.request["messages"][2]["tool_calls"][0]["function"]["arguments"]
    original = wire["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert sent != original
    value = json.loads(sent)["command"]  # still valid JSON with the same key
    lines = value.split("\n")
    assert lines[0] == "cat > t.py <<'EOF'"
    assert "except ValueError:" in lines and "    print('Error: bad')" in lines
    assert "step_20" not in value
    (ref,) = refs_in(value)
    assert engine.recall(ref) == original
    # the newest call stays as it was
    assert res.request["messages"][4] == wire["messages"][4]


@pytest.mark.parametrize("lines_before", [0, 1])
def test_trim_args_cuts_a_bundle_line_holding_an_error_word(lines_before: int) -> None:
    """A minified bundle written through a call is one 90 KB line holding ``new
    Error(``: kept whole as an error line, trimming saved nothing. It is cut as
    placeholders cut such lines; the whole value is recalled."""
    bundle = '!function(e){"use strict";throw new Error("x")' + "a;" * 45_000
    script = "\n".join([*(["cat > dist/app.min.js <<'EOF'"] * lines_before), bundle, "EOF"])
    wire = _script_request(script)
    engine = make_engine(pipeline={**FORCE, "order": ["trim_args"], "keep_newest_calls": 1})
    res = engine.condense(wire)
    assert res.report["rollbacks"] == 0
    sent = res.request["messages"][2]["tool_calls"][0]["function"]["arguments"]
    original = wire["messages"][2]["tool_calls"][0]["function"]["arguments"]
    value = json.loads(sent)["command"]
    assert len(sent) < 4_000 and shown_error_line(bundle) in value.split("\n")
    (ref,) = set(refs_in(value))
    assert engine.recall(ref) == original


def test_trim_args_leaves_a_short_value_with_an_error_line_whole() -> None:
    one_line = "echo 'Error: this single long line is kept because it is an error' " + "x" * 200
    engine = make_engine(pipeline={**FORCE, "order": ["trim_args"], "keep_newest_calls": 1})
    wire = _script_request(one_line)
    res = engine.condense(wire)
    sent = res.request["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent)["command"] == one_line
    # not rewritten at all: re-encoding an unchanged value saved a token or two and
    # cost a cache rewrite, with no reference in the text to recall
    assert sent == wire["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert "trim_args" not in res.report["transforms"]


@pytest.mark.parametrize(
    "arguments",
    [
        '{"id": 18446744073709551617, "content": "%s"}',
        '{"id": 18446744073709551616, "content": "%s"}',
        '{"scale": 1e400, "content": "%s"}',
    ],
    ids=["integer-beyond-64-bits", "integer-a-float-holds", "float-beyond-double"],
)
def test_trim_args_never_changes_a_value_it_keeps(arguments: str) -> None:
    """Numbers the fast JSON parser would read inexactly (or not at all) are no reason
    to rewrite them: such arguments stay whole, still valid JSON."""
    long_value = "\\n".join(f"line {i} of the new file" for i in range(300))
    wire = _script_request("x")
    original = arguments % long_value
    wire["messages"][2]["tool_calls"][0]["function"]["arguments"] = original
    engine = make_engine(pipeline={**FORCE, "order": ["trim_args"], "keep_newest_calls": 1})
    res = engine.condense(wire)
    sent = res.request["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert sent == original  # left whole: 2**64 == 2.0**64, so equal values are not enough


# -- suppress and keep-percent selection ------------------------------------------------


def test_suppress_reduces_old_outputs_of_named_tools_to_a_stub_with_errors() -> None:
    wire = request(
        call("c1", "poll", name="heartbeat"),
        result("c1", "\n".join(["alive"] * 30 + ["ERROR: disk almost full"])),
        call("c2", "cat notes.md"),
        result("c2", lines_of("notes", 30)),
        call("c3", "poll", name="heartbeat"),
        result("c3", "alive"),
    )
    pipeline = {**FORCE, "order": ["suppress"], "tools": {"heartbeat": {"suppress": True}}}
    engine = make_engine(pipeline=pipeline)
    res = engine.condense(wire)
    sent = res.request["messages"]
    stub = sent[3]["content"]
    assert stub.startswith("[ctxwarden: suppressed output; original cw:")
    assert stub.split("\n")[1:] == ["ERROR: disk almost full"]
    (ref,) = refs_in(stub)
    assert engine.recall(ref) == wire["messages"][3]["content"]
    assert sent[5] == wire["messages"][5]  # another tool: untouched by suppress
    # without the policy nothing is suppressed
    plain = make_engine(pipeline={**FORCE, "order": ["suppress"]}).condense(wire)
    assert plain.request == wire


def test_keep_newest_percent_keeps_that_share_of_outputs_in_full() -> None:
    turns: list[dict[str, Any]] = []
    for i in range(10):
        turns += [call(f"c{i}", f"cat f{i}.py"), result(f"c{i}", lines_of(f"f{i}", 40))]
    wire = request(*turns)
    ctx, _ = context(wire, resolve_pipeline("balanced", {**FORCE, "keep_newest_percent": 30}))
    outputs = [s for s in ctx.segments if s.kind == "tool_output"]
    assert [s.path in ctx.recent for s in outputs] == [False] * 7 + [True] * 3
    masked = MaskPass(MaskConfig())(ctx, {})
    assert {s.path for s in outputs[:7]} == set(masked) & {s.path for s in outputs}


def test_summary_of_a_one_paragraph_text_is_its_lead() -> None:
    text = (
        "Now I need to understand the issue. The problem is that manage.py is not being "
        "watched for changes. Let me check if manage.py is loaded as a module in "
        "sys.modules, then write a script to reproduce it."
    )
    summary, _ = extract_summary(text, keep_sentences=1)
    assert (
        summary == "Now I need to understand the issue. The problem is that manage.py is not being "
        "watched for changes."
    )


def test_summary_keeps_at_most_three_short_path_lines() -> None:
    lines = [f"- touched src/pkg/mod_{i}.py for the header fix" for i in range(6)]
    text = "I changed these files to fix the parsing of headers:\n" + "\n".join(lines)
    summary, _ = extract_summary(text, keep_sentences=1)
    assert summary.split("\n")[1:] == lines[:3]


def test_summary_keeps_an_error_line_that_holds_its_lead() -> None:
    text = (
        "Error: the build broke in two places, both in the parser. Retrying with the "
        "other flag set now, then the tests again."
    )
    summary, errors = extract_summary(text, keep_sentences=1)
    assert errors == (text,)
    assert text in summary.split("\n")


def test_placeholder_keeps_a_long_error_line_whole_even_as_its_head() -> None:
    long_error = "ValueError: " + "x" * 400
    wire = request(
        call("c1", "python run.py"),
        result("c1", "\n".join([long_error, *(f"detail line {i}" for i in range(60))])),
        call("c2", "ls"),
        result("c2", "ok"),
    )
    ctx, _ = context(wire)
    out = MaskPass(MaskConfig())(ctx, {})
    seg = segment_at(ctx, 3)
    assert long_error in out[seg.path].text.split("\n")


def test_a_data_line_holding_an_error_word_is_shown_cut_and_truncation_saves() -> None:
    """A grep hit inside a minified script is one 90 KB line holding ``new Error(``:
    kept whole, the guardrail could save nothing and the output stayed in full. It is
    shown cut (its start, its end, ``[...]`` between); the whole line is recalled."""
    script = 'vendor/app.min.js:2:!function(e){"use strict";throw new Error("x")' + "a;" * 45_000
    hits = [f"src/mod_{i}.py:{i}: for i, x in enumerate(items):" for i in range(40)]
    big = "\n".join(["<output>", script, *hits, "</output>"])
    assert len(big.encode()) > 50_000
    assert error_lines(big) == [script]
    wire = request(call("c1", "grep -rn enumerate ."), result("c1", big))
    cfg = resolve_pipeline("balanced", {})
    ctx, _ = context(wire, cfg)
    seg = segment_at(ctx, 3)
    rep = TruncatePass(cfg.truncate)(ctx, {})[seg.path]
    assert len(rep.text) < len(big) // 10
    shown = shown_error_line(script)
    assert shown in rep.text.split("\n")
    assert shown == script[:1000] + " [...] " + script[-500:]
    assert rep.originals == ((refs_in(rep.text.split("\n")[0])[0], big),)


def _long_failure(detail: str) -> str:
    return "E   AssertionError: assert " + "[0.5, " * 1000 + "] == expected; " + detail


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
def test_long_error_lines_keep_their_signal_and_their_end_visible(preset: str) -> None:
    """The error word past the first 1,000 characters is shown with what surrounds it,
    and two failures that differ only at their ends both stay told apart."""
    buried = "vendor/x.min.js:1:" + "a;" * 1200 + " ValueError: widget id 4711 missing" + ";b" * 600
    first, second = _long_failure("got 17 expected 42"), _long_failure("got 99 expected 42")
    body = "\n".join([buried, first, second, *(f"detail line {i} of the run" for i in range(80))])
    wire = request(
        call("c1", "pytest -q"), result("c1", body), call("c2", "ls"), result("c2", "a.py")
    )
    res = make_engine(preset, FORCE).condense(wire, session="s")
    sent = res.request["messages"][3]["content"]
    assert sent != body and res.report["rollbacks"] == 0
    for visible in ("ValueError: widget id 4711 missing", "got 17 expected 42", "got 99"):
        assert visible in sent
    assert len(sent) < len(body) // 2


def test_a_superseded_run_keeps_a_long_failure_the_newest_run_does_not_show() -> None:
    old, new = _long_failure("got 17 expected 42"), _long_failure("got 99 expected 42")
    wire = request(
        call("c1", "pytest -q"), result("c1", old + "\n1 failed"),
        call("c2", "pytest -q"), result("c2", new + "\n1 failed"),
        call("c3", "ls"), result("c3", "a.py"),
    )  # fmt: skip
    res = make_engine("balanced", FORCE).condense(wire, session="s")
    note = res.request["messages"][3]["content"]
    assert note.startswith("[ctxwarden: superseded") and "got 17 expected 42" in note


def test_an_error_line_up_to_the_limit_is_shown_whole() -> None:
    line = "AssertionError: " + "y" * (MAX_ERROR_LINE - 16)
    assert len(line) == MAX_ERROR_LINE
    assert shown_error_line(line) == line
    assert error_lines(f"ok\n{line}\nok") == [line]
    assert "[...]" in shown_error_line(line + "z")


@given(
    st.integers(0, 6000),
    st.integers(MAX_ERROR_LINE, 9000),
    st.sampled_from(
        [
            "ValueError: bad",
            "FAILED tests/t.py",
            "error: cannot",
            "Traceback (most recent call last)",
        ]
    ),
)
def test_a_cut_line_shows_its_start_its_end_and_its_first_signal(
    at: int, length: int, signal: str
) -> None:
    filler = "q" * length
    line = filler[:at] + " " + signal + " " + filler[at:]
    shown = shown_error_line(line)
    assert shown.startswith(line[:300]) and shown.endswith(line[-300:])
    assert signal in shown
    assert len(shown) <= 2_100


@pytest.mark.parametrize("preset", ["balanced", "aggressive"])
def test_every_error_line_survives_even_hundreds_of_them(preset: str) -> None:
    """No cap: an output with 600 distinct failures keeps all 600 lines visible (a
    capped list hid the ones past the cap from the passes and their checks alike)."""
    rows = []
    for i in range(600):
        rows += [f"tests/test_mod_{i}.py::test_case_{i} PASSED step {j}" for j in range(6)]
        rows.append(f"FAILED tests/test_mod_{i}.py::test_case_{i} - AssertionError: {i} != {i + 1}")
    big = "\n".join(rows)
    wire = request(call("c1", "pytest"), result("c1", big), call("c2", "ls"), result("c2", "a.py"))
    res = make_engine(preset, FORCE).condense(wire, session="s")
    assert res.changed
    sent = res.request["messages"][3]["content"]
    assert sent != big
    failures = [line for line in big.split("\n") if line.startswith("FAILED")]
    assert len(error_lines(big)) == len(failures) == 600
    assert all(line in sent for line in failures)


def test_a_placeholder_lists_again_what_a_cleared_output_showed() -> None:
    """Two outputs masked in one step: the older leaves out what the newer lists. When
    the client then clears the newer one (context editing), the older is condensed
    again and lists those strings itself."""
    from ctxwarden.signals import distinctive_strings

    shared = lines_of("alpha", 20)
    engine = make_engine(pipeline={**FORCE, "recency_tokens": 900, "mask": {"max_keywords": 2000}})
    flat = [
        call("c1", "cat a.py"), result("c1", shared),
        call("c2", "grep -n x a.py"), result("c2", shared + "\n" + lines_of("beta", 3)),
        call("c3", "cat big"), result("c3", lines_of("gamma", 80)),
        call("c4", "ls c"), result("c4", lines_of("eps", 5)),
    ]  # fmt: skip

    def turn(messages: list[dict[str, Any]]) -> Any:
        wire = request(*messages)
        wire["messages"] = wire["messages"][:-2]  # the agent's turn: newest output last
        return engine.condense(wire, session="cleared")

    for end in range(2, len(flat) + 1, 2):
        sent = turn(flat[:end]).request["messages"]
    first = sent[3]["content"]
    assert first.startswith("[ctxwarden: condensed output") and "alpha_item_0" not in first
    flat[3] = {**flat[3], "content": "[cleared by the client]"}
    res = turn(flat)
    assert res.report["fallback_reason"] is None
    visible = "\n".join(str(m.get("content") or "") for m in res.request["messages"])
    assert [w for w in distinctive_strings(shared) if w not in visible] == []


def test_mask_keeps_coloured_error_lines() -> None:
    rows = [f"tests/test_{i}.py::test_{i} PASSED some padding words here {i}" for i in range(300)]
    failures = [
        "\x1b[31mFAILED\x1b[0m tests/test_io.py::test_read - assert 1 == 2",
        "\x1b[1;31merror:\x1b[0m linker command failed",
    ]
    wire = request(
        call("c1", "pytest --color=yes"),
        result("c1", "\n".join([*rows[:150], failures[0], *rows[150:], failures[1]])),
        call("c2", "ls"),
        result("c2", lines_of("ls", 40)),
    )
    engine = make_engine(pipeline={**FORCE, "order": ["mask"]})
    res = engine.condense(wire)
    sent = res.request["messages"][3]["content"]
    assert sent.startswith("[ctxwarden: condensed output")
    # shown as a terminal shows them: the colour codes are no part of what they say
    assert "\nFAILED tests/test_io.py::test_read - assert 1 == 2\n" in sent
    assert "\nerror: linker command failed\n" in sent
    assert "\x1b" not in sent


def test_trim_args_does_not_rewrite_arguments_it_would_leave_as_they_are() -> None:
    # aggressive trims values over 80 characters, but one holding an error word is left
    # whole: re-encoding the arguments unchanged (spaces dropped) saved a token and cost
    # a cache rewrite, with no reference in the text
    command = (
        'cd test && python -m pytest -q 2>&1 | grep -i "FAIL\\|ERROR" | head -20'
        "  # a long-ish command line, kept whole"
    )
    turns: list[dict[str, Any]] = [call("c1", command), result("c1", "ok")]
    for i in range(2, 8):
        turns += [call(f"c{i}", f"echo {i}"), result(f"c{i}", f"out {i}\n" * 400)]
    wire = request(*turns)
    engine = make_engine("aggressive", FORCE)
    res = engine.condense(wire)
    sent = res.request["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert sent == wire["messages"][2]["tool_calls"][0]["function"]["arguments"]
