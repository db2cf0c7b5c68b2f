"""The replay command: outputs, strict gates (each failed gate named) and scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxwarden.cli import main
from ctxwarden.replay import Gates, check_gates, run_replay


def test_replay_writes_json_and_html(session_file: Path, tmp_path: Path) -> None:
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    code = main(["replay", str(session_file), "--quiet", "--json", str(out), "--html", str(page)])
    assert code == 0
    doc = json.loads(out.read_text())
    names = [s["name"] for s in doc["subjects"]]
    assert names == ["exact", "mask:10", "default"]
    assert doc["subjects"][0]["sessions"][0]["requests"] == 3
    assert "<svg" not in page.read_text().split("<script")[0]  # charts are drawn by JS
    assert "cw-data" in page.read_text()


def test_strict_names_every_failed_gate(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gates = tmp_path / "gates.toml"
    gates.write_text("[gates]\nmin_reduction = 0.5\nmin_support = 1.0\nmax_p95_ms = 100000\n")
    args = ["replay", str(session_file), "--quiet", "--strict", "--gates", str(gates)]
    assert main([*args, "--no-baselines"]) == 1
    err = capsys.readouterr().err
    assert "gate min_reduction failed" in err
    assert "max_p95_ms" not in err
    config = tmp_path / "cfg.toml"
    config.write_text('preset = "balanced"\n[gates]\nmax_integrity_violations = 0\n')
    assert main(["replay", str(session_file), "--quiet", "--strict", "--config", str(config)]) == 0


def test_check_gates_judges_engine_configs_only(session_file: Path) -> None:
    result = run_replay([session_file], ("default",), baselines=["mask:1"])
    assert check_gates(result, Gates(min_support=0.99)) == []  # mask:1 is a baseline
    only_mask = run_replay([session_file], (), baselines=["exact", "mask:1"])
    failures = check_gates(only_mask, Gates(min_support=0.99, min_critical=0.99))
    assert [f.split(":")[0] for f in failures] == ["mask", "mask"]
    assert "min_support" in failures[0] and "min_critical" in failures[1]


def test_bad_gate_key_is_a_config_error_naming_file_and_key(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gates = tmp_path / "g.toml"
    gates.write_text("[gates]\nmin_speed = 1\n")
    assert main(["replay", str(session_file), "--quiet", "--strict", "--gates", str(gates)]) == 2
    err = capsys.readouterr().err
    assert err == f"ctxwarden replay: error: {gates}: gates.min_speed: unknown key\n"


def test_sessions_sharing_an_id_do_not_share_engine_state(tmp_path: Path) -> None:
    # two files holding the same session id: each is replayed as if alone
    from ctxwarden.config import EngineConfig
    from ctxwarden.io import bundled_sessions

    source = bundled_sessions()[0]
    copies = []
    for name in ("a", "b"):
        copy = tmp_path / f"{name}-{source.name}"
        copy.write_bytes(source.read_bytes())
        copies.append(copy)
    config = EngineConfig(preset="balanced", store={"backend": "memory"})
    alone = run_replay(copies[:1], [config], baselines=())
    both = run_replay(copies, [config], baselines=())
    first, second = both.subjects[0].sessions
    assert first.session == second.session  # the same id
    assert first.tokens == second.tokens == alone.subjects[0].sessions[0].tokens


def test_median_and_worst_session_gates(session_file: Path) -> None:
    result = run_replay([session_file], ("default",), baselines=[])
    a = result.subjects[0].aggregate()
    worst = min(a["cost"][s]["worst"] for s in ("openai", "anthropic"))
    passing = Gates(min_median_reduction=a["reduction"]["median"],
                    min_worst_session_saving=worst)  # fmt: skip
    assert check_gates(result, passing) == []
    failing = Gates(min_median_reduction=a["reduction"]["median"] + 0.01,
                    min_worst_session_saving=worst + 0.01)  # fmt: skip
    names = [f.split("gate ")[1].split(" ")[0] for f in check_gates(result, failing)]
    assert names == ["min_median_reduction", "min_worst_session_saving"]
