"""``ctxwarden serve`` (the proxy) and ``ctxwarden fake-upstream`` (the scripted fake).

Every ``serve`` option can also come from the environment: ``--openai-upstream`` is
``CTXWARDEN_OPENAI_UPSTREAM`` and so on (flag wins over variable, variable over the
default). Other tools drive these flags: keep them stable.

An error in an option's value (a :class:`ConfigError`) names it as the user gave it:
the flag (``--canary-percent``) or the variable (``CTXWARDEN_CANARY_PERCENT``); so
does an address the proxy or the fake cannot listen on (``--host``, ``--port``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from ctxwarden.cli.common import SERVE_DATA_DIR_HELP, positive_seconds
from ctxwarden.config import EngineConfig, load_config
from ctxwarden.errors import ConfigError

__all__ = ["env_flag", "register", "settings_from_args"]

_SERVE_OPTIONS: tuple[tuple[str, str, Any], ...] = (
    ("--host", "interface to bind", "127.0.0.1"),
    ("--port", "port to bind", 8787),
    ("--openai-upstream", "OpenAI origin", "https://api.openai.com"),
    ("--anthropic-upstream", "Anthropic origin", "https://api.anthropic.com"),
    ("--config", "TOML engine config file", None),
    ("--data-dir", SERVE_DATA_DIR_HELP, None),
    (
        "--tenant-secret-file",
        "file holding the tenant secret every replica sharing a store must share "
        "(default: <data-dir>/proxy.secret, created on first start)",
        None,
    ),
    ("--mode", "active | shadow | exact (default: the config's mode)", None),
    ("--canary-percent", "share of sessions condensed in active mode (0-100)", 100.0),
    ("--admin-token", "enables the loopback kill-switch endpoint", None),
    (
        "--read-timeout",
        "seconds between upstream bytes before 504 (a longer client timeout wins)",
        600.0,
    ),
    ("--max-body-bytes", "largest body condensed (larger: forwarded untouched)", 32 * 1024 * 1024),
    (
        "--max-owed-body-bytes",
        "largest body held to give it owed recall answers (larger: forwarded untouched)",
        256 * 1024 * 1024,
    ),
    (
        "--max-owed-held-bytes",
        "bytes of such bodies held at once (more: forwarded untouched; default: the "
        "larger of --max-owed-body-bytes and --max-body-bytes, one such body)",
        None,
    ),
    (
        "--max-engine-wait",
        "seconds a request waits for the engine thread; past it, sent uncondensed (0: no limit)",
        1.0,
    ),
    (
        "--max-bound-wait",
        "seconds a Messages request to a model binding thinking waits for the engine "
        "thread; past it, sent as the client sent it (0: no limit)",
        30.0,
    ),
    ("--gc-interval", "seconds between store garbage collections (0: never)", 600.0),
    ("--memo-mb", "estimated MB the memos keep together (0: none kept; default 768)", None),
    ("--log-level", "debug | info | warning | error", "info"),
)


_SERVE_TYPES: dict[str, Callable[[str], Any]] = {"--read-timeout": positive_seconds}
"""Flags checked when parsed (their variables: by :func:`settings_from_args`)."""

_FAKE_PORT = 9000


def _env_name(flag: str) -> str:
    return "CTXWARDEN_" + flag.lstrip("-").replace("-", "_").upper()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the condensing proxy (OpenAI and Anthropic APIs)")
    for flag, help_text, default in _SERVE_OPTIONS:
        p.add_argument(
            flag,
            default=None,
            type=_SERVE_TYPES.get(flag, str),
            help=f"{help_text} [{_env_name(flag)}" + ("]" if default is None else f"; {default}]"),
        )
    p.add_argument(
        "--fake-upstream",
        action="store_true",
        default=None,
        help="also start the bundled fake upstream on a free loopback port and send both "
        "APIs there: try the proxy with one command [CTXWARDEN_FAKE_UPSTREAM=1]",
    )
    p.add_argument(
        "--kill-switch",
        action="store_true",
        default=None,
        help="start with the kill switch engaged: every request in exact mode (the "
        "client's bytes, but for exact mode's rescues: docs/proxy.md) until it is "
        "released (SIGUSR1, the admin endpoint); the switch itself is not kept across "
        "restarts [CTXWARDEN_KILL_SWITCH=1]",
    )
    p.set_defaults(handler=_serve)

    p = sub.add_parser("fake-upstream", help="run the scripted fake OpenAI/Anthropic upstream")
    # the variables are read when the command runs: a bad one fails this command only
    p.add_argument("--host", help="interface to bind [CTXWARDEN_FAKE_HOST; 127.0.0.1]")
    p.add_argument("--port", help=f"port to bind [CTXWARDEN_FAKE_PORT; {_FAKE_PORT}]")
    p.add_argument("--text", help="the answer text of every reply")
    p.set_defaults(handler=_fake_upstream)


_NUMBERS_WITHOUT_DEFAULT: dict[str, type[int] | type[float]] = {
    "--memo-mb": float,
    "--max-owed-held-bytes": int,
}
"""Number options whose default (``None``) is decided later, by the settings."""


def _given_as(
    args: argparse.Namespace, flag: str, env: Mapping[str, str], variable: str | None = None
) -> str:
    """How the user gave ``flag``'s value: the flag itself, else its variable
    (``variable``, by default ``serve``'s name for it) when set, else the flag (its
    default was used)."""
    if getattr(args, flag.lstrip("-").replace("-", "_"), None) is not None:
        return flag
    variable = variable or _env_name(flag)
    return variable if env.get(variable) is not None else flag


def _option(args: argparse.Namespace, flag: str, default: Any, env: dict[str, str]) -> Any:
    """The flag's value, else its variable's, else ``default``; a number where the
    default is one or the option is one of :data:`_NUMBERS_WITHOUT_DEFAULT` (a
    :class:`ConfigError` names the flag or the variable it came from)."""
    where = _given_as(args, flag, env)
    value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
    if value is None:
        value = env.get(_env_name(flag))
    if value is None:
        return default
    kind = _NUMBERS_WITHOUT_DEFAULT.get(flag)
    if isinstance(default, int | float) and not isinstance(default, bool):
        kind = type(default)
    if kind is None:
        return value
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"not a number: {value!r}", where) from None


def settings_from_args(
    args: argparse.Namespace, env: dict[str, str] | None = None
) -> tuple[Any, EngineConfig, str]:
    """``(ProxySettings, EngineConfig, log level)`` from flags, then env, then defaults."""
    from ctxwarden.proxy.settings import ProxySettings

    env = dict(os.environ) if env is None else env
    values = {flag: _option(args, flag, default, env) for flag, _, default in _SERVE_OPTIONS}
    config = load_config(values["--config"]) if values["--config"] else EngineConfig()
    if values["--data-dir"]:
        config = EngineConfig.model_validate(
            {**config.model_dump(), "data_dir": values["--data-dir"]}
        )
    timeout = values["--read-timeout"]
    if not (math.isfinite(timeout) and timeout > 0):  # the flag's is checked when parsed
        raise ConfigError(
            f"{timeout} is not a number of seconds above 0", _given_as(args, "--read-timeout", env)
        )
    try:
        settings = ProxySettings(
            host=values["--host"],
            port=values["--port"],
            openai_upstream=values["--openai-upstream"],
            anthropic_upstream=values["--anthropic-upstream"],
            mode=values["--mode"],
            canary_percent=values["--canary-percent"],
            admin_token=values["--admin-token"],
            kill_switch=bool(getattr(args, "kill_switch", None))
            or env_flag(env, "CTXWARDEN_KILL_SWITCH"),
            data_dir=values["--data-dir"],
            tenant_secret_file=values["--tenant-secret-file"],
            read_timeout=values["--read-timeout"],
            max_body_bytes=values["--max-body-bytes"],
            max_owed_body_bytes=values["--max-owed-body-bytes"],
            max_owed_held_bytes=values["--max-owed-held-bytes"],
            max_engine_wait=values["--max-engine-wait"],
            max_bound_wait=values["--max-bound-wait"],
            gc_interval=values["--gc-interval"],
            memo_mb=values["--memo-mb"],
        )
    except ConfigError as exc:  # named by the setting: name what the user typed
        flag = "--" + exc.key.replace("_", "-")
        if flag not in values:
            raise
        raise ConfigError(exc.reason, _given_as(args, flag, env)) from None
    level = str(values["--log-level"]).lower()
    if level not in ("debug", "info", "warning", "error"):
        raise ConfigError(
            f"{level!r} is not debug, info, warning or error", _given_as(args, "--log-level", env)
        )
    return settings, config, level


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """The yes/no variable ``name`` (unset: no); a :class:`ConfigError` names it when
    its value is neither (a typo must not start the proxy against the real APIs)."""
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{env[name]!r} is not 1/true/yes/on or 0/false/no/off", name)


def _serve(args: argparse.Namespace) -> int:
    from ctxwarden.engine import Engine
    from ctxwarden.proxy import build_app, serve_forever
    from ctxwarden.proxy.listen import ListenError
    from ctxwarden.telemetry import configure_json_logging

    settings, config, level = settings_from_args(args)
    with_fake = args.fake_upstream or env_flag(os.environ, "CTXWARDEN_FAKE_UPSTREAM")
    configure_json_logging(getattr(logging, level.upper(), logging.INFO))
    engine = Engine(config)
    try:
        asyncio.run(_run_proxy(engine, settings, build_app, serve_forever, with_fake))
    except ListenError as exc:  # the proxy's own address (the fake's is named below)
        raise ConfigError(str(exc), _given_as(args, f"--{exc.option}", os.environ)) from exc
    except ConfigError as exc:  # the secret's folder or file: named as the user gave it
        if exc.key == "tenant_secret_file" and not exc.source:
            where = _given_as(args, "--tenant-secret-file", os.environ)
            raise ConfigError(exc.reason, where) from exc
        if exc.key != "data_dir" or exc.source:
            raise
        if settings.data_dir:
            raise ConfigError(exc.reason, _given_as(args, "--data-dir", os.environ)) from exc
        source = _option(args, "--config", None, dict(os.environ))
        if source and config.data_dir:  # the config file's data_dir
            raise exc.in_file(source) from exc
        raise
    finally:
        engine.close()
    return 0


async def _run_proxy(
    engine: Any, settings: Any, build_app: Any, serve_forever: Any, with_fake: bool
) -> None:
    """Serve until stopped; with ``with_fake`` a fake upstream runs in the same loop."""
    fake = None
    if with_fake:
        from ctxwarden.proxy.fake_upstream import LONG_RUNNING_RECEIVED, FakeUpstream
        from ctxwarden.proxy.listen import ListenError

        try:
            fake = await FakeUpstream(keep_received=LONG_RUNNING_RECEIVED).start("127.0.0.1", 0)
        except ListenError as exc:
            raise ConfigError(f"the fake upstream {exc}", "--fake-upstream") from exc
        settings = dataclasses.replace(
            settings, openai_upstream=fake.url, anthropic_upstream=fake.url
        )
        print(f"fake upstream listening on {fake.url}", flush=True)
    try:
        await serve_forever(build_app(engine, settings), settings.host, settings.port)
    finally:
        if fake is not None:
            await fake.stop()


def _tcp_port(text: str, key: str) -> int:
    """``text`` as a TCP port (as ``serve`` checks its port); ``key`` names it."""
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"not a number: {text!r}", key) from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{port} is not a TCP port (0-65535)", key)
    return port


def _fake_upstream(args: argparse.Namespace) -> int:
    from ctxwarden.proxy.fake_upstream import run_fake_upstream
    from ctxwarden.proxy.listen import ListenError

    host = args.host if args.host is not None else os.environ.get("CTXWARDEN_FAKE_HOST")
    if args.port is not None:
        port = _tcp_port(args.port, "--port")
    else:
        port = _tcp_port(
            os.environ.get("CTXWARDEN_FAKE_PORT", str(_FAKE_PORT)), "CTXWARDEN_FAKE_PORT"
        )
    try:
        asyncio.run(run_fake_upstream(host or "127.0.0.1", port, args.text))
    except ListenError as exc:
        flag = f"--{exc.option}"
        variable = f"CTXWARDEN_FAKE_{exc.option.upper()}"
        used = {k: v for k, v in os.environ.items() if v}  # an empty host is no host
        raise ConfigError(str(exc), _given_as(args, flag, used, variable)) from exc
    except KeyboardInterrupt:
        return 0
    return 0
