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

import contextlib
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, unquote_plus, urlsplit

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
    "ConfigModel",
    "ConfigValueError",
    "EngineConfig",
    "Mode",
    "StoreConfig",
    "config_error",
    "load_config",
    "masked_url",
    "overrides_of",
    "read_toml",
    "redacted",
]

Mode = Literal["active", "shadow", "exact"]


class ConfigValueError(ConfigError, ValueError):
    """The :class:`ConfigError` a config model built directly raises; a ``ValueError``
    too, as pydantic's ``ValidationError`` is, so code that caught that still does."""


class ConfigModel(BaseModel):
    """The base of every config model: strict (unknown keys rejected), frozen, no
    infinity or NaN in a float field. Built directly (``MaskConfig(min_tokenz=5)``),
    a model raises :class:`ConfigValueError` naming the model and the first invalid
    key in one line (``MaskConfig.min_tokenz: unknown key``), as a config file does,
    not pydantic's multi-line ``ValidationError``. ``model_validate`` and a model's
    validation as a field of another keep pydantic's ``ValidationError``, whose
    location the enclosing model's error names in full (``pipeline.mask.min_tokens``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    if not TYPE_CHECKING:  # type checkers keep pydantic's own signature (field names)

        def __init__(self, **data: Any) -> None:
            try:
                super().__init__(**data)
            except ValidationError as exc:
                error = config_error(exc, type(self).__name__)
                raise ConfigValueError(error.reason, error.key) from None

        # pydantic calls a model's own __init__ for model_validate and for a nested
        # table (where a ConfigError would lose the enclosing key) unless it is marked
        # as the base one, as pydantic marks BaseModel.__init__ (and RootModel's)
        __init__.__pydantic_base_init__ = True


class BudgetConfig(ConfigModel):
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


class StoreConfig(ConfigModel):
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
        "without the store; raise it for very large artifacts on a slow link. SQLite: "
        "seconds a write waits for another connection's lock on the file (the busy "
        "timeout; writers sharing it hold the lock for well under a second).",
    )
    breaker_seconds: StrictFloat = Field(
        10.0,
        ge=0,
        allow_inf_nan=False,
        description="Redis, PostgreSQL and SQLite: after a call the server did not answer "
        "(SQLite: a call that found the file locked past timeout_seconds, or a disk I/O "
        "error), calls fail at once for this many seconds (requests go on without the "
        "store instead of each waiting timeout_seconds), then one is tried again; 0: "
        "every call is tried.",
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


class EngineConfig(ConfigModel):
    """Everything the engine needs; ``EngineConfig()`` is the default (balanced).

    ``pipeline`` holds overrides of the preset, as a ``[pipeline]`` table does. A model
    given for it, or for a table inside it, stands for all of its fields, its defaults
    included, exactly as it prints: a whole :class:`PipelineConfig` (a preset such as
    ``PRESETS["conservative"]`` too) is the pipeline that runs, whatever ``preset``
    says; a ``MaskConfig(min_tokens=80)`` in the dict is the whole mask table. To
    change only some fields of the preset, give them as a dict
    (``{"mask": {"min_tokens": 80}}``)."""

    mode: Mode = "active"
    preset: str = Field("balanced", description="Pipeline preset the passes start from.")
    pipeline: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the preset's pass settings, deep-merged into it: a dict "
        "(a ``[pipeline]`` table), or a ``PipelineConfig`` (models may also stand for "
        "tables inside the dict, e.g. ``{'mask': MaskConfig(min_tokens=80)}``); a model "
        "stands for all of its fields as it prints, defaults included: a whole "
        "``PipelineConfig`` is the pipeline, the preset unused.",
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
            ``model_validate_json`` of a mapping (the keys are the file's: no model
            name before them)."""
            try:
                BaseModel.__init__(self, **data)
            except ValidationError as exc:
                raise config_error(exc) from None


