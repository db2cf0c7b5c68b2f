"""ctxwarden: a context engine that condenses LLM agent requests, keeping the protocol exact.

Public surface::

    import ctxwarden
    engine = ctxwarden.Engine()
    result = engine.condense(request, api="openai.chat")
    result.request, result.report
"""

from ctxwarden.config import EngineConfig, load_config
from ctxwarden.engine import CondenseResult, Engine
from ctxwarden.errors import (
    ArtifactCorrupted,
    ArtifactMissing,
    ConfigError,
    CtxwardenError,
    MalformedRequest,
    RequestError,
    StoreError,
    ValidationFailed,
)

__all__ = [
    "ArtifactCorrupted",
    "ArtifactMissing",
    "CondenseResult",
    "ConfigError",
    "CtxwardenError",
    "Engine",
    "EngineConfig",
    "MalformedRequest",
    "RequestError",
    "StoreError",
    "ValidationFailed",
    "__version__",
    "load_config",
]

__version__ = "0.1.0"
