"""The scenario format: macros, expectations that pass and that fail, the bundled corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.cli import main
from ctxwarden.replay.scenario import bundled_scenarios_dir, expand, load_scenario, run_scenarios

SMALL = {
    "model": "gpt-4o",
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "task text"}],
}


def _write(folder: Path, name: str, expect: dict[str, Any], config: dict[str, Any]) -> None:
    doc = {
        "name": name,
        "api": "openai.chat",
        "config": config,
        "requests": [{"request": SMALL, "expect": expect}],
    }
    (folder / f"{name}.json").write_text(json.dumps(doc))


def test_macros_are_deterministic() -> None:
    spec = {"x": [{"$text": {"kind": "log", "lines": 3, "seed": "a"}}]}
    assert expand(spec) == expand(spec)
    assert expand(spec)["x"][0].count("\n") == 2
    assert expand({"$text": {"kind": "repeat", "text": "ab", "times": 3}}) == "ababab"


def test_expectations_pass_and_fail(tmp_path: Path) -> None:
    exact = {"mode": "exact"}
    _write(
        tmp_path,
        "ok",
        {
            "outcome": "pass-through",
            "required_text": ["task text"],
            "preserve": ["", "/messages/1"],
        },
        exact,
    )
    _write(tmp_path, "bad", {"outcome": "rewrite", "required_text": ["absent"]}, exact)
    results = {r.name: r for r in run_scenarios(tmp_path)}
    assert results["ok"].passed
    failures = results["bad"].failures
    assert len(failures) == 2
    assert "expected a rewrite" in failures[0] and "absent" in failures[1]
    assert main(["replay", "--scenarios", str(tmp_path), "--strict"]) == 1
    assert main(["replay", "--scenarios", str(tmp_path)]) == 0


def test_bundled_corpus_covers_the_hard_cases() -> None:
    files = sorted(bundled_scenarios_dir().glob("*.json"))
    assert len(files) >= 12
    apis = set()
    outcomes = set()
    for f in files:
        data = load_scenario(f)
        apis.add(data["api"])
        outcomes.update(r["expect"]["outcome"] for r in data["requests"])
        assert data["description"]
        for r in data["requests"]:
            assert r["expect"].get("preserve") or r["expect"]["outcome"] != "pass-through"
    assert apis == {"openai.chat", "openai.responses", "anthropic.messages"}
    assert {"rewrite", "pass-through", "segment-failure"} <= outcomes
    assert max(len(load_scenario(f)["requests"]) for f in files) >= 30


@pytest.mark.parametrize("name", ["11_exact_mode.json", "12_small_request.json"])
def test_pass_through_scenarios_pass(name: str) -> None:
    [result] = run_scenarios(bundled_scenarios_dir() / name)
    assert result.passed, result.failures