def overrides_of(value: Any) -> Any:
    """``value`` with each pydantic model in it (a ``PipelineConfig``, a ``MaskConfig``
    in a dict) as the dict of all of its fields, defaults included (models nested in it
    too): a model is the config it prints, so it replaces the preset's table whole (a
    ``PipelineConfig``: the whole pipeline, see
    :func:`~ctxwarden.pipeline.presets.resolve_pipeline`); only a dict overrides just the
    keys it holds. Anything else is left as it is, for the model to check."""
    if isinstance(value, BaseModel):
        return value.model_dump()
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


_MASK = "***"
_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s']\S*)?", re.IGNORECASE)
"""A ``password=`` of libpq's keyword form, its value quoted or not (or empty)."""


def masked_url(url: str) -> str:
    """``url`` with every password shown as ``***``: the one of the user part of a URL,
    a ``password`` query parameter (PostgreSQL and Redis URLs take one) and the
    ``password`` of libpq's keyword form (``host=... password=...``)."""
    if "://" not in url:  # libpq's keyword form
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + _MASK, url)
    parts = urlsplit(url)
    netloc = parts.netloc
    user, at, hosts = netloc.rpartition("@")
    if at and ":" in user:
        netloc = f"{user.split(':', 1)[0]}:{_MASK}@{hosts}"
    query = "&".join(
        f"{key}={_MASK}" if _is_password_key(key) else item
        for item in parts.query.split("&")
        for key in [item.split("=", 1)[0]]
    )
    # put together by hand: urlunsplit drops an empty host (unix:///run/redis.sock)
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if "?" in url.split("#", 1)[0] else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def _is_password_key(key: str) -> bool:
    """Whether a URL query parameter's (still encoded) name is ``password``."""
    return unquote_plus(key).strip().lower() == "password"


_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)([^\s@/]*)@")
"""The password of a URL's user part (``scheme://user:password@host``)."""


def redacted(text: str, url: str | None = None) -> str:
    """``text`` (a store error's message, for a log line) with every password shown as
    ``***``: the one in ``url`` (the configured store URL) wherever ``text`` repeats
    it, that of any URL's user part in it, and any ``password=`` value."""
    if url:
        secrets: set[str] = set()
        if "://" in url:
            with contextlib.suppress(ValueError):
                parts = urlsplit(url)
                if parts.password:
                    secrets |= {parts.password, unquote(parts.password)}
                for item in parts.query.split("&"):  # a password query parameter
                    key, _, value = item.partition("=")
                    if _is_password_key(key) and value:
                        secrets |= {value, unquote_plus(value)}
        for match in _KEYWORD_PASSWORD.finditer(url):
            if match.group(2):
                secrets |= {match.group(2), match.group(2).strip("'")}
        for secret in sorted(secrets, key=len, reverse=True):
            if secret:
                text = text.replace(secret, _MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{_MASK}@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + _MASK, text)


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict; a missing or invalid file is a :class:`ConfigError`. A
    leading UTF-8 byte-order mark is dropped (editors on Windows write one; JSON inputs
    drop it too). A relative ``data_dir`` or ``[store] path`` string is made relative
    to the file's folder, not to the current directory (:func:`_relative_to_file`), so
    a config means the same store from wherever it is used; ``--data-dir``,
    ``CTXWARDEN_DATA_DIR`` and every other flag or variable keep theirs (the current
    directory)."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8").removeprefix("\ufeff"))
    except FileNotFoundError:
        raise ConfigError("file not found", str(p)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", str(p)) from exc
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", str(p)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read ({exc.strerror})", str(p)) from None
    return _relative_to_file(data, p)


def _relative_to_file(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` read from the file ``path``, its ``data_dir`` and ``store.path`` (when
    they are non-empty relative path strings) joined to the file's folder; anything
    else is left for the model to check."""
    folder = path.parent

    def anchored(value: Any) -> Any:
        if isinstance(value, str) and value.strip() and not Path(value).is_absolute():
            return str(folder / value)
        return value

    if "data_dir" in data:
        data["data_dir"] = anchored(data["data_dir"])
    store = data.get("store")
    if isinstance(store, dict) and "path" in store:
        store["path"] = anchored(store["path"])
    return data


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
