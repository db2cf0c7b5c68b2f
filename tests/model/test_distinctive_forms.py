"""The forms distinctive strings take: what an agent types again (an absolute path with
its slash, a short snake name) is listed as it is written."""

from __future__ import annotations

from ctxwarden.signals import distinctive_strings


def test_an_absolute_path_keeps_its_leading_slash() -> None:
    found = distinctive_strings("cat /testbed/app/models.py; curl http://h/api/items")
    assert "/testbed/app/models.py" in found
    assert "testbed/app/models.py" not in found


def test_a_relative_path_is_as_before() -> None:
    found = distinctive_strings("see ./src/app/views.py and a/b/c.py")
    assert "src/app/views.py" in found and "a/b/c.py" in found


def test_three_character_names_with_an_underscore_count() -> None:
    found = distinctive_strings("for i_0 in r_s: pass  # a_b ok")
    assert {"i_0", "r_s", "a_b"} <= set(found)
    assert "for" not in found and "ok" not in found
