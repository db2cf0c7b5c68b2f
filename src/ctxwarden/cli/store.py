"""``ctxwarden recall`` and ``ctxwarden store stats|gc``.

All three open the store the engine would use: the backend of ``--config`` (default
SQLite) in ``--data-dir`` (default: the config's ``data_dir``, else
:func:`ctxwarden.store.default_data_dir`). Store failures are
:class:`~ctxwarden.errors.StoreError`, printed by :func:`ctxwarden.cli.main` as one line.
``recall`` checks its reference and line range before it opens any store: a malformed
one is a :class:`~ctxwarden.errors.RequestError` whatever the store.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.table import Table

from ctxwarden.cli.common import (
    DATA_DIR_HELP,
    CliConsole,
    check_store_path_conflict,
    given_data_dir,
    print_json,
    store_errors,
    write_stdout,
)
from ctxwarden.config import EngineConfig, StoreConfig, load_config, masked_url
from ctxwarden.engine import DEFAULT_TENANT
from ctxwarden.errors import ArtifactMissing, ConfigError, RequestError, StoreError
from ctxwarden.store import Store, default_data_dir, open_store, sqlite_path
from ctxwarden.store.recall import MAX_RECALL_LINES, checked_ref, parse_line_range, recall

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "recall",
        help="print the original text behind a reference (cw:...), or a line range of it",
        description="Print the original behind REF. The output ends with a newline; "
        "one is added when the original (or the range) does not end with one.",
    )
    p.add_argument("ref", metavar="REF", help="a reference such as cw:5f3a9c21e0b4")
    p.add_argument("--lines", metavar="A-B", help="only lines A to B (1-based, inclusive)")
    who = p.add_mutually_exclusive_group()
    who.add_argument(
        "--tenant", help=f"tenant key (default {DEFAULT_TENANT!r}, the library's and the CLI's)"
    )
    who.add_argument(
        "--credential-env",
        metavar="VAR",
        help="recall what the proxy stored for the client whose API key is in the "
        "environment variable VAR (its tenant is derived with the data directory's "
        "proxy.secret; the key is never read from the command line)",
    )
    p.add_argument(
        "--tenant-secret-file",
        metavar="FILE",
        help="with --credential-env: the tenant secret the proxy was given with "
        "--tenant-secret-file (default: the data directory's proxy.secret; also "
        "CTXWARDEN_TENANT_SECRET_FILE)",
    )
    _add_store_options(p)
    p.set_defaults(handler=_recall)

    store = sub.add_parser("store", help="inspect or trim the artifact store")
    commands = store.add_subparsers(dest="store_command", required=True, metavar="COMMAND")
    p = commands.add_parser("stats", help="artifacts, bytes, sessions and tenants stored")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_store_options(p)
    p.set_defaults(handler=_stats)

    p = commands.add_parser("gc", help="drop expired artifacts and trim to the byte cap")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_store_options(p)
    p.set_defaults(handler=_gc)


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (its [store] table is used)")
    parser.add_argument("--data-dir", help=DATA_DIR_HELP)


@contextmanager
def _opened(args: argparse.Namespace) -> Iterator[tuple[EngineConfig, Store]]:
    given = given_data_dir(args)
    config = load_config(args.config) if args.config else EngineConfig()
    secret_only = bool(getattr(args, "credential_env", None))  # --data-dir: the secret's
    if not secret_only:  # which store did the user mean? gc on the wrong one drops live ones
        check_store_path_conflict(given, config.store)
    data_dir = given or config.data_dir
    if config.store.backend == "sqlite":
        path = sqlite_path(config.store, data_dir)
        if _not_made(path):  # these commands read: a missing store is not made
            raise StoreError(
                f"no store at {path} (nothing was condensed with this data dir or config yet)"
            )
    with store_errors(config.store, data_dir, args.config):
        store = open_store(config.store, data_dir)
    try:
        yield config, store
    finally:
        store.close()


def _not_made(path: Path) -> bool:
    """True when no store file is at ``path`` and opening one would only make it
    (nothing in the way is a file: that is the opening's own, clearer error). A
    folder on the way that cannot be entered is no proof of absence: False, so the
    opening reports it (``cannot open the store file X: Permission denied``)."""
    try:
        if path.exists():
            return False
        for parent in path.parents:
            if parent.exists():
                return parent.is_dir()
    except OSError:
        return False
    return True


def _check_recall_args(ref: str, lines: str | None) -> None:
    """Refuse, before any store is opened, a ``ref`` that is no reference and a
    ``--lines`` that is empty or no range (:class:`RequestError` naming it)."""
    checked_ref(ref)
    if lines is not None and not lines.strip():
        raise RequestError("--lines is empty (give A-B or A, or leave --lines out)")
    parse_line_range(lines)


_SECRET_VARIABLE = "CTXWARDEN_TENANT_SECRET_FILE"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _proxy_tenant(
    variable: str,
    data_dir: str | None,
    secret_file: str | None = None,
    secret_key: str = "--tenant-secret-file",
) -> str:
    """The tenant the proxy files a client's originals under: the keyed hash of the API
    key in the environment ``variable`` with the tenant secret in ``secret_file``, else
    the data directory's ``proxy.secret`` (:class:`ConfigError` naming what is missing;
    the key is never shown)."""
    from ctxwarden.proxy.tenant import (
        TenantKeys,
        credential_of,
        load_or_create_secret,
        read_secret_file,
    )

    if not _ENV_NAME.fullmatch(variable):  # a key pasted here by mistake is not echoed
        raise ConfigError(
            "not an environment variable name (give the name of the variable that holds "
            "the key, e.g. OPENAI_API_KEY, never the key itself)",
            "--credential-env",
        )
    value = os.environ.get(variable, "")
    # a "Bearer ..." value read as the proxy reads that header
    credential = credential_of({"authorization": value}) or value.strip()
    if not credential:
        raise ConfigError(
            f"the environment variable {variable} is unset or empty", "--credential-env"
        )
    if secret_file:
        return TenantKeys(read_secret_file(secret_file, secret_key)).for_credential(credential)
    folder = Path(data_dir) if data_dir else default_data_dir()
    if not (folder / "proxy.secret").is_file():
        raise ConfigError(
            f"no proxy.secret in {folder}: the proxy never ran with this data directory "
            "(give the one it serves from with --data-dir; with --credential-env it names "
            "the secret's directory even when the config names the store file)",
            "--credential-env",
        )
    return TenantKeys(load_or_create_secret(folder)).for_credential(credential)


def _hint_credential_env(exc: ArtifactMissing, data_dir: str | None) -> None:
    """Raise ``exc`` with a hint when ``data_dir`` (else the default one) holds a
    ``proxy.secret``: the proxy ran there, and what it stored is filed under each
    client's own tenant, which only ``--credential-env`` reaches."""
    folder = Path(data_dir) if data_dir else default_data_dir()
    try:
        proxied = (folder / "proxy.secret").is_file()
    except OSError:
        proxied = False
    if proxied:
        raise ArtifactMissing(
            f"{exc} (for the default tenant; {folder} has a proxy.secret: what the proxy "
            "stored is each client's own, recalled with --credential-env VAR, VAR the "
            "environment variable holding the client's API key)"
        ) from exc


