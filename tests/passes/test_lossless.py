"""Lossless passes on hand-made conversations: dedupe, supersede, normalize."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.passes.config import DedupeConfig, NormalizeConfig, SupersedeConfig
from ctxwarden.passes.dedupe import DedupePass
from ctxwarden.passes.normalize import NormalizePass, minified_json, normalize_text
from ctxwarden.passes.supersede import SupersedePass, action_key
from ctxwarden.signals import error_lines
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

# -- dedupe ---------------------------------------------------------------------------


def _dup_request() -> dict[str, object]:
    listing = lines_of("alpha", 60)
    return request(
        call("c1", "ls -R src"),
        result("c1", listing),
        call("c2", "git status"),
        result("c2", lines_of("beta", 5)),
        call("c3", "find src -type f"),
        result("c3", listing),
        call("c4", "echo done"),  # the copy is not the newest output: dedupe leaves that
        result("c4", "done"),
    )


def test_dedupe_replaces_later_copy_with_note_naming_the_first() -> None:
    ctx, _ = context(_dup_request())
    out = DedupePass(DedupeConfig())(ctx, {})
    first, later = segment_at(ctx, 3), segment_at(ctx, 7)
    assert set(out) == {later.path}
    rep = out[later.path]
    assert rep.lossless and rep.transform == "dedupe"
    assert rep.witness == first.path
    assert "identical to the output in message #3" in rep.text
    assert rep.originals[0][0] in rep.text  # the reference recalls the duplicate
    (ref,) = refs_in(rep.text)
    assert rep.originals == ((ref, later.text),)


def test_dedupe_ref_recalls_the_exact_original_through_the_engine() -> None:
    wire = _dup_request()
    engine = make_engine(pipeline={**FORCE, "order": ["dedupe"]})
    res = engine.condense(wire)
    messages = res.request["messages"]
    original = wire["messages"][7]["content"]  # type: ignore[index]
    assert messages[3]["content"] == original  # the first copy stays
    assert messages[7]["content"] != original
    (ref,) = refs_in(messages[7]["content"])
    assert engine.recall(ref) == original
    assert res.report["transforms"]["dedupe"]["count"] == 1


def test_dedupe_respects_min_tokens_and_leaves_distinct_outputs() -> None:
    ctx, _ = context(_dup_request())
    assert DedupePass(DedupeConfig(min_tokens=10_000))(ctx, {}) == {}
    distinct = request(
        call("c1", "a"),
        result("c1", lines_of("x", 40)),
        call("c2", "b"),
        result("c2", lines_of("y", 40)),
    )
    ctx2, _ = context(distinct)
    assert DedupePass(DedupeConfig())(ctx2, {}) == {}


def test_dedupe_never_touches_a_duplicate_in_the_newest_messages() -> None:
    listing = lines_of("alpha", 60)
    wire = request(call("c1", "ls"), result("c1", listing))
    wire["messages"] += [call("c9", "ls again"), result("c9", listing)]
    ctx, _ = context(wire)
    newest = segment_at(ctx, len(wire["messages"]) - 1)
    assert newest.path not in ctx.eligible
    assert newest.path not in DedupePass(DedupeConfig())(ctx, {})


# -- supersede ------------------------------------------------------------------------


def _rerun_request() -> dict[str, object]:
    # a re-run shows much of what the older run showed (supersession requires it)
    old = lines_of(
        "run",
        40,
        extra=(
            "FAILED tests/test_a.py::test_one - AssertionError",
            "FAILED tests/test_b.py::test_two - KeyError: 'k'",
        ),
    )
    new = lines_of("run", 40, extra=("FAILED tests/test_a.py::test_one - AssertionError",))
    return request(
        call("c1", "pytest -q"),
        result("c1", old),
        call("c2", "sed -n 1,20p src/a.py"),
        result("c2", lines_of("src", 10)),
        call("c3", "pytest -q\n"),  # the same command: only its ends may differ
        result("c3", new),
    )


def test_supersede_replaces_older_run_and_keeps_differing_error_lines() -> None:
    ctx, _ = context(_rerun_request())
    out = SupersedePass(SupersedeConfig())(ctx, {})
    older, newer = segment_at(ctx, 3), segment_at(ctx, 7)
    assert set(out) == {older.path}
    rep = out[older.path]
    assert rep.witness == newer.path
    assert "superseded by the same action in message #7" in rep.text
    (ref,) = refs_in(rep.text)
    assert rep.originals == ((ref, older.text),)
    # The error line the newer run also shows is dropped; the one it lost is kept.
    assert rep.kept_lines == ("FAILED tests/test_b.py::test_two - KeyError: 'k'",)
    assert "FAILED tests/test_b.py::test_two - KeyError: 'k'" in rep.text.split("\n")
    for line in error_lines(older.text):
        assert line in rep.text or line in newer.text


def test_supersede_through_engine_keeps_every_error_visible_and_recallable() -> None:
    wire = _rerun_request()
    engine = make_engine(pipeline={**FORCE, "order": ["supersede"]})
    res = engine.condense(wire)
    sent = res.request["messages"]
    original = wire["messages"][3]["content"]  # type: ignore[index]
    assert sent[3]["content"] != original
    assert sent[7]["content"] == wire["messages"][7]["content"]  # type: ignore[index]
    whole = "\n".join(str(m.get("content")) for m in sent)
    for line in error_lines(original):
        assert line in whole
    (ref,) = refs_in(sent[3]["content"])
    assert engine.recall(ref) == original
    assert engine.recall(ref, "41-42") == "\n".join(original.split("\n")[40:42])


@pytest.mark.parametrize("other", ["cat ../src/app.py", "cat /src/app.py", "cat .src/app.py"])
def test_a_read_of_another_file_is_another_action(other: str) -> None:
    wire = request(
        call("c1", other), result("c1", lines_of("v1", 40)),
        call("c2", "cat ./src/app.py"), result("c2", lines_of("v2", 40)),
    )  # fmt: skip
    ctx, _ = context(wire)
    assert action_key(segment_at(ctx, 3), True) != action_key(segment_at(ctx, 5), True)
    assert SupersedePass(SupersedeConfig())(ctx, {}) == {}


def test_the_blocks_of_one_result_never_supersede_each_other() -> None:
    blocks = [{"type": "text", "text": lines_of("stdout", 40)},
              {"type": "text", "text": lines_of("stderr", 40)}]  # fmt: skip
    wire = request(call("c1", "make"), {"role": "tool", "tool_call_id": "c1", "content": blocks})
    ctx, _ = context(wire)
    assert SupersedePass(SupersedeConfig())(ctx, {}) == {}


def test_argv_commands_keep_their_other_arguments() -> None:
    from ctxwarden.commands import command_of

    def argv(workdir: str) -> str:
        return json.dumps({"command": ["bash", "-lc", "cat setup.py"], "workdir": workdir})

    assert command_of(argv("/repo/a")) != command_of(argv("/repo/b"))
    assert command_of(argv("/repo/a")).startswith("bash -lc 'cat setup.py'")


def test_supersede_treats_full_file_reads_as_the_same_action() -> None:
    wire = request(
        call("c1", "cat ./src/app.py"),
        result("c1", lines_of("v", 40)),
        call("c2", "nl -ba src/app.py"),
        result("c2", lines_of("v", 40, extra=("an added line",))),
    )
    ctx, _ = context(wire)
    assert action_key(segment_at(ctx, 3), True) == action_key(segment_at(ctx, 5), True)
    out = SupersedePass(SupersedeConfig())(ctx, {})
    assert set(out) == {segment_at(ctx, 3).path}
    assert SupersedePass(SupersedeConfig(file_reads=False))(ctx, {}) == {}


def test_retry_loop_keeps_the_newest_k_attempts() -> None:
    attempts = []
    for k in range(5):
        text = lines_of("try", 30, extra=(f"Error: connection refused attempt {k}",))
        attempts += [call(f"c{k}", "curl http://svc:8080/health"), result(f"c{k}", text)]
    wire = request(*attempts)
    ctx, _ = context(wire)
    tool_segments = [s for s in ctx.segments if s.kind == "tool_output"]
    for keep in (1, 2, 3):
        out = SupersedePass(SupersedeConfig(keep_newest=keep))(ctx, {})
        replaced = [s for s in tool_segments if s.path in out]
        assert replaced == tool_segments[: len(tool_segments) - keep]
        for seg in replaced:
            err = error_lines(seg.text)[0]
            assert err in out[seg.path].text  # not shown by the newest: kept verbatim


def test_supersede_leaves_identical_reruns_and_different_commands() -> None:
    same = lines_of("same", 30)
    wire = request(
        call("c1", "make"),
        result("c1", same),
        call("c2", "make"),
        result("c2", same),
        call("c3", "make test"),
        result("c3", lines_of("t", 30)),
    )
    ctx, _ = context(wire)
    assert SupersedePass(SupersedeConfig())(ctx, {}) == {}


# -- normalize ------------------------------------------------------------------------

ESC = "\x1b"


def _noisy() -> str:
    lines = [f"{ESC}[32mPASSED{ESC}[0m test_{i} in module_{i}.py   " for i in range(20)]
    bar = "\r".join(f"Downloading [{'#' * k}{' ' * (20 - k)}] {k * 5}%" for k in range(21))
    repeated = ["WARNING: deprecated call in legacy.py"] * 30
    return "\n".join([*lines, bar, *repeated, "done"])


def test_normalize_text_strips_ansi_progress_and_repeats() -> None:
    out = normalize_text(_noisy())
    assert ESC not in out and "\r" not in out
    assert "Downloading [####################] 100%" in out
    assert "Downloading [#" + " " * 19 not in out
    assert out.count("WARNING: deprecated call in legacy.py") == 1
    assert "repeated 29 more times" in out
    assert not any(line != line.rstrip() for line in out.split("\n"))
    assert normalize_text(out) == out  # idempotent


def test_normalize_minifies_pretty_json_and_keeps_its_value() -> None:
    data = {"items": [{"id": i, "name": f"item_{i}"} for i in range(5)]}
    out = normalize_text(json.dumps(data, indent=2))
    assert "\n" not in out and json.loads(out) == data
    assert normalize_text(json.dumps(data, indent=2), minify_json=False) != out


def test_minified_json_keeps_every_value_as_written() -> None:
    pretty = '{\n  "a": 1.10,\n  "b": [1E5, 1e400, "x  y\\" z"],\n  "id": 1,\n  "id": 2\n}'
    assert normalize_text(pretty) == '{"a":1.10,"b":[1E5,1e400,"x  y\\" z"],"id":1,"id":2}'


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON, st.sampled_from([1, 2, 4, "\t"]))
def test_minified_json_only_drops_whitespace(value: object, indent: int | str) -> None:
    pretty = json.dumps(value, indent=indent)
    assert minified_json(pretty) == json.dumps(value, separators=(",", ":"))


def test_normalize_pass_refs_exact_original() -> None:
    noisy = _noisy()
    wire = request(call("c1", "pytest --color=yes"), result("c1", noisy), *_LATER)
    engine = make_engine(pipeline={**FORCE, "order": ["normalize"]})
    res = engine.condense(wire)
    sent = res.request["messages"][3]["content"]
    assert sent.startswith(normalize_text(noisy))
    assert "normalized" in sent
    (ref,) = refs_in(sent)
    assert engine.recall(ref) == noisy
    assert res.report["transforms"]["normalize"]["count"] == 1


def test_normalize_pass_skips_clean_text_and_small_savings() -> None:
    wire = request(call("c1", "ls"), result("c1", lines_of("clean", 40)), *_LATER)
    ctx, _ = context(wire)
    assert NormalizePass(NormalizeConfig())(ctx, {}) == {}
    noisy = request(call("c1", "ls"), result("c1", _noisy()), *_LATER)
    ctx2, _ = context(noisy)
    assert NormalizePass(NormalizeConfig())(ctx2, {})
    assert NormalizePass(NormalizeConfig(min_saving_tokens=100_000))(ctx2, {}) == {}


def test_the_newest_output_never_points_at_a_copy_condensed_in_the_same_step() -> None:
    """Dedupe would make it "identical to message #3" while mask condenses message 3
    (now, or on a later turn while the note is kept): the agent's latest observation
    would be shown nowhere in full. A recent output is not deduped; once older it is."""
    listing = lines_of("alpha", 60)
    wire = request(call("c1", "ls"), result("c1", listing), call("c2", "pwd"),
                   result("c2", lines_of("beta", 60)), call("c3", "ls"),
                   result("c3", listing))  # fmt: skip
    engine = make_engine(pipeline={**FORCE, "order": ["dedupe", "mask"]})
    res = engine.condense(wire)
    sent = res.request["messages"]
    assert sent[3] != wire["messages"][3]  # type: ignore[index]  # the first copy: masked
    assert sent[7] == wire["messages"][7]  # type: ignore[index]  # the newest: whole
    alone = make_engine(pipeline={**FORCE, "order": ["dedupe"]}).condense(wire).request
    assert alone["messages"][7] == wire["messages"][7]  # type: ignore[index]
    later = {**wire, "messages": [*wire["messages"][:-2], *_LATER, *wire["messages"][-2:]]}
    older = make_engine(pipeline={**FORCE, "order": ["dedupe"]}).condense(later).request
    assert "identical to the output in message #3" in older["messages"][7]["content"]


_LATER = (call("c9", "echo done"), result("c9", "done"))
"""A later output: what comes before it is not the newest any more."""


@pytest.mark.parametrize("run", [2, 4, 8])
def test_normalize_repeat_run_threshold(run: int) -> None:
    text = "\n".join(["x = compute_value(1)"] * (run - 1) + ["end"])
    assert normalize_text(text, repeat_run=run) == text
    longer = "\n".join(["x = compute_value(1)"] * run + ["end"])
    assert "repeated" in normalize_text(longer, repeat_run=run)


def test_a_superseded_run_keeps_errors_only_a_later_block_of_the_newest_run_shows() -> None:
    # the note is checked against its witness, the newest run's first block: an error
    # line the newest run shows only in its stderr block stays in the note
    err = "FAILED tests/test_a.py::test_one - AssertionError: boom"
    newest = [{"type": "text", "text": lines_of("v1", 40)},
              {"type": "text", "text": lines_of("stderr2", 10, extra=(err,))}]  # fmt: skip
    wire = request(
        call("c1", "pytest -x"), result("c1", lines_of("v1", 40, extra=(err,))),
        call("c2", "pytest -x"), {"role": "tool", "tool_call_id": "c2", "content": newest},
    )  # fmt: skip
    res = make_engine(pipeline={**FORCE, "order": ["supersede"]}).condense(wire)
    assert res.report["rollbacks"] == 0
    note = res.request["messages"][3]["content"]
    assert note.startswith("[ctxwarden: superseded") and err in note


def test_a_workdir_does_not_put_every_output_of_a_directory_in_focus() -> None:
    import json as _json

    def argv(i: int) -> dict[str, Any]:
        args = {"command": ["bash", "-lc", f"cat file_{i}.py"], "workdir": "/Users/me/repo"}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}",
                "type": "function", "function": {"name": "shell",
                                                 "arguments": _json.dumps(args)}}]}  # fmt: skip

    turns: list[dict[str, Any]] = []
    for i in range(8):
        turns += [argv(i), result(f"c{i}", lines_of(f"f{i}", 40))]
    engine = make_engine("conservative", {**FORCE, "relevance_turns": 4})
    res = engine.condense(request(*turns))
    assert res.report["transforms"].get("mask", {}).get("count", 0) >= 3


def test_a_recent_copy_stays_whole_when_its_first_copy_leaves_the_window_later() -> None:
    """Both copies recent on turn 1, the first masked on turn 2 while the second is
    still recent: a dedupe note kept from turn 1 would point at the masked copy."""
    listing = lines_of("alpha", 60)
    turn1 = [call("c1", "ls"), result("c1", listing), call("c2", "ls"), result("c2", listing)]
    turn2 = [*turn1, call("c3", "pwd"), result("c3", lines_of("gamma", 5))]
    ctx, _ = context(request(*turn2))
    budget = 2 * segment_at(ctx, 5).tokens  # turn 1: both fit; turn 2: the first does not
    engine = make_engine(pipeline={**FORCE, "recency_tokens": budget, "order": ["dedupe", "mask"]})
    for turns in (turn1, turn2):
        sent = engine.condense(request(*turns), session="s").request["messages"]
        assert sent[5]["content"] == listing
    assert sent[3]["content"] != listing  # turn 2 masked the first copy


def test_the_truncation_guardrail_cuts_a_recent_copy_of_an_oversized_output() -> None:
    huge = lines_of("alpha", 3000)
    wire = request(call("c1", "cat big"), result("c1", huge), call("c2", "pwd"),
                   result("c2", lines_of("beta", 60)), call("c3", "cat big"),
                   result("c3", huge))  # fmt: skip
    for order in (["truncate"], ["dedupe", "truncate"]):
        sent = make_engine(pipeline={**FORCE, "order": order}).condense(wire).request
        assert sent["messages"][7]["content"].count("\n") < 200, order  # cut, not whole


def test_supersede_keeps_an_error_line_the_newest_run_shows_only_inside_another() -> None:
    passed = "\n".join(f"tests/test_mod.py::test_{i} PASSED" for i in range(20, 120))
    run1 = f"{passed}\nFAILED tests/test_mod.py::test_1\nFAILED tests/test_mod.py::test_2"
    run2 = f"{passed}\nFAILED tests/test_mod.py::test_10\nFAILED tests/test_mod.py::test_2"
    wire = request(
        call("c1", "pytest tests/test_mod.py"),
        result("c1", run1),
        call("c2", "pytest tests/test_mod.py"),
        result("c2", run2),
    )
    ctx, _ = context(wire)
    (rep,) = SupersedePass(SupersedeConfig())(ctx, {}).values()
    assert rep.text.split("\n")[1:] == ["FAILED tests/test_mod.py::test_1"]
    assert rep.kept_lines == ("FAILED tests/test_mod.py::test_1",)


def test_a_coloured_output_is_normalized_with_its_error_lines_shown_plain() -> None:
    rows = [f"\x1b[32mtests/t.py::test_{i} PASSED\x1b[0m" for i in range(60)]
    coloured = "\n".join([*rows, "\x1b[31mFAILED\x1b[0m tests/t.py::test_x - assert 1 == 2"])
    wire = request(call("c1", "pytest --color=yes"), result("c1", coloured), *_LATER)
    engine = make_engine(pipeline={**FORCE, "order": ["normalize"]})
    res = engine.condense(wire)
    sent = res.request["messages"][3]["content"]
    assert res.report["transforms"]["normalize"]["count"] == 1
    assert res.report["rollbacks"] == 0
    assert "\nFAILED tests/t.py::test_x - assert 1 == 2\n" in sent
    assert "\x1b" not in sent
