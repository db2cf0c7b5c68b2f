"""What a replay compares: configurations of the engine and the built-in baselines.

One seam, :class:`Subject`: ``condense(request, api, session) -> (request, report)``
plus ``recall(ref)``. The engine is one implementation; the baselines use the same
seam, so the runner measures all of them the same way:

- ``exact``: every request unchanged (what the agent sends without ctxwarden);
- ``mask:N``: every tool output except the newest ``N`` replaced by a fixed
  placeholder - the observation-masking baseline of the literature (Lindenbauer et
  al. 2025). It keeps nothing recoverable.

A subject spec is ``exact``, ``mask:N``, ``preset:NAME`` or a path to a TOML config.
Engine configurations run on a fresh memory store, whatever ``[store]`` their file
sets (a benchmark writes nothing into a real store, and a store it cannot reach
measures nothing), unless asked for (``load_engine_config(path, keep_store=True)``,
``ctxwarden replay --config-store``); a ``[gates]`` table in a config file is read by
:mod:`ctxwarden.replay.gates`, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ctxwarden.config import EngineConfig, StoreConfig, read_toml, validated_config
from ctxwarden.engine import Engine
from ctxwarden.errors import ConfigError, CtxwardenError
from ctxwarden.replay.wire import MESSAGE_KEYS

__all__ = [
    "MASK_PLACEHOLDER",
    "EngineSubject",
    "ExactSubject",
    "MaskSubject",
    "Subject",
    "load_engine_config",
    "make_subject",
]

MEMORY = StoreConfig(backend="memory")
MASK_PLACEHOLDER = "[Old tool output omitted by observation masking.]"


class Subject(Protocol):
    """One configuration under comparison."""

    name: str
    kind: str
    """``baseline`` or ``engine``."""

    def condense(
        self, request: dict[str, Any], api: str, session: str
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def recall(self, ref: str) -> str | None:
        """The original behind ``ref``, or ``None`` when it is missing or corrupted."""
        ...

    def close(self) -> None: ...


class ExactSubject:
    """The ``exact`` baseline: requests go out unchanged."""

    kind = "baseline"

    def __init__(self) -> None:
        self.name = "exact"

    def condense(
        self, request: dict[str, Any], api: str, session: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return request, {}

    def recall(self, ref: str) -> str | None:
        return None

    def close(self) -> None:
        return None


def _masked_copy(item: dict[str, Any]) -> dict[str, Any] | None:
    if item.get("role") in ("tool", "function"):
        return {**item, "content": MASK_PLACEHOLDER}
    if item.get("type") == "shell_call_output" and isinstance(item.get("output"), list):
        chunks = [  # each chunk keeps its outcome; its streams are masked
            {**c, "stdout": MASK_PLACEHOLDER, "stderr": ""} if isinstance(c, dict) else c
            for c in item["output"]
        ]
        return {**item, "output": chunks}
    if str(item.get("type", "")).endswith("_output") and "output" in item:
        return {**item, "output": MASK_PLACEHOLDER}
    content = item.get("content")
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        blocks = [
            {**b, "content": MASK_PLACEHOLDER}
            if isinstance(b, dict) and b.get("type") == "tool_result"
            else b
            for b in content
        ]
        return {**item, "content": blocks}
    return None


class MaskSubject:
    """The ``mask:N`` baseline (see module docstring)."""

    kind = "baseline"

    def __init__(self, keep: int) -> None:
        if keep < 0:
            raise ConfigError("mask:N needs N >= 0", "mask")
        self.keep = keep
        self.name = f"mask:{keep}"
        self._memo: dict[int, tuple[Any, dict[str, Any] | None]] = {}
        self._session = ""

    def condense(
        self, request: dict[str, Any], api: str, session: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if session != self._session:
            self._memo.clear()
            self._session = session
        key = MESSAGE_KEYS.get(api, "messages")
        items = request.get(key)
        if not isinstance(items, list):
            return request, {}
        tool_positions = [i for i, it in enumerate(items) if self._copy(it) is not None]
        cut = tool_positions[: max(0, len(tool_positions) - self.keep)]
        if not cut:
            return request, {}
        out = list(items)
        for i in cut:
            copy = self._copy(items[i])
            assert copy is not None
            out[i] = copy
        return {**request, key: out}, {"rewritten": True, "masked": len(cut)}

    def _copy(self, item: Any) -> dict[str, Any] | None:
        if not isinstance(item, dict):
            return None
        memo = self._memo.get(id(item))
        if memo is None or memo[0] is not item:
            memo = self._memo[id(item)] = (item, _masked_copy(item))
        return memo[1]

    def recall(self, ref: str) -> str | None:
        return None

    def close(self) -> None:
        self._memo.clear()


class EngineSubject:
    """One engine configuration; one :class:`Engine` for the whole replay."""

    kind = "engine"

    def __init__(self, name: str, config: EngineConfig) -> None:
        self.name = name
        self.config = config
        self.engine = Engine(config)

    def condense(
        self, request: dict[str, Any], api: str, session: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        result = self.engine.condense(request, api=api, session=session)
        return result.request, result.report

    def recall(self, ref: str) -> str | None:
        try:
            return self.engine.recall(ref)
        except CtxwardenError:
            return None

    def close(self) -> None:
        self.engine.close()


def load_engine_config(
    path: str | Path, *, keep_store: bool = False
) -> tuple[EngineConfig, dict[str, Any]]:
    """An engine config file and its ``[gates]`` table (empty when absent).

    The store is a memory store; ``keep_store``: the file's ``[store]`` table, when it
    has one (validated either way).
    """
    data = read_toml(path)
    gates = data.pop("gates", {})
    if not isinstance(gates, dict):
        raise ConfigError("must be a table", "gates", str(path))
    config = validated_config({"store": {"backend": "memory"}, **data}, path)
    if keep_store:
        return config, gates
    return config.model_copy(update={"store": MEMORY}), gates


def make_subject(spec: str | EngineConfig | Subject, name: str | None = None) -> Subject:
    """A subject from a spec (see module docstring), a config, or a subject itself."""
    if isinstance(spec, EngineConfig):
        return EngineSubject(name or spec.preset, spec)
    if not isinstance(spec, str):
        return spec
    if spec == "exact":
        return ExactSubject()
    if spec.startswith("mask:"):
        try:
            return MaskSubject(int(spec.split(":", 1)[1]))
        except ValueError:
            raise ConfigError(f"{spec!r} is not mask:N", "baseline") from None
    if spec.startswith("preset:"):
        preset = spec.split(":", 1)[1]
        config = EngineConfig(preset=preset, store=MEMORY)
        return EngineSubject(name or preset, config)
    if spec == "default":
        return EngineSubject(name or "default", EngineConfig(store=MEMORY))
    config, _ = load_engine_config(spec)
    return EngineSubject(name or Path(spec).stem, config)
