"""A normalized output is still masked or truncated: normalization restates the whole
text (colour codes and trailing spaces gone), so it must not keep the lossy passes off
an old output. Coloured agent logs were sent nearly whole on every later turn."""

from __future__ import annotations

from typing import Any

from ctxwarden.passes.base import Replacement
from ctxwarden.passes.config import MaskConfig
from ctxwarden.passes.mask import MaskPass
from tests.passes.convo import FORCE, call, context, lines_of, make_engine, request, result


def _coloured(tag: str, n: int = 60) -> str:
    """``n`` lines, every other one green (an uncoloured error line would not stop
    normalization: it keeps error lines as they are)."""
    rows = lines_of(tag, n).split("\n")
    return "\n".join(f"\x1b[32m{r}\x1b[0m" if i % 2 == 0 else r for i, r in enumerate(rows))


def _turns(k: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i in range(k):
        turns += [call(f"c{i}", f"pytest -k t{i} --color=yes"), result(f"c{i}", _coloured(f"t{i}"))]
    return turns


def test_mask_may_replace_a_normalization_but_no_other_replacement() -> None:
    wire = request(*_turns(2))
    ctx, _ = context(wire)
    ctx.restating = frozenset({"normalize"})
    first, second = (s for s in ctx.segments if s.kind == "tool_output")
    decided = {
        first.path: Replacement("restated", "normalize"),
        second.path: Replacement("[identical to ...]", "dedupe"),
    }
    proposed = MaskPass(MaskConfig())(ctx, decided)
    assert first.path in proposed and second.path not in proposed
    # without the restating transforms named, a replaced segment stays closed
    ctx.restating = frozenset()
    assert MaskPass(MaskConfig())(ctx, decided) == {}


def test_old_coloured_outputs_are_masked_not_only_normalized() -> None:
    engine = make_engine("balanced", FORCE)
    messages = request(*_turns(6))["messages"]
    report: dict[str, Any] = {}
    for end in range(4, len(messages) + 1, 2):  # turn by turn, as a proxy sees them
        out = engine.condense({**request(), "messages": messages[:end]}, session="s")
        report = out.report
    sent = out.request["messages"]
    old = [m["content"] for m in sent[:-4] if m["role"] == "tool"]
    assert old and all(text.startswith("[ctxwarden: condensed output") for text in old)
    assert "mask" in report["transforms"]
    assert report["tokens_after"] < report["tokens_before"] / 2


def test_a_frozen_normalization_is_masked_once_the_output_is_old() -> None:
    # normalization applies to outputs still in the recency window; once they leave
    # it, a later step masks them (the saving is judged against the normalized text)
    pipeline = {**FORCE, "recency_tokens": 3000}  # about two coloured outputs
    engine = make_engine("balanced", pipeline)
    messages = request(*_turns(8))["messages"]
    transforms: list[str] = []
    for end in range(4, len(messages) + 1, 2):
        out = engine.condense({**request(), "messages": messages[:end]}, session="s")
        transforms.append(",".join(sorted(out.report["transforms"])))
    first_output = out.request["messages"][3]["content"]
    assert any("normalize" in t for t in transforms[:6])  # normalized while recent
    assert first_output.startswith("[ctxwarden: condensed output")  # masked since
    (ref,) = [w for w in first_output.split() if w.startswith("cw:")][:1]
    assert engine.recall(ref.rstrip(")")) == messages[3]["content"]


def test_a_lossy_proposal_saving_less_than_the_normalization_is_not_taken() -> None:
    # an old output of one word in a sea of colour codes: its normalization is shorter
    # than any placeholder, so the mask proposal (which would still save tokens
    # against the original) is not taken over it
    coloured = "\x1b[32m" * 80 + "ok" + "\x1b[0m" * 80
    wire = request(
        call("c1", "ls --color"),
        result("c1", coloured),
        call("c2", "make"),
        result("c2", lines_of("build", 30)),
    )
    engine = make_engine("balanced", {**FORCE, "mask": {"min_tokens": 0, "max_ratio": 1.0}})
    out = engine.condense(wire)
    assert out.request["messages"][3]["content"].startswith("ok\n[ctxwarden: normalized")
    assert out.report["transforms"]["normalize"]["count"] == 1


def test_a_string_an_old_output_omits_stays_shown_when_its_normalization_is_truncated() -> None:
    # mask leaves out of A's placeholder what newer output B shows; B is coloured and
    # oversized, so its normalization is taken over by truncate in the same step: a
    # normalization must not count as showing anything for good
    word = "resolve_tenant_quota_limits"
    a = "\n".join([f"alpha step {i}: ok alpha_check_{i}" for i in range(60)] + [f"call {word}"])
    rows = [f"\x1b[32m{i:05d}\x1b[0m loaded record_{i}_field into slot_{i}" for i in range(2600)]
    rows[1800] = f"\x1b[32m01800\x1b[0m loaded {word} into slot_1800"
    wire = request(
        call("c1", "python run_a.py"),
        result("c1", a),
        call("c2", "python run_b.py --color"),
        result("c2", "\n".join(rows)),
    )
    out = make_engine("balanced").condense(wire, session="s")
    sent = out.request["messages"]
    assert sent[5]["content"].startswith("[ctxwarden: truncated output")
    assert any(word in str(m.get("content")) for m in sent)


def test_a_placeholder_taking_over_a_frozen_normalization_lists_its_mentions() -> None:
    engine = make_engine("balanced", {**FORCE, "recency_tokens": 3000})
    messages = request(*_turns(8))["messages"]
    for end in range(4, len(messages) + 1, 2):
        out = engine.condense({**request(), "messages": messages[:end]}, session="s")
    first = out.request["messages"][3]["content"]
    assert first.startswith("[ctxwarden: condensed output")
    assert "[mentions: " in first and "t0_item_1" in first


def test_a_recent_normalized_output_is_truncated_only_when_its_normalized_form_is_too_big() -> None:
    # 76 KB with its colour codes, 46 KB without: under the 50 KB guardrail as sent
    rows = [
        f"\x1b[38;5;33m\x1b[1m{i:05d}\x1b[0m \x1b[38;5;244mINFO\x1b[0m handled request_{i} "
        f"for user_{i % 37} in {i % 91} ms"
        for i in range(900)
    ]
    wire = request(call("c1", "tail -n 900 app.log"), result("c1", "\n".join(rows)))
    out = make_engine("balanced").condense(wire, session="s")
    assert set(out.report["transforms"]) == {"normalize"}
    assert "request_450 " in out.request["messages"][3]["content"]


def test_a_coloured_output_is_described_without_its_colour_codes() -> None:
    engine = make_engine("balanced", FORCE)
    out = engine.condense(request(*_turns(3)), session="s")
    first = out.request["messages"][3]["content"]
    assert first.startswith("[ctxwarden: condensed output")
    assert "\x1b" not in first and "32m" not in first
    assert "t0_item_1" in first.split("[mentions: ")[1]


def test_a_title_code_across_lines_does_not_swallow_error_lines() -> None:
    # an unterminated-on-its-line OSC code (a terminal title) closed lines later:
    # stripped over the whole text it took the lines between, an error line with them
    rows = [f"build step {i}: compiled unit_{i}.o" for i in range(200)]
    rows[10] = "\x1b]0;building" + rows[10]
    rows[60] = "ERROR: build step failed"
    rows[90] = rows[90] + "\x07"
    rows[150] = "\x1b[31mFAILED tests/test_x.py::test_y\x1b[0m"
    wire = request(
        call("c1", "make --color"),
        result("c1", "\n".join(rows)),
        call("c2", "ls"),
        result("c2", lines_of("ls", 30)),
    )
    out = make_engine("balanced", FORCE).condense(wire)
    sent = out.request["messages"][3]["content"]
    assert sent.startswith("[ctxwarden: condensed output")
    assert "\nERROR: build step failed" in sent and "FAILED tests/test_x.py::test_y" in sent
