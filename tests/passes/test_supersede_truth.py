"""A "superseded by the same action" note is true: the two runs ran the same command
(only the ends' whitespace may differ) in the same directory, and ``open F`` (a
100-line window) is not a full read of F. An exit status in a header is one the output
states in a structured form, never a number from its text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.commands import command_of
from ctxwarden.passes.config import SupersedeConfig
from ctxwarden.passes.supersede import SupersedePass, action_key
from ctxwarden.signals import exit_status
from tests.passes.convo import (
    FORCE,
    call,
    context,
    lines_of,
    make_engine,
    output_segment,
    request,
    result,
    segment_at,
)


def _superseded(wire: dict[str, Any]) -> dict[int, int]:
    """Message index of each superseded output -> the message its note names."""
    ctx, _ = context(wire)
    out = SupersedePass(SupersedeConfig())(ctx, {})
    return {ctx.by_path[path].message_index: ctx.by_path[rep.witness].message_index
            for path, rep in out.items()}  # fmt: skip


def _out(tag: str, n: int) -> str:
    """An output of ``n`` lines, all but the last the same for every ``tag``: the runs of
    one action here show much of the same (supersession requires it: min_overlap), so
    whether a note is written turns on what the test is about, not on the content."""
    return lines_of("out", n - 1, extra=(f"run {tag} done",))


def _runs(*steps: tuple[str, str]) -> dict[str, Any]:
    """A request running each (command, output) in turn, then a closing ``echo``."""
    turns: list[dict[str, Any]] = []
    for k, (command, output) in enumerate(steps):
        turns += [call(f"c{k}", command), result(f"c{k}", output)]
    return request(*turns, call("cz", "echo done"), result("cz", "done"))


# -- 1. the same command ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ('grep -rn "hello  world" .', 'grep -rn "hello world" .'),
        (
            "python - <<'EOF'\nvalues = load()\n    total = compute(values)\nEOF",
            "python - <<'EOF'\nvalues = load()\ntotal = compute(values)\nEOF",
        ),
        (  # SWE-agent edits whose bodies differ in indentation only
            "edit 36:45\n    return value\nend_of_edit\n",
            "edit 36:45\n        return value\nend_of_edit\n",
        ),
    ],
)
def test_commands_that_differ_inside_in_whitespace_are_different_actions(
    older: str, newer: str
) -> None:
    wire = _runs((older, _out("old", 40)), (newer, _out("new", 40)))
    ctx, _ = context(wire)
    assert action_key(segment_at(ctx, 3), True) != action_key(segment_at(ctx, 5), True)
    assert _superseded(wire) == {}


def test_commands_that_differ_only_at_the_ends_are_the_same_action() -> None:
    # SWE-agent's trailing newline varies; the older run is still superseded, and a
    # command differing inside as well is not
    wire = _runs(
        ("search_dir  foo\n", _out("a", 40)),
        ("search_dir foo", _out("b", 40)),
        ("search_dir  foo", _out("c", 40)),
    )
    assert _superseded(wire) == {3: 7}


def test_command_of_strips_the_ends_only() -> None:
    assert command_of(json.dumps({"command": "  grep 'a  b'\n\tx\n"})) == "grep 'a  b'\n\tx"
    assert command_of(json.dumps({"command": ["bash", "-lc", "cat  a"]})) == "bash -lc 'cat  a'"
    assert command_of(" ls  -la\n") == "ls  -la"  # arguments that are no JSON


_WORD = st.sampled_from(["ls", "grep", "-rn", "'a", "b'", "src/", "x.py", "EOF"])
_SPACE = st.sampled_from([" ", "  ", "\n", "\t", "\n    "])


def _key(command: str) -> str:
    """The action key of a bash call running ``command``."""
    return action_key(output_segment("bash", command_of(json.dumps({"command": command}))), True)


@given(st.lists(st.tuples(_WORD, _SPACE), min_size=2, max_size=6), st.lists(_SPACE, max_size=3))
def test_two_commands_are_one_action_exactly_when_they_agree_but_at_the_ends(
    parts: list[tuple[str, str]], spaces: list[str]
) -> None:
    command = "".join(w + s for w, s in parts).strip()
    padded = "".join(spaces) + command + "".join(reversed(spaces))
    assert _key(padded) == _key(command)
    squeezed = " ".join(command.split())
    assert (_key(squeezed) == _key(command)) is (squeezed == command)


def test_open_shows_a_window_and_is_no_full_read() -> None:
    big = lines_of("file", 300)
    window = "[File: /repo/big.py (300 lines total)]\n" + lines_of("window", 100)
    wire = _runs(("cat big.py", big), ("open big.py", window))
    ctx, _ = context(wire)
    assert action_key(segment_at(ctx, 3), True) != action_key(segment_at(ctx, 5), True)
    assert _superseded(wire) == {}
    # two windows of the same open, and two full reads, are still the same action
    again = _runs(
        ("open big.py", window + " v1"), ("nl -ba big.py", big), ("open big.py", window),
        ("cat ./big.py", big + "\nmore"),
    )  # fmt: skip
    assert _superseded(again) == {3: 7, 5: 9}


def test_a_window_move_shows_the_next_window_and_is_never_stale() -> None:
    def window(start: int) -> str:
        return "[File: /repo/big.py (900 lines total)]\n" + lines_of(f"w{start}", 100)

    wire = _runs(
        ("open big.py\n", window(1)),
        ("scroll_down\n", window(101)),
        ("scroll_down\n", window(201)),
        ("scroll_up\n", window(101) + " again"),
        ("scroll_up\n", window(1) + " again"),
        ("open big.py\n", window(1) + "\nreopened"),
    )
    assert _superseded(wire) == {3: 13}


# -- 2. the same directory -------------------------------------------------------------


@pytest.mark.parametrize("move", ["cd src", "pushd src", "popd", "git stash && cd ../b"])
def test_a_change_of_directory_between_two_runs_keeps_the_older(move: str) -> None:
    wire = _runs(("ls", _out("root", 40)), (move, ""), ("ls", _out("sub", 40)))
    assert _superseded(wire) == {}


def test_the_reviewers_persistent_shell_trap() -> None:
    wire = _runs(
        ("ls", _out("root", 60)),
        ("cd src", ""),
        ("ls", _out("sub", 60)),
        ("cd /repo/pkg_a", ""),
        ("cat config.py", _out("pkg_a", 60)),
        ("cd /repo/pkg_b", ""),
        ("cat config.py", _out("pkg_b", 60)),
    )
    assert _superseded(wire) == {}
    res = make_engine(pipeline={**FORCE, "order": ["supersede"]}).condense(wire)
    assert not any("superseded" in str(m.get("content")) for m in res.request["messages"])


def test_runs_in_one_span_between_moves_still_supersede_each_other() -> None:
    wire = _runs(
        ("ls", _out("r1", 40)),
        ("cd src", ""),
        ("ls", _out("s1", 40)),
        ("make", _out("m", 10)),
        ("ls", _out("s2", 40)),
    )
    assert _superseded(wire) == {7: 11}


def test_a_run_that_moves_itself_is_never_the_same_action() -> None:
    # run twice in one shell, `cd src && ls` lists src, then src/src
    wire = _runs(("cd src && ls", _out("a", 40)), ("cd src && ls", _out("b", 40)))
    assert _superseded(wire) == {}


def test_a_run_that_names_its_absolute_directory_runs_there_wherever_the_shell_is() -> None:
    wire = _runs(
        ("cd /repo && ls", _out("a", 40)),
        ("cd /tmp/x", ""),
        ("cd /repo && ls", _out("b", 40)),
        ("cat /repo/setup.py", _out("c", 40)),
        ("cd sub", ""),
        ("cat /repo/setup.py", _out("d", 40)),
        ("cd /repo && cd sub && ls", _out("e", 40)),  # moves after it: kept
        ("cd /repo && cd sub && ls", _out("f", 40)),
        ("cd /repo;cd sub;ls", _out("f2", 40)),
        ("cd /repo;cd sub;ls", _out("f3", 40)),
        ("cat setup.py", _out("g", 40)),
        ("cd ..", ""),
        ("cat setup.py", _out("h", 40)),
    )
    assert _superseded(wire) == {3: 7, 9: 13}


def _swe(body: str, cwd: str) -> str:
    return f"{body}\n(Open file: n/a)\n(Current directory: {cwd})\nbash-$"


def test_outputs_that_name_different_directories_are_different_actions() -> None:
    # SWE-agent: the directory moved in a way no command shows (a sourced script);
    # the outputs' own trailers tell
    wire = _runs(
        ("ls -F\n", _swe(_out("root", 40), "/jib")),
        ("source env.sh\n", _swe("", "/jib/jib-gradle-plugin")),
        ("ls -F\n", _swe(_out("plugin", 40), "/jib/jib-gradle-plugin")),
    )
    assert _superseded(wire) == {}


def test_outputs_that_name_one_directory_are_runs_in_it_across_moves() -> None:
    oh = "\n[The command completed with exit code 0.]\n[Current working directory: /w/a]"
    wire = _runs(
        ("ls -F\n", _swe(_out("r1", 40), "/jib")),
        ("cd sub\n", _swe("", "/jib/sub")),
        ("ls -F\n", _swe(_out("s1", 40), "/jib/sub")),
        ("cd ..\n", _swe("", "/jib")),
        ("ls -F\n", _swe(_out("r2", 40), "/jib")),
        ("git status", _out("g1", 40) + oh),  # OpenHands' trailer
        ("cd /w/b", "[Current working directory: /w/b]"),
        ("git status", _out("g2", 40) + oh.replace("/w/a", "/w/b")),
    )
    assert _superseded(wire) == {3: 11}


def _open(body: str, open_file: str) -> str:
    return f"{body}\n(Open file: {open_file})\n(Current directory: /jib)\nbash-$"


def test_swe_agent_commands_on_the_open_file_are_the_same_action_in_that_file_only() -> None:
    # `goto 40` and `search_file` show the file SWE-agent has open, which `open` changed
    # between the runs: the older run is another file's window, not a stale one
    wire = _runs(
        ("goto 40\n", _open(_out("a40", 40), "/jib/A.java")),
        ('search_file "parse"\n', _open(_out("a-hits", 40), "/jib/A.java")),
        ("open B.java\n", _open(_out("b", 40), "/jib/B.java")),
        ("goto 40\n", _open(_out("b40", 40), "/jib/B.java")),
        ('search_file "parse"\n', _open(_out("b-hits", 40), "/jib/B.java")),
        ("ls -F\n", _open(_out("ls1", 40), "/jib/B.java")),
        ("open A.java\n", _open(_out("a", 40), "/jib/A.java")),
        ("goto 40\n", _open(_out("a40-again", 40), "/jib/A.java")),
        ("ls -F\n", _open(_out("ls2", 40), "/jib/A.java")),
    )
    # the first `goto 40` (in A) is stale by the last one (in A again); `ls` does not
    # depend on the open file
    assert _superseded(wire) == {3: 17, 13: 19}


def test_parallel_calls_with_a_move_among_them_keep_the_older_run() -> None:
    both = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": json.dumps(
                {"command": c})}}
            for i, c in (("p1", "ls"), ("p2", "cd src"))
        ],
    }  # fmt: skip
    wire = request(
        call("c0", "cat README"), result("c0", "x"),
        both, result("p1", _out("root", 40)), result("p2", ""),
        call("c3", "ls"), result("c3", _out("sub", 40)),
        call("c4", "echo done"), result("c4", "done"),
    )  # fmt: skip
    assert _superseded(wire) == {}


# -- 4. exit status only from a structured form ----------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'src/runner.py:41:        log.error("worker exit code 3, restarting")\nsrc/b.py:2: ok',
        "child process exited with code 137 (expected; killed by watchdog)\n40 passed",
        "# exit status 2 means the config was invalid\nmain()",
        "Exit code: 2 is what the tool returns when\nthe config is invalid",
        "tests/t.py:3: assert out == '<returncode>1</returncode>'\nok",
        "build log\n[Command finished with exit code 4]\nmore output after it",
    ],
)
def test_an_exit_status_in_free_text_is_not_the_commands(text: str) -> None:
    assert exit_status(text) is None


def test_exit_status_reads_the_forms_agents_use() -> None:
    body = lines_of("out", 60)
    assert exit_status("<returncode>1</returncode>\n<output>\nexit code 3\n</output>") == 1
    assert exit_status("Exit code: 2\nWall time: 0.1 seconds\nOutput:\nexit code 3") == 2
    assert exit_status("exit status 3\n" + body) == 3
    assert exit_status(body + "\n<returncode>5</returncode>\n") == 5
    openhands = (
        f"{body}\n[The command completed with exit code 6.]\n"
        "[Current working directory: /workspace/repo]\n"
        "[Python interpreter: /usr/bin/python]\n[Command finished with exit code 6]"
    )
    assert exit_status(openhands) == 6
    assert (
        exit_status(f"exited with code 9\n{body}\n[The command completed with exit code 7.]") == 7
    )
    assert exit_status(body) is None


def test_a_placeholder_claims_no_exit_status_the_output_does_not_state() -> None:
    grep = "\n".join(
        ['src/runner.py:41:        log.error("worker exit code 3, restarting")']
        + [f"src/mod_{i}.py:{i}:    handle_exit_code(value_{i})" for i in range(60)]
    )
    wire = _runs(('grep -rn "exit" src/', grep), ("make", lines_of("m", 5)))
    res = make_engine(pipeline={**FORCE, "order": ["mask"]}).condense(wire)
    note = res.request["messages"][3]["content"]
    assert note.startswith("[ctxwarden:") and "exit 3" not in note.split("\n")[0]