def _where(config: EngineConfig, data_dir: str | None) -> str:
    """Which store the command read: the SQLite file, or the server's URL without
    its password."""
    store: StoreConfig = config.store
    if store.backend == "sqlite":
        return str(sqlite_path(store, data_dir))
    if store.backend == "memory":
        return "in this process only"
    if not store.url:
        return ""
    return masked_url(store.url)


def _recall(args: argparse.Namespace) -> int:
    _check_recall_args(args.ref, args.lines)
    if args.tenant is not None and not args.tenant.strip():  # was taken as the default
        raise ConfigError("empty (give a tenant key, or leave --tenant out)", "--tenant")
    if args.tenant_secret_file and not args.credential_env:
        raise ConfigError(
            "needs --credential-env (the secret derives that client's tenant)",
            "--tenant-secret-file",
        )
    with _opened(args) as (config, store):
        tenant = args.tenant or DEFAULT_TENANT
        secret_file = args.tenant_secret_file or os.environ.get(_SECRET_VARIABLE)
        secret_key = "--tenant-secret-file" if args.tenant_secret_file else _SECRET_VARIABLE
        if args.credential_env:
            tenant = _proxy_tenant(
                args.credential_env, args.data_dir or config.data_dir, secret_file or None,
                secret_key,
            )  # fmt: skip
        try:
            found = recall(store, args.ref, args.lines, tenant=tenant)
        except ArtifactMissing as exc:
            if args.tenant is None and not args.credential_env:
                _hint_credential_env(exc, args.data_dir or config.data_dir)
            raise
    text = found.text
    if not text.endswith("\n"):
        text += "\n"
    sys.stdout.flush()
    write_stdout(text.encode("utf-8"))
    if found.cut_at is not None and found.wanted is not None:
        # on stderr: stdout holds the original's lines only (a redirect keeps them exact)
        print(
            f"[ctxwarden recall: cut at line {found.cut_at:,} of {found.wanted:,} "
            f"({MAX_RECALL_LINES:,} lines at most per range); ask for "
            f"--lines {found.cut_at + 1}-{found.wanted}]",
            file=sys.stderr,
        )
    return 0


def _stats(args: argparse.Namespace) -> int:
    with _opened(args) as (config, store):
        counts = store.stats()
    where = _where(config, args.data_dir or config.data_dir)
    if args.json:
        print_json({"backend": config.store.backend, **counts})
        return 0
    table = Table(title="ctxwarden store")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("backend", config.store.backend)
    for name in ("artifacts", "bytes", "sessions", "tenants"):
        table.add_row(name, f"{counts[name]:,}")
    console = CliConsole()
    console.print(table)
    if where:  # whole, on one line: a path cut to the table's width says nothing
        console.print(f"store: {where}", soft_wrap=True, markup=False, highlight=False)
    return 0


def _gc(args: argparse.Namespace) -> int:
    with _opened(args) as (config, store):
        dropped = store.gc()
        counts = store.stats()
    if args.json:
        print_json({"backend": config.store.backend, "dropped": dropped, **counts})
        return 0
    print(
        f"dropped {dropped:,} artifact{'s' if dropped != 1 else ''}; "
        f"{counts['artifacts']:,} left ({counts['bytes']:,} bytes)"
    )
    return 0
