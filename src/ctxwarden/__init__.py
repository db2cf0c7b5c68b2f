"""ctxwarden: a context engine that condenses LLM agent requests, keeping the protocol exact.

Public surface::

    import ctxwarden
    engine = ctxwarden.Engine()
    result = engine.condense(request, api="openai.chat")
    result.request, result.report

Anthropic callers that cache mark where the previous request ended, and where a
compaction step's rewrite starts, with
``with_step_breakpoint(result.request, result.report["step_start"]) or result.request``
(it returns ``None`` when it adds nothing; the proxy does it for its clients).
``set_memo_budget(n)`` caps the bytes the process's memos keep (``serve --memo-mb``).
"""

from ctxwarden.breakpoints import with_step_breakpoint
from ctxwarden.config import EngineConfig, load_config
from ctxwarden.engine import CondenseResult, Engine
from ctxwarden.errors import (
    ArtifactCorrupted,
    ArtifactMissing,
    ConfigError,
    CtxwardenError,
    EngineClosed,
    MalformedRequest,
    RequestError,
    StoreError,
    ValidationFailed,
)
from ctxwarden.memo import set_memo_budget

__all__ = [
    "ArtifactCorrupted",
    "ArtifactMissing",
    "CondenseResult",
    "ConfigError",
    "CtxwardenError",
    "Engine",
    "EngineClosed",
    "EngineConfig",
    "MalformedRequest",
    "RequestError",
    "StoreError",
    "ValidationFailed",
    "__version__",
    "load_config",
    "set_memo_budget",
    "with_step_breakpoint",
]

__version__ = "0.1.0"
