"""Relevance links a relative path to the absolute path of the same file.

Review finding 9 (/work/s24/reviewVocab): Claude Code read ``src/pkg/core.py`` with
``Bash sed -n`` and edited ``/repo/src/pkg/core.py`` with ``Edit``; the read was not
kept as relevant under the conservative preset (``paths_in`` gave ``repo/src/pkg/core.py``
for the absolute path). A relative path now matches an absolute one ending with ``/``
and it, on whole path components; two absolute paths, or two relative ones, still
match only when equal.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.pipeline.presets import resolve_pipeline
from ctxwarden.signals import paths_in
from tests.passes.convo import call, call_with, context, lines_of, request, result


def _relevant(read: dict[str, Any], edit: dict[str, Any]) -> bool:
    """Whether the output of ``read`` (a call message) is relevant after ``edit``
    (the read itself falls out of the last four actions the conservative preset looks
    at: three others come between)."""
    between = [m for i in range(3) for m in (call(f"e{i}", f"echo {i}"), result(f"e{i}", "x"))]
    wire = request(
        read, result("c1", lines_of("core", 80)),
        *between,
        edit, result("c2", "The file has been updated."),
    )  # fmt: skip
    ctx, _ = context(wire, resolve_pipeline("conservative", {}))
    (output,) = (s for s in ctx.segments if s.message_index == 3)
    return output.path in ctx.relevant


def _edit(path: str) -> dict[str, Any]:
    return call_with("c2", "Edit", {"file_path": path, "old_string": "a", "new_string": "b"})


def _read(path: str) -> dict[str, Any]:
    return call_with("c1", "Read", {"file_path": path})


_LINKED = {
    "relative read, absolute edit": (call("c1", "sed -n 1,80p src/pkg/core.py", "Bash"),
                                     _edit("/repo/src/pkg/core.py")),
    "absolute read, relative edit": (_read("/repo/src/pkg/core.py"),
                                     call("c2", "sed -i 's/a/b/' src/pkg/core.py", "Bash")),
    "a bare file name": (call("c1", "cat core.py", "Bash"), _edit("/repo/src/pkg/core.py")),
    "the same absolute path": (_read("/repo/src/pkg/core.py"), _edit("/repo/src/pkg/core.py")),
    "the same relative path": (call("c1", "cat src/pkg/core.py", "Bash"),
                               call("c2", "sed -i 's/a/b/' src/pkg/core.py", "Bash")),
}  # fmt: skip

_APART = {
    "not on a component boundary": (call("c1", "cat ore.py", "Bash"),
                                     _edit("/repo/src/pkg/core.py")),
    "two absolute paths": (_read("/other/pkg/core.py"), _edit("/repo/src/pkg/core.py")),
    "two relative paths": (call("c1", "cat pkg/core.py", "Bash"),
                           call("c2", "sed -i 's/a/b/' src/pkg/core.py", "Bash")),
    "another file": (call("c1", "cat src/pkg/util.py", "Bash"), _edit("/repo/src/pkg/core.py")),
    "a URL": (call("c1", "curl -s https://example.com/src/pkg/core.py", "Bash"),
              call("c2", "sed -i 's/a/b/' src/pkg/core.py", "Bash")),
}  # fmt: skip


@pytest.mark.parametrize(("read", "edit"), _LINKED.values(), ids=_LINKED)
def test_a_read_of_the_file_an_action_touches_is_relevant(
    read: dict[str, Any], edit: dict[str, Any]
) -> None:
    assert _relevant(read, edit)


@pytest.mark.parametrize(("read", "edit"), _APART.values(), ids=_APART)
def test_a_read_of_another_file_is_not(read: dict[str, Any], edit: dict[str, Any]) -> None:
    assert not _relevant(read, edit)


def test_paths_in_keeps_the_root_of_an_absolute_path() -> None:
    assert paths_in("cat /repo/src/a.py ./src/b.py src/c.py") == {
        "/repo/src/a.py",
        "src/b.py",
        "src/c.py",
    }
    # a slash after ~, a colon or another slash is no filesystem root
    assert paths_in("cat ~/src/a.py https://host/src/b.py") == {"src/a.py", "host/src/b.py"}
    assert paths_in('{"file_path":"/repo/.env/x.py"}') == {"/repo/.env/x.py"}
