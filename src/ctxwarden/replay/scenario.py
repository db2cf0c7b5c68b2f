"""The hand-written scenario corpus: hard cases the real sessions lack.

The format is documented in ``scenarios/README.md``. In short, a scenario is one JSON
file: an ``api``, an engine ``config`` (its store is always a fresh memory store),
and ``requests`` sent in order through one engine as one session. Each request has
``expect``: the ``outcome`` (``rewrite``, ``pass-through``, ``segment-failure`` or
``any``), ``required_text`` that must stay visible, JSON ``preserve`` pointers that
must stay byte for byte, and ``references_resolve`` (default true: every reference in
the condensed request recalls text of the original request). Integrity (see
:mod:`ctxwarden.replay.integrity`) is always checked. ``after`` (``drop_artifacts``
or ``corrupt_artifacts``) tampers with the store after a request, to replay missing
and corrupted artifacts.

Long texts are written as macros: an object ``{"$text": {...}}`` anywhere in a
request expands to a deterministic string (see :func:`expand`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from ctxwarden.config import EngineConfig
from ctxwarden.engine import Engine
from ctxwarden.errors import CtxwardenError, ReplayError
from ctxwarden.replay.integrity import check_integrity
from ctxwarden.replay.view import RequestView
from ctxwarden.replay.wire import item_texts, items_of
from ctxwarden.store.base import REF_PATTERN
from ctxwarden.store.memory import MemoryStore

__all__ = ["ScenarioResult", "bundled_scenarios_dir", "expand", "load_scenario", "run_scenarios"]

OUTCOMES = ("rewrite", "pass-through", "segment-failure", "any")


def bundled_scenarios_dir() -> Path:
    """The scenario corpus shipped in the package."""
    return Path(str(resources.files("ctxwarden.replay").joinpath("scenarios")))


def _macro(spec: dict[str, Any]) -> str:
    kind = spec.get("kind", "repeat")
    lines = int(spec.get("lines", 10))
    seed = str(spec.get("seed", "s"))
    if kind == "repeat":
        return str(spec["text"]) * int(spec.get("times", 1))
    out = []
    for i in range(lines):
        h = hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()
        if kind == "log":
            out.append(f"[{seed}] step {i:05d} ok checksum={h[:16]} elapsed={int(h[16:20], 16)}ms")
        elif kind == "binary":
            out.append("".join(chr(0x2580 + int(h[j : j + 2], 16) % 32) for j in range(0, 64, 2)))
            out.append(h + h[::-1])
        elif kind == "listing":
            out.append(f"-rw-r--r-- 1 dev dev {int(h[:5], 16):>7} src/{seed}/mod_{h[:6]}.py")
        else:
            raise ReplayError(f"unknown $text kind {kind!r}")
    return "\n".join(out)


def expand(value: Any) -> Any:
    """Expand ``{"$text": {"kind": ..., ...}}`` macros (``log``, ``binary``, ``listing``
    with ``lines`` and ``seed``; ``repeat`` with ``text`` and ``times``)."""
    if isinstance(value, dict):
        if set(value) == {"$text"}:
            return _macro(value["$text"])
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def load_scenario(path: Path) -> dict[str, Any]:
    """A scenario file with its macros expanded."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ReplayError(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise ReplayError(f"{path}: a scenario needs a requests list")
    return {**data, "requests": expand(data["requests"])}


@dataclass(slots=True)
class ScenarioResult:
    """The outcome of one scenario: failed expectations, one message each."""

    name: str
    requests: int
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _pointer(doc: Any, pointer: str) -> Any:
    node = doc
    for raw in pointer.split("/")[1:]:
        key = raw.replace("~1", "/").replace("~0", "~")
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _texts(request: Any, api: str) -> str:
    out = [t for item in items_of(request, api) for _, t in item_texts(item)]
    for key in ("system", "instructions"):
        if isinstance(request, dict) and key in request:
            out.extend(t for _, t in item_texts({"content": request[key]}))
    return "\n".join(out)


