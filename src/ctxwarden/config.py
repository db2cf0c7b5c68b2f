"""Engine configuration: typed, strict (unknown keys rejected), defined in one place.

A config file is TOML; its tables mirror these models. Errors name the dotted key::

    mode = "active"            # active | shadow | exact
    preset = "balanced"        # conservative | balanced | aggressive
    [budget]
    context_window = 128000
    [store]
    backend = "sqlite"         # sqlite | memory | redis | postgres
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ctxwarden.errors import ConfigError

__all__ = [
    "BudgetConfig",
    "EngineConfig",
    "Mode",
    "StoreConfig",
    "config_error",
    "load_config",
    "overrides_of",
    "read_toml",
]

Mode = Literal["active", "shadow", "exact"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BudgetConfig(_Strict):
    """Overrides of the registry's window and output reserve."""

    context_window: StrictInt | None = Field(None, gt=0, description="Explicit context window.")
    output_reserve: StrictInt | None = Field(None, ge=0, description="Tokens kept for the answer.")
    style: Literal["openai", "anthropic"] | None = Field(
        None,
        description="Cache price style steps are judged by (it replaces the planner's "
        "price_style); default: the planner's price_style (conservative: both).",
    )

    @model_validator(mode="after")
    def _room_for_the_request(self) -> BudgetConfig:
        window, reserve = self.context_window, self.output_reserve
        if window is not None and reserve is not None and reserve >= window:
            raise ValueError(
                f"output_reserve ({reserve:,}) leaves no room in context_window ({window:,})"
            )
        return self


class StoreConfig(_Strict):
    """Where originals of condensed content are kept."""

    backend: Literal["sqlite", "memory", "redis", "postgres"] = "sqlite"
    path: str | None = Field(None, description="SQLite file; default <data_dir>/store.sqlite3.")
    url: str | None = Field(None, description="Redis or PostgreSQL URL.")
    ttl_seconds: StrictInt = Field(
        30 * 86400, gt=0, description="Artifacts unused this long expire."
    )
    max_bytes: StrictInt = Field(2 * 1024**3, gt=0, description="Cap on stored bytes; gc trims.")
    timeout_seconds: StrictFloat = Field(
        5.0,
        gt=0,
        allow_inf_nan=False,
        description="Redis and PostgreSQL: seconds to wait for the server (to connect, "
        "for one command or statement) before the call fails and the request goes on "
        "without the store; raise it for very large artifacts on a slow link.",
    )
    breaker_seconds: StrictFloat = Field(
        10.0,
        ge=0,
        allow_inf_nan=False,
        description="Redis and PostgreSQL: after a call the server did not answer, calls "
        "fail at once for this many seconds (requests go on without the store instead of "
        "each waiting timeout_seconds), then one is tried again; 0: every call is tried.",
    )
    gc_interval_seconds: StrictFloat = Field(
        3600,
        ge=0,
        allow_inf_nan=False,
        description="An engine collects its store (expired and over-cap entries) on a "
        "thread of its own at the first condense this long after it was made or last "
        "collected; 0: never (run `ctxwarden store gc`). The proxy collects on its own "
        "schedule (`serve --gc-interval`) instead.",
    )


class EngineConfig(_Strict):
    """Everything the engine needs; ``EngineConfig()`` is the default (balanced)."""

    mode: Mode = "active"
    preset: str = Field("balanced", description="Pipeline preset the passes start from.")
    pipeline: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the preset's pass settings, deep-merged into it: a dict "
        "(a ``[pipeline]`` table), or a ``PipelineConfig`` (models may also stand for "
        "tables inside the dict, e.g. ``{'mask': MaskConfig(min_tokens=80)}``); a model "
        "overrides the fields it was given, as the same values written as a dict do.",
    )
    budget: BudgetConfig = BudgetConfig()
    store: StoreConfig = StoreConfig()
    data_dir: str | None = Field(None, description="Default ~/.local/share/ctxwarden.")
    include_contents_in_report: StrictBool = Field(
        False,
        description="Add the rewritten texts to the report (``contents``: JSON pointer and "
        "text of each); off by default, so reports and logs hold no message contents.",
    )

    @field_validator("pipeline", mode="before")
    @classmethod
    def _models_as_tables(cls, value: Any) -> Any:
        return overrides_of(value)

    if not TYPE_CHECKING:  # type checkers keep pydantic's own signature (field names)

        def __init__(self, **data: Any) -> None:
            """Raises :class:`ConfigError` naming the first invalid key, as a config
            file does (not pydantic's multi-line error); so do ``model_validate`` and
            ``model_validate_json`` of a mapping."""
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise config_error(exc) from None


def overrides_of(value: Any) -> Any:
    """``value`` with each pydantic model in it (a ``PipelineConfig``, a ``MaskConfig``
    in a dict) as the dict of the fields it was given (models nested in it too): the
    overrides the same values written as a dict are, so they merge into a preset the
    same way (a model's defaults would otherwise replace the preset's values). Anything
    else is left as it is, for the model to check."""
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, dict):
        return {key: overrides_of(item) for key, item in value.items()}
    return value


def config_error(exc: ValidationError, prefix: str = "") -> ConfigError:
    """One :class:`ConfigError` naming the first invalid key of a pydantic error."""
    first = exc.errors()[0]
    key = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "")
    message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    message = message.removeprefix("Value error, ")  # a validator's own message
    return ConfigError(message, key)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict; a missing or invalid file is a :class:`ConfigError`."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("file not found", str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", str(p)) from exc
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", str(p)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read ({exc.strerror})", str(p)) from None


def load_config(path: str | Path) -> EngineConfig:
    """Read a TOML config file into an :class:`EngineConfig`; its pipeline is checked
    too, so a :class:`ConfigError` names the file and the key."""
    return validated_config(read_toml(path), path)


def validated_config(data: dict[str, Any], path: str | Path | None = None) -> EngineConfig:
    """``data`` (read from the file ``path``, when from one) as an :class:`EngineConfig`
    whose preset and pipeline resolve (a :class:`ConfigError` names the key, and the
    file)."""
    from ctxwarden.pipeline.presets import resolve_pipeline

    try:
        try:
            config = EngineConfig.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc) from exc
        resolve_pipeline(config.preset, config.pipeline)
    except ConfigError as exc:
        raise (exc if path is None else exc.in_file(path)) from exc
    return config
