"""Agent tool vocabularies outside the corpus (review of /work/s24/reviewVocab).

1. An output wrapped in JSON (older Codex CLI's ``{"output": "...", "metadata":
   {"exit_code": 101}}``, MCP results) is read by the text its strings hold: its error
   lines, line count and exit status, and every error line of its placeholder is shown;
   a suppressed one's stub counts the lines of that text too.
2. A poll of a background process (Claude Code's ``BashOutput``, Codex's
   ``write_stdin``) and an argument-less snapshot of another page (Playwright's
   ``browser_snapshot``) are not "superseded": the newer output shows other things.
5. An old call's one-line command is not cut to save a token or two.
6. Argv arrays keep their word boundaries in the command (``shlex.join``).
8. A call's label leads with its file or URL, prose last.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden import json_wrapped
from ctxwarden.commands import command_of
from ctxwarden.passes.base import Replacement, Segment
from ctxwarden.passes.config import SupersedeConfig, SuppressConfig
from ctxwarden.passes.placeholder import Digest, build_placeholder, describe
from ctxwarden.passes.summarize import extract_summary
from ctxwarden.passes.supersede import SupersedePass
from ctxwarden.passes.suppress import SuppressPass
from ctxwarden.pipeline.condenser import Condenser
from ctxwarden.signals import LinesShown, error_lines, exit_status
from tests.passes.convo import (
    FORCE,
    call,
    call_with,
    context,
    make_engine,
    output_segment,
    request,
    result,
)

# -- 1. JSON-wrapped outputs ------------------------------------------------------------

_ERRORS = [60, 150, 240, 330]


def _cargo_log() -> str:
    return "\n".join(
        f"error[E0308]: mismatched types in crate_mod_{i}::func_{i} at src/mod_{i}.rs:{i}:5"
        if i in _ERRORS
        else f"   Compiling crate_dep_{i} v0.{i}.0 (registry) ... ok, {i * 17} bytes"
        for i in range(400)
    )


def _codex(output: str, code: int) -> str:
    return json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 3.1}})


def test_the_error_lines_of_a_json_wrapped_output_are_those_of_its_text() -> None:
    log = _cargo_log()
    wrapped = _codex(log, 101)
    assert "\n" not in wrapped  # one physical line: every error word glued to an `n`
    assert error_lines(wrapped) == error_lines(log) and len(error_lines(log)) == 4
    assert json_wrapped.json_view(wrapped) == log
    assert exit_status(wrapped) == 101
    shown = LinesShown(wrapped)  # the JSON shows the lines its strings hold
    assert all(shown.shows(e) for e in error_lines(log))


_LINES = st.sampled_from(
    [
        "ok",
        "",
        "   Compiling a v0.1.0",
        "error[E0308]: mismatched types",
        "E       assert 1 == 2",
        "FAILED tests/test_a.py::test_x - AssertionError",
        'He said "fine" \\ done',
        "\tindented\ttabs",
        "Traceback (most recent call last):",
    ]
)


@given(st.lists(_LINES, min_size=2, max_size=20), st.sampled_from(["output", "stdout", "text"]))
def test_wrapping_an_output_in_json_keeps_its_error_lines(lines: list[str], key: str) -> None:
    text = "\n".join(lines)
    wrapped = json.dumps({key: text, "metadata": {"exit_code": 1}})
    assert error_lines(wrapped) == error_lines(text)
    assert exit_status(wrapped) == 1


def test_exit_status_keys_of_json_outputs() -> None:
    body = "line one\nline two"
    assert exit_status(json.dumps({"stdout": body, "returncode": 2})) == 2
    assert exit_status(json.dumps({"result": {"exitCode": 7, "output": body}})) == 7
    assert exit_status(json.dumps({"output": body, "metadata": {"exit_code": 101}})) == 101
    # the shallowest key wins: a child's status is not the command's
    nested = {"exit_code": 0, "children": [{"exit_code": 9}], "output": body}
    assert exit_status(json.dumps(nested)) == 0
    # helper-133: a document that is no wrapped command states none (a list of jobs each
    # with its own code, a REST answer's status, a code too deep or without text)
    jobs = [{"name": "build", "exit_code": 0, "log": body}, {"name": "test", "exit_code": 1}]
    assert exit_status(json.dumps(jobs)) is None
    assert exit_status(json.dumps({"status": 1, "msg": "success", "body": body})) is None
    assert exit_status(json.dumps({"a": {"b": {"c": {"exit_code": 3}}}, "out": body})) is None
    assert exit_status(json.dumps({"output": "ok", "exit_code": 3})) is None
    # an HTTP status, a boolean, a string: no exit status
    assert exit_status(json.dumps({"status": 200, "body": body})) is None
    assert exit_status(json.dumps({"exit_code": True, "output": body})) is None
    assert exit_status(json.dumps({"exit_code": "1", "output": body})) is None
    # a JSON text whose strings hold no line break is read as written
    assert json_wrapped.json_view(json.dumps({"a": "b", "c": [1, 2]})) is None
    assert json_wrapped.json_view('{"output": "a\\nb"') is None  # not JSON


def test_json_inside_a_json_string_is_decoded_in_turn() -> None:
    log = _cargo_log()
    mcp = json.dumps({"content": [{"type": "text", "text": _codex(log, 101)}]})
    view = json_wrapped.json_view(mcp)
    assert view is not None and view.endswith(log)
    assert json_wrapped.json_view(view) is None  # a view is final
    assert error_lines(mcp) == error_lines(log)
    assert exit_status(mcp) == 101


def _placeholder(text: str) -> str:
    segment = Segment(
        path=("messages", 3, "content"),
        message_index=3,
        position=0,
        kind="tool_output",
        text=text,
        tokens=10_000,
        tool_name="shell",
        command="bash -lc 'cargo build'",
    )
    built = build_placeholder(segment, "cw:000000000000", Digest(head_lines=1, tail_lines=1))
    assert built is not None
    return built[0]


def test_a_placeholder_of_a_json_wrapped_output_shows_its_status_lines_and_errors() -> None:
    log = _cargo_log()
    body = _placeholder(_codex(log, 101))
    header = body.split("\n")[0]
    assert "exit 101" in header and "400 lines in JSON" in header
    lines = body.split("\n")
    for e in error_lines(log):
        assert e in lines
    # the head and tail are lines of the text, not of the JSON; the hidden ranges are
    # counted, not numbered (recall numbers the original's lines: the JSON has one)
    assert lines[1] == "   Compiling crate_dep_0 v0.0.0 (registry) ... ok, 0 bytes"
    assert "... (398 lines)" in lines
    assert not any(line.startswith("... (lines") for line in lines)
    assert "exit_code" not in body and "duration_seconds" not in body  # keys: no mentions


def test_a_suppressed_json_wrapped_output_counts_the_lines_of_its_text() -> None:
    # the stub said "1 lines": the same count as the placeholder's and supersede's note
    log = _cargo_log()
    wire = request(
        call("c1", "cargo build", name="build"), result("c1", _codex(log, 101)),
        call("c2", "echo done"), result("c2", "done"),
    )  # fmt: skip
    ctx, _ = context(wire)
    out = SuppressPass(SuppressConfig(), ["build"])(ctx, {})
    (rep,) = out.values()
    header, *errors = rep.text.split("\n")
    assert "(exit 101, 400 lines in JSON, " in header
    assert errors == error_lines(log)
    plain = request(call("c1", "cargo build", name="build"), result("c1", log),
                    call("c2", "echo done"), result("c2", "done"))  # fmt: skip
    (rep,) = SuppressPass(SuppressConfig(), ["build"])(context(plain)[0], {}).values()
    assert "(400 lines, " in rep.text.split("\n")[0]  # a plain output as before


def test_the_engine_keeps_every_error_line_of_a_json_wrapped_output_visible() -> None:
    log = _cargo_log()
    wire = request(
        call_with("c1", "shell", {"command": ["bash", "-lc", "cargo build"], "workdir": "/r"}),
        result("c1", _codex(log, 101)),
        call_with("c2", "shell", {"command": ["bash", "-lc", "ls"], "workdir": "/r"}),
        result("c2", _codex("a\nb", 0)),
    )
    for preset in ("balanced", "aggressive"):
        res = make_engine(preset).condense(wire)
        sent = res.request["messages"][3]["content"]
        assert sent != wire["messages"][3]["content"]  # condensed
        assert "exit 101" in sent.split("\n")[0]
        shown = LinesShown(sent)
        assert all(shown.shows(e) for e in error_lines(log)), preset


def test_the_condensers_check_sees_the_error_lines_of_a_json_wrapped_output() -> None:
    # the check every replacement passes before it is committed: a placeholder that
    # hides the error lines of a JSON-wrapped output is refused, one showing them kept
    log = _cargo_log()
    segment = Segment(
        path=("messages", 3, "content"),
        message_index=3,
        position=0,
        kind="tool_output",
        text=_codex(log, 101),
        tokens=10_000,
    )
    hiding = Replacement("[ctxwarden: condensed output (1 lines)]\n" + log[:80], "mask")
    showing = Replacement(_placeholder(segment.text), "mask")
    check = Condenser._errors_visible
    assert not check(None, segment, hiding, {})  # type: ignore[arg-type]
    assert check(None, segment, showing, {})  # type: ignore[arg-type]


def test_a_summary_of_a_json_text_keeps_its_error_lines() -> None:
    text = json.dumps({"answer": "Looked at it.\nerror: linker failed\nAll else fine."})
    summary, kept = extract_summary(text, 1)
    assert kept == ("error: linker failed",)
    assert LinesShown(summary).shows("error: linker failed")


# -- 2 and 3. supersession only where the newer output shows the same -------------------


def _superseded(wire: dict[str, Any]) -> dict[int, int]:
    """Message index of each superseded output -> the message its note names."""
    ctx, _ = context(wire)
    found = {}
    for path, rep in SupersedePass(SupersedeConfig())(ctx, {}).items():
        assert rep.witness is not None
        found[ctx.by_path[path].message_index] = ctx.by_path[rep.witness].message_index
    return found


def _log(start: int, stop: int) -> str:
    return "\n".join(
        f"[server] request {i} handled in {i * 3} ms (user_{i})" for i in range(start, stop)
    )


def _bash_output(start: int, stop: int) -> str:
    stdout = f"<stdout>\n{_log(start, stop)}\n</stdout>"
    return f"<status>running</status>\n\n{stdout}\n\n<timestamp>t{start}</timestamp>"


def _closing() -> list[dict[str, Any]]:
    return [call("cz", "echo done"), result("cz", "done")]


def test_polls_of_a_background_process_do_not_supersede_each_other() -> None:
    claude = request(
        call_with("c1", "Bash", {"command": "python server.py", "run_in_background": True}),
        result("c1", "Command running in background with ID: bash_1"),
        call_with("c2", "BashOutput", {"bash_id": "bash_1"}),
        result("c2", _bash_output(0, 60)),
        call_with("c3", "BashOutput", {"bash_id": "bash_1"}),
        result("c3", _bash_output(60, 120)),
        *_closing(),
    )
    assert _superseded(claude) == {}
    poll = {"session_id": 3, "chars": "", "yield_time_ms": 5000}
    codex = request(
        call_with("c1", "write_stdin", poll),
        result("c1", "Process running with session ID 3\nOutput:\n" + _log(0, 60)),
        call_with("c2", "write_stdin", poll),
        result("c2", "Process running with session ID 3\nOutput:\n" + _log(60, 120)),
        *_closing(),
    )
    assert _superseded(codex) == {}


def _snapshot(url: str, rows: list[str]) -> str:
    head = ["### Page state", f"- Page URL: {url}", "- Page Title: Shop", "```yaml", "- table:"]
    return "\n".join([*head, *(f'  - row "{r}" [ref=e{i}]' for i, r in enumerate(rows)), "```"])


def test_snapshots_of_two_pages_do_not_supersede_each_other_but_of_one_page_do() -> None:
    orders = [f"Order #{1000 + i} customer_{i} total {i * 13}.50 EUR" for i in range(50)]
    invoices = [f"Invoice #{5000 + i} vendor_{i} due 2025-01-{10 + i % 9}" for i in range(50)]
    snap = "mcp__playwright__browser_snapshot"
    nav = "mcp__playwright__browser_navigate"

    def flow(second: list[str], url: str) -> dict[str, Any]:
        return request(
            call_with("c1", nav, {"url": "https://shop.example.com/orders"}),
            result("c1", "Navigated"),
            call_with("c2", snap, {}),
            result("c2", _snapshot("https://shop.example.com/orders", orders)),
            call_with("c3", nav, {"url": url}),
            result("c3", "Navigated"),
            call_with("c4", snap, {}),
            result("c4", _snapshot(url, second)),
            *_closing(),
        )

    assert _superseded(flow(invoices, "https://shop.example.com/invoices")) == {}
    # the same page again with one more order: the older snapshot is stale
    again = flow(
        [*orders, "Order #1050 customer_50 total 650.50 EUR"], "https://shop.example.com/orders"
    )
    assert _superseded(again) == {5: 9}


def test_a_rerun_after_a_change_still_supersedes() -> None:
    source = [f"{i:>4}\tdef step_{i}(value): return value * {i}" for i in range(60)]
    edited = [*source[:30], "  31\tdef step_30(value): return value * 31", *source[31:]]
    failed = [
        "============ test session starts ============",
        "platform linux -- Python 3.11.4, pytest-7.4.0",
        "rootdir: /repo",
        "collected 12 items",
        "tests/test_steps.py ...........F",
        "FAILED tests/test_steps.py::test_step_30 - assert 900 == 930",
        "============ 1 failed, 11 passed in 0.31s ============",
    ]
    passed = [*failed[:4], "tests/test_steps.py ............", "==== 12 passed in 0.30s ===="]
    wire = request(
        call("c1", "cat src/steps.py"), result("c1", "\n".join(source)),
        call("c2", "python -m pytest -q"), result("c2", "\n".join(failed)),
        call("c3", "sed -i 's/30$/31/' src/steps.py"), result("c3", ""),
        call("c4", "cat src/steps.py"), result("c4", "\n".join(edited)),
        call("c5", "python -m pytest -q"), result("c5", "\n".join(passed)),
        *_closing(),
    )  # fmt: skip
    assert _superseded(wire) == {3: 9, 5: 11}


def test_a_json_wrapped_rerun_is_compared_by_its_text_and_counts_its_lines() -> None:
    log = _cargo_log()
    wire = request(
        call("c1", "cargo build"), result("c1", _codex(log, 101)),
        call("c2", "cargo build"), result("c2", _codex(log.replace("E0308", "E0309"), 101)),
        *_closing(),
    )  # fmt: skip
    ctx, _ = context(wire)
    out = SupersedePass(SupersedeConfig())(ctx, {})
    (rep,) = out.values()
    assert "(400 lines in JSON)" in rep.text.split("\n")[0]


# -- 5. trim_args keeps a one-line command that a trim would barely shorten ------------


def test_an_old_calls_one_line_command_is_not_cut_for_a_token() -> None:
    # aggressive trims values over 80 characters: this one lost its last 78 for a note
    # of about 45, one token saved, and the model could no longer tell which test ran
    command = (
        "cd /repo && python -m pytest "
        "tests/unit/parser/test_header.py::TestHeaderParser::test_parse_with_unicode_options -x -q"
    )
    arguments = {"command": command, "description": "Run the failing header parser test only"}
    long_line = "echo " + "0123456789abcdef" * 40  # a long one-liner: still trimmed
    turns: list[dict[str, Any]] = [
        call_with("c1", "Bash", arguments), result("c1", "FAILED\n" * 30),
        call("c2", long_line), result("c2", "ok"),
    ]  # fmt: skip
    for i in range(3, 8):
        turns += [call(f"c{i}", f"echo {i}"), result(f"c{i}", f"out {i}\n" * 400)]
    wire = request(*turns)
    res = make_engine("aggressive", FORCE).condense(wire)
    sent = res.request["messages"]
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == arguments
    trimmed = json.loads(sent[4]["tool_calls"][0]["function"]["arguments"])["command"]
    assert "ctxwarden" in trimmed and len(trimmed) < len(long_line) - 128


# -- 6. argv arrays ---------------------------------------------------------------------


def test_argv_arrays_keep_their_word_boundaries() -> None:
    one = command_of(json.dumps({"command": ["rg", "-n", "def parse", "src"]}))
    two = command_of(json.dumps({"command": ["rg", "-n", "def", "parse", "src"]}))
    assert one == "rg -n 'def parse' src" and two == "rg -n def parse src"
    wire = request(
        call_with("c1", "shell", {"command": ["rg", "-n", "def parse", "src"]}),
        result("c1", "\n".join(f"src/m{i}.py:{i}:def parse_{i}(x):" for i in range(40))),
        call_with("c2", "shell", {"command": ["rg", "-n", "def", "parse", "src"]}),
        result("c2", "rg: parse: No such file or directory (os error 2)\n"
                     + "\n".join(f"src/m{i}.py:{i}:def parse_{i}(x):" for i in range(40))),
        *_closing(),
    )  # fmt: skip
    assert _superseded(wire) == {}


def test_a_move_inside_an_argv_script_is_a_move() -> None:
    listing = "\n".join(f"file_{i}.py" for i in range(40))
    ls = {"command": ["bash", "-lc", "ls"], "workdir": "/repo"}
    wire = request(
        call_with("c1", "shell", ls), result("c1", listing),
        call_with("c2", "shell", {"command": ["bash", "-lc", "cd sub"], "workdir": "/repo"}),
        result("c2", ""),
        call_with("c3", "shell", ls), result("c3", listing + "\nnew.py"),
        *_closing(),
    )  # fmt: skip
    assert _superseded(wire) == {}


# -- 8. labels lead with the file or URL -------------------------------------------------


def _label(tool: str, arguments: dict[str, Any]) -> str:
    return describe(output_segment(tool, command_of(json.dumps(arguments))))


def test_a_label_leads_with_the_file_or_url_and_puts_prose_last() -> None:
    cursor = _label(
        "read_file",
        {
            "target_file": "src/pkg/huge.py",
            "start_line_one_indexed": 1,
            "end_line_one_indexed_inclusive": 3200,
            "should_read_entire_file": False,
            "explanation": "Reading the whole module to understand how parsing is wired "
            "together before changing it, since the tests fail in three places",
        },
    )
    assert cursor.startswith("read_file `src/pkg/huge.py {")
    assert '"start_line_one_indexed":1' in cursor  # before the prose, not cut off
    fetch = _label(
        "WebFetch",
        {"prompt": "Extract every configuration option with its default " * 3,
         "url": "https://docs.example.com/config/reference"},
    )  # fmt: skip
    assert fetch.startswith("WebFetch `https://docs.example.com/config/reference {")
    # nothing names a file or URL: all arguments by key, as before
    assert command_of(json.dumps({"b": 1, "a": "x"})) == '{"a":"x","b":1}'
