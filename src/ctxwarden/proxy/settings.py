"""Proxy settings: one frozen value, built from CLI flags or ``CTXWARDEN_*`` variables.

Limits bound what a client controls: body bytes read for condensing (past the cap
the request is streamed upstream untouched, unless it may owe recall answers: see
``max_owed_body_bytes``; other routes are never capped), messages
per request (past the cap the request is forwarded uncondensed), recall rounds, and
per turn (every round of one client request) the recall calls answered and the
recalled bytes (``max_recall_bytes`` per answer, four times that per turn; an answer
past a cap is cut, saying so). The store is
garbage-collected every ``gc_interval`` seconds, so its TTL and byte cap hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ctxwarden.config import Mode
from ctxwarden.errors import ConfigError

__all__ = ["DEFAULT_ANTHROPIC_UPSTREAM", "DEFAULT_OPENAI_UPSTREAM", "ProxySettings"]

DEFAULT_OPENAI_UPSTREAM = "https://api.openai.com"
DEFAULT_ANTHROPIC_UPSTREAM = "https://api.anthropic.com"


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything the proxy needs besides the engine (see module docstring)."""

    host: str = "127.0.0.1"
    port: int = 8787
    openai_upstream: str = DEFAULT_OPENAI_UPSTREAM
    anthropic_upstream: str = DEFAULT_ANTHROPIC_UPSTREAM
    mode: Mode | None = None  # None: the engine config's mode
    canary_percent: float = 100.0
    admin_token: str | None = None
    kill_switch: bool = False
    """Start with the kill switch engaged (every request exact). The switch lives in the
    process's memory: flipped by ``SIGUSR1`` or the admin endpoint, it is lost on a
    restart, so an operator who needs it to hold across one starts with this
    (``--kill-switch``, ``CTXWARDEN_KILL_SWITCH=1``)."""
    data_dir: str | None = None
    tenant_secret_file: str | None = None
    """The file holding the tenant secret (:mod:`ctxwarden.proxy.tenant`), which every
    replica sharing a store must share; ``None``: ``<data_dir>/proxy.secret``, created
    on first start."""
    connect_timeout: float = 10.0
    read_timeout: float = 600.0  # between bytes from the upstream
    total_timeout: float | None = None  # whole exchange, a streamed upload included
    max_body_bytes: int = 32 * 1024 * 1024
    max_owed_body_bytes: int = 256 * 1024 * 1024
    """Bytes a Responses body past ``max_body_bytes`` is read to, held in memory, when
    its tenant has recall answers owed (:mod:`ctxwarden.proxy.owed`; past it, and for
    other tenants, it streams through as sent; never less than ``max_body_bytes``)."""
    max_owed_held_bytes: int | None = None
    """Bytes of such bodies held at once, process-wide (each counted at the larger of
    its sizes as sent and decoded, until its exchange ends; it peaks at about three
    times that). None: :attr:`owed_held_bytes` (one body of the largest size). A body
    that finds them held streams through as sent, counted and warned about."""
    max_messages: int = 20_000
    max_recall_rounds: int = 3
    max_recall_calls: int = 8
    max_recall_bytes: int = 256 * 1024
    pool_size: int = 256
    max_engine_wait: float = 1.0
    """Seconds a request waits for the engine thread to start its condense; past it the
    request is sent uncondensed (:mod:`ctxwarden.proxy.engine_wait`). 0: no limit."""
    max_bound_wait: float = 30.0
    """Seconds a Messages request to a model that binds thinking to its prefix (or a
    token count of one) waits for the engine thread to start its condense: sent
    without its session's adopted replacements, the provider may refuse the thinking
    it carries, so it waits longer than ``max_engine_wait``; past it, it is sent as
    the client sent it (a stuck store must not hang it). 0: no limit."""
    gc_interval: float = 600.0
    """Seconds between store garbage collections (TTL and byte cap); 0: never (an
    operator runs ``ctxwarden store gc`` instead)."""
    memo_mb: float | None = None
    """Estimated MB the process's memos keep together (None: the default budget,
    :data:`ctxwarden.memo.DEFAULT_MEMO_BUDGET`, 768 MB).
    Process-wide: :func:`ctxwarden.proxy.build_app` applies it with
    :func:`ctxwarden.memo.set_memo_budget`."""

    @property
    def owed_cap(self) -> int:
        """Bytes a Responses body that may owe recall answers is read and decoded to."""
        return max(self.max_owed_body_bytes, self.max_body_bytes)

    @property
    def owed_held_bytes(self) -> int:
        """The budget of bytes held for owed answers (``max_owed_held_bytes``)."""
        return self.owed_cap if self.max_owed_held_bytes is None else self.max_owed_held_bytes

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{self.port} is not a TCP port (0-65535)", "port")
        if not 0 <= self.canary_percent <= 100:
            raise ConfigError("must be between 0 and 100", "canary_percent")
        if self.mode not in (None, "active", "shadow", "exact"):
            raise ConfigError("must be active, shadow or exact", "mode")
        for name in ("openai_upstream", "anthropic_upstream"):
            url: str = getattr(self, name)
            if not url.startswith(("http://", "https://")):
                raise ConfigError("must be an http(s) origin", name)
            try:
                parts = urlsplit(url)
                _ = parts.port  # raises for a port that is not one
            except ValueError as exc:
                raise ConfigError(f"not a URL ({exc})", name) from None
            if not parts.hostname:
                raise ConfigError("has no host", name)
            if parts.username is not None or parts.password is not None:
                # the client's own credential header is forwarded; the HTTP client refuses
                # both at once, which failed every request with a 500
                raise ConfigError(
                    "holds a user name or password: not supported (the client's own "
                    "Authorization or x-api-key header is forwarded)",
                    name,
                )
            if "?" in url or "#" in url:  # an empty one too: "http://h?" keeps the "?"
                # the client's path is appended to the upstream URL as text: after a
                # query it lands in the query, and every request went to the path "/"
                raise ConfigError(
                    "holds a query or fragment (? or #): not supported (give the origin, "
                    "with a path prefix if any; the client's own path and query are "
                    "appended)",
                    name,
                )
        if self.admin_token is not None and len(self.admin_token) < 16:
            raise ConfigError("must be at least 16 characters", "admin_token")
        if not (self.gc_interval == 0 or 1 <= self.gc_interval <= 86_400 * 7):  # NaN too
            raise ConfigError(
                f"{self.gc_interval} is not 0 (never) or 1 to 604800 seconds", "gc_interval"
            )
        for name in ("max_body_bytes", "max_owed_body_bytes", "max_messages",
                     "max_recall_calls", "max_recall_bytes", "pool_size"):  # fmt: skip
            if not getattr(self, name) >= 1:
                raise ConfigError(f"{getattr(self, name)} is not a positive limit", name)
        if self.max_owed_held_bytes is not None and not self.max_owed_held_bytes >= 1:
            raise ConfigError(
                f"{self.max_owed_held_bytes} is not a positive limit", "max_owed_held_bytes"
            )
        if not self.max_recall_rounds >= 0:
            raise ConfigError(
                f"{self.max_recall_rounds} is not 0 (off) or more", "max_recall_rounds"
            )
        if not 0 <= self.max_engine_wait <= 3600:  # NaN too
            raise ConfigError(
                f"{self.max_engine_wait} is not 0 (no limit) to 3600 seconds", "max_engine_wait"
            )
        if not 0 <= self.max_bound_wait <= 3600:  # NaN too
            raise ConfigError(
                f"{self.max_bound_wait} is not 0 (no limit) to 3600 seconds", "max_bound_wait"
            )
        if self.memo_mb is not None and not 0 <= self.memo_mb <= 1024 * 1024:  # NaN too
            raise ConfigError(f"{self.memo_mb} is not 0 to 1048576 MB", "memo_mb")
        for name in ("connect_timeout", "read_timeout", "total_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:  # NaN too
                raise ConfigError(f"{value} is not a positive number of seconds", name)