def _check(
    n: int, engine: Engine, api: str, request: Any, result: Any, expect: dict[str, Any]
) -> list[str]:
    out: list[str] = []
    report, condensed = result.report, result.request
    outcome = expect.get("outcome", "any")
    if outcome not in OUTCOMES:
        raise ReplayError(f"request {n}: unknown outcome {outcome!r}")
    if outcome == "rewrite" and (not report.get("rewritten") or report.get("fallbacks")):
        out.append(f"request {n}: expected a rewrite, got {_got(report)}")
    elif outcome == "pass-through" and (condensed != request or report.get("rewritten")):
        out.append(f"request {n}: expected pass-through, got {_got(report)}")
    elif outcome == "segment-failure" and (
        not report.get("segment_failures") or report.get("fallbacks")
    ):
        out.append(f"request {n}: expected a segment-local failure, got {_got(report)}")
    text = _texts(condensed, api)
    for needle in expect.get("required_text", ()):
        if needle not in text:
            out.append(f"request {n}: required text {needle[:60]!r} not visible")
    for pointer in expect.get("preserve", ()):
        try:
            before = orjson.dumps(_pointer(request, pointer))
        except (KeyError, IndexError, ValueError, TypeError):
            raise ReplayError(f"request {n}: pointer {pointer} not in the request") from None
        try:
            after = orjson.dumps(_pointer(condensed, pointer))
        except (KeyError, IndexError, ValueError, TypeError):
            after = b""
        if before != after:
            out.append(f"request {n}: {pointer} not preserved byte for byte")
    if expect.get("references_resolve", True):
        original = _texts(request, api)
        for ref in dict.fromkeys(REF_PATTERN.findall(text)):
            if ref in original:
                continue
            try:
                recalled = engine.recall(ref)
            except CtxwardenError as exc:
                out.append(f"request {n}: reference {ref} does not resolve ({type(exc).__name__})")
                continue
            if recalled not in original:
                out.append(f"request {n}: reference {ref} recalls text not in the request")
    return out


def _got(report: dict[str, Any]) -> str:
    keys = ("rewritten", "fallback_reason", "segment_failures", "rollbacks", "band")
    return ", ".join(f"{k}={report.get(k)}" for k in keys)


def _tamper(store: MemoryStore, action: str, refs: list[str]) -> None:
    if action == "drop_artifacts":
        store.lose_artifacts()
    elif action == "corrupt_artifacts":
        for ref in refs:
            if store.has("local", ref):
                store.corrupt("local", ref, "corrupted bytes")
    else:
        raise ReplayError(f"unknown after action {action!r}")


def run_scenario(path: Path) -> ScenarioResult:
    """Run one scenario file (see module docstring)."""
    data = load_scenario(path)
    api = str(data.get("api", "openai.chat"))
    config = EngineConfig.model_validate({**data.get("config", {}), "store": {"backend": "memory"}})
    store = MemoryStore()
    engine = Engine(config, store=store)
    result = ScenarioResult(str(data.get("name", path.stem)), len(data["requests"]))
    session = f"scenario-{path.stem}"
    views = (RequestView(len), RequestView(len))
    for n, step in enumerate(data["requests"], 1):
        request = step["request"]
        try:
            condensed = engine.condense(request, api=api, session=session)
        except CtxwardenError as exc:
            result.failures.append(f"request {n}: engine raised {type(exc).__name__}")
            continue
        result.failures.extend(_check(n, engine, api, request, condensed, step.get("expect", {})))
        o, c = views[0].advance(request, api), views[1].advance(condensed.request, api)
        violations = check_integrity(request, condensed.request, api, o, c)
        if violations:
            result.failures.append(f"request {n}: integrity violations {violations}")
        if step.get("after"):
            _tamper(store, str(step["after"]), list(condensed.report.get("references") or ()))
    engine.close()
    return result


def run_scenarios(target: str | Path | None = None) -> list[ScenarioResult]:
    """Every ``*.json`` scenario in ``target`` (a directory or one file; default: bundled)."""
    path = Path(target) if target else bundled_scenarios_dir()
    if not path.exists():
        raise ReplayError(f"{path}: no such scenario file or directory")
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ReplayError(f"{path}: no scenario files")
    return [run_scenario(f) for f in files]
