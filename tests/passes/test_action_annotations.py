"""Arguments that only annotate a call do not make two runs of it different actions.

Review finding 7 (/work/s24/reviewVocab): Claude Code's Bash ``description``, Cursor's
``explanation``, Cline's ``requires_approval`` and Codex's ``timeout_ms`` went into the
action key, so a test re-run was practically never superseded. Only the named
annotations (:data:`ctxwarden.commands.ANNOTATIONS`) of the kind they hold are left
out, and only after a command or target; everything that changes what a call reads or
runs still counts (a false supersession is worse than a missed one). Labels keep them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.commands import ANNOTATIONS, action_of, command_of
from ctxwarden.passes.config import SupersedeConfig
from ctxwarden.passes.supersede import SupersedePass
from tests.passes.convo import call, call_with, context, lines_of, request, result


def _superseded(wire: dict[str, Any], api: str = "openai.chat") -> dict[int, int]:
    """Message index of each superseded output -> the message its note names."""
    ctx, _ = context(wire, api=api)
    found = {}
    for path, rep in SupersedePass(SupersedeConfig())(ctx, {}).items():
        assert rep.witness is not None
        found[ctx.by_path[path].message_index] = ctx.by_path[rep.witness].message_index
    return found


def _out(tag: str) -> str:
    """A 30-line output, all but its last line the same for every ``tag``."""
    return lines_of("out", 29, extra=(f"run {tag} done",))


def _twice(tool: str, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    return request(
        call_with("c1", tool, first), result("c1", _out("1")),
        call_with("c2", tool, second), result("c2", _out("2")),
        call("cz", "echo done"), result("cz", "done"),
    )  # fmt: skip


_PYTEST = "python -m pytest tests/test_parser.py -x -q"

_SAME_ACTION = {
    "Claude Code Bash description": (
        "Bash",
        {"command": _PYTEST, "description": "Run the parser tests"},
        {"command": _PYTEST, "description": "Re-run the parser tests after the fix"},
    ),
    "Cursor explanation and approval": (
        "run_terminal_cmd",
        {"command": _PYTEST, "is_background": False, "explanation": "Check the failure.",
         "require_user_approval": True},
        {"command": _PYTEST, "is_background": False, "explanation": "Verify the fix works.",
         "require_user_approval": False},
    ),
    "Cline requires_approval (XML text)": (
        "execute_command",
        {"command": _PYTEST, "requires_approval": "false"},
        {"command": _PYTEST, "requires_approval": "true"},
    ),
    "Codex escalation": (
        "shell",
        {"command": ["bash", "-lc", _PYTEST], "workdir": "/repo", "timeout_ms": 120000},
        {"command": ["bash", "-lc", _PYTEST], "workdir": "/repo", "timeout_ms": 120000,
         "with_escalated_permissions": True, "justification": "Tests need the network."},
    ),
    "Cursor read_file explanation": (
        "read_file",
        {"target_file": "src/parser.py", "should_read_entire_file": True,
         "explanation": "Read the parser."},
        {"target_file": "src/parser.py", "should_read_entire_file": True,
         "explanation": "Read the parser again after the edit."},
    ),
}  # fmt: skip


@pytest.mark.parametrize(("tool", "first", "second"), _SAME_ACTION.values(), ids=_SAME_ACTION)
def test_runs_differing_only_in_annotations_are_the_same_action(
    tool: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    assert _superseded(_twice(tool, first, second)) == {3: 5}


def test_anthropic_tool_use_inputs_are_read_the_same_way() -> None:
    def use(i: int, description: str) -> dict[str, Any]:
        arguments = {"command": _PYTEST, "description": description}
        return {"role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Bash",
                             "input": arguments}]}  # fmt: skip

    def output(i: int) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": f"t{i}", "content": _out(str(i))}
        return {"role": "user", "content": [block]}

    wire = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1000,
        "system": "You are a coding agent.",
        "messages": [
            {"role": "user", "content": "Fix the failing build."},
            use(1, "Run the parser tests"), output(1),
            use(2, "Re-run the parser tests"), output(2),
            {"role": "assistant", "content": "Looking."},
            {"role": "user", "content": "go on"},
        ],
    }  # fmt: skip
    assert _superseded(wire, api="anthropic.messages") == {2: 4}


_DIFFERENT_ACTION = {
    "another command": (
        "Bash",
        {"command": _PYTEST, "description": "Run tests"},
        {"command": _PYTEST + " -k header", "description": "Run tests"},
    ),
    "another range of a file": (
        "Read",
        {"file_path": "/repo/src/parser.py", "offset": 1, "limit": 200},
        {"file_path": "/repo/src/parser.py", "offset": 200, "limit": 200},
    ),
    "another search path": (
        "Grep",
        {"pattern": "def parse", "path": "src"},
        {"pattern": "def parse", "path": "tests"},
    ),
    "another directory": (
        "shell",
        {"command": ["bash", "-lc", "ls"], "workdir": "/repo", "timeout_ms": 1000},
        {"command": ["bash", "-lc", "ls"], "workdir": "/repo/sub", "timeout_ms": 1000},
    ),
    "in the background": (
        "Bash",
        {"command": _PYTEST, "description": "Run tests"},
        {"command": _PYTEST, "description": "Run tests", "run_in_background": True},
    ),
    "an output limit": (
        "exec_command",
        {"cmd": _PYTEST, "max_output_tokens": 1000},
        {"cmd": _PYTEST, "max_output_tokens": 20000},
    ),
    # helper-137: a run stopped by a shorter timeout shows less than the complete run
    "Claude Code Bash timeout": (
        "Bash",
        {"command": _PYTEST, "description": "Run tests"},
        {"command": _PYTEST, "timeout": 600000, "description": "Run tests, longer timeout"},
    ),
    "Codex timeout": (
        "shell",
        {"command": ["bash", "-lc", _PYTEST], "workdir": "/repo", "timeout_ms": 600000},
        {"command": ["bash", "-lc", _PYTEST], "workdir": "/repo", "timeout_ms": 10000},
    ),
    "a timeout that is no number": (
        "Bash",
        {"command": _PYTEST, "timeout": "until the server answers"},
        {"command": _PYTEST, "timeout": "five minutes"},
    ),
    "a description that is the content (no command)": (
        "create_issue",
        {"title": "Parser crash", "description": "Crashes on unicode headers."},
        {"title": "Parser crash", "description": "Crashes on empty files."},
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "first", "second"), _DIFFERENT_ACTION.values(), ids=_DIFFERENT_ACTION
)
def test_arguments_that_change_what_a_call_does_still_count(
    tool: str, first: dict[str, Any], second: dict[str, Any]
) -> None:
    assert action_of(json.dumps(first)) != action_of(json.dumps(second))
    assert _superseded(_twice(tool, first, second)) == {}


def test_a_read_of_one_path_through_another_tool_is_another_read() -> None:
    """helper-137: with Bash's description left out, `cat F` through Bash and through
    an SSH tool taking only a command shared the key of a full read of F: the local
    file's output was "superseded" by the other host's."""
    conf = "/etc/nginx/nginx.conf"
    wire = request(
        call_with("c1", "Bash", {"command": f"cat {conf}", "description": "Local config"}),
        result("c1", _out("1")),
        call_with("c2", "ssh_exec", {"command": f"cat {conf}"}), result("c2", _out("2")),
        call_with("c3", "Bash", {"command": f"cat {conf}", "description": "Again"}),
        result("c3", _out("3")),
        call("cz", "echo done"), result("cz", "done"),
    )  # fmt: skip
    assert _superseded(wire) == {3: 7}  # the local read by the local read, only


def test_a_label_keeps_the_annotations() -> None:
    arguments = json.dumps({"command": _PYTEST, "description": "Run the parser tests"})
    assert command_of(arguments) == _PYTEST + ' {"description":"Run the parser tests"}'
    assert action_of(arguments) == _PYTEST


def test_an_annotation_is_never_taken_for_the_target() -> None:
    # a description that happens to be one path-like word does not become the command
    arguments = {"description": "src/a.py", "target_file": "src/b.py"}
    assert command_of(json.dumps(arguments)).startswith("src/b.py ")
    assert action_of(json.dumps(arguments)) == "src/b.py"


_VALUES = st.one_of(
    st.integers(-2, 3),
    st.booleans(),
    st.sampled_from(["", "src/a.py", "a b", "true", "false", "1000", "Run it"]),
)
_KIND_VALUES = {
    "text": st.sampled_from(["", "Run it", "Run the tests again", "src/a.py"]),
    "flag": st.one_of(st.booleans(), st.sampled_from(["true", "false"])),
    "number": st.one_of(st.integers(0, 10**6), st.sampled_from([1.5, "30000"])),
}
_OTHER_KEYS = ["path", "offset", "limit", "pattern", "cwd", "workdir", "content",
               "run_in_background", "is_background", "max_output_tokens", "prompt"]  # fmt: skip


@st.composite
def _arguments(draw: st.DrawFn) -> dict[str, Any]:
    """A call running one of a few commands, with some annotations (each holding a
    value of its kind) and some arguments that matter."""
    args: dict[str, Any] = {"command": draw(st.sampled_from(["ls", "pytest -q", "cat a.py"]))}
    for key in draw(st.lists(st.sampled_from(sorted(ANNOTATIONS)), unique=True, max_size=3)):
        args[key] = draw(_KIND_VALUES[ANNOTATIONS[key]])
    for key in draw(st.lists(st.sampled_from(_OTHER_KEYS), unique=True, max_size=2)):
        args[key] = draw(_VALUES)
    return args


def _canonical(args: dict[str, Any], annotations: bool = True) -> str:
    """``args`` as JSON, keys sorted (``True`` and ``1`` are equal in Python, not in
    JSON), with or without their annotations."""
    kept = {k: v for k, v in args.items() if annotations or k not in ANNOTATIONS}
    return json.dumps(kept, sort_keys=True)


@settings(max_examples=400)
@given(_arguments(), _arguments())
def test_two_calls_share_an_action_exactly_when_all_but_their_annotations_agree(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    same = _canonical(a, annotations=False) == _canonical(b, annotations=False)
    assert (action_of(json.dumps(a)) == action_of(json.dumps(b))) == same
    if _canonical(a) != _canonical(b):  # the label tells every call apart
        assert command_of(json.dumps(a)) != command_of(json.dumps(b))
