"""Tenant keys: a keyed hash of the client's API credential, never the credential.

The key is ``t-`` + the first 32 hex digits of HMAC-SHA256(secret, credential),
where the secret is 32 random bytes kept in ``<data_dir>/proxy.secret`` (mode 0600,
created on first start) so that tenant keys stay stable across restarts but cannot
be recomputed by someone who only sees the store. Replicas that share a Redis or
PostgreSQL store but not a data directory must share the secret instead
(``--tenant-secret-file``, :func:`read_secret_file`): with secrets of their own, one
client is another tenant on each, and nothing stored (session states, originals, owed
recall answers) is shared. The store keeps the :meth:`TenantKeys.fingerprint` of the
secret it was first used with, so a replica with another one is told at start. The credential is the
``x-api-key`` header, else the token of ``Authorization: Bearer``, else Azure OpenAI's
``api-key`` header; the newest Anthropic SDK sends the second, older ones the first,
and all map to the same tenant for the same key. A request without a credential is
tenant ``t-anonymous``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from ctxwarden.errors import ConfigError

__all__ = [
    "ANONYMOUS_TENANT",
    "TenantKeys",
    "credential_of",
    "load_or_create_secret",
    "read_secret_file",
]

ANONYMOUS_TENANT = "t-anonymous"
_SECRET_FILE = "proxy.secret"
_MIN_SECRET_BYTES = 16


def load_or_create_secret(data_dir: str | Path) -> bytes:
    """The per-data-dir secret, created atomically with mode 0600 when missing.

    Concurrent creators (threads, processes, replicas on a shared volume) agree on one
    secret: each writes its own temporary file and links it into place, and whoever
    loses the link reads the winner's. A file too short to be a secret (an operator's
    mistake, or a crash on a file system that lost the write) is a
    :class:`~ctxwarden.errors.ConfigError` naming it; replacing it silently would
    orphan every stored artifact."""
    folder = Path(data_dir)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # the store beside it: its own
    except OSError as exc:  # a file in the way, no permission
        reason = "a file is in the way" if isinstance(exc, FileExistsError) else exc.strerror
        raise ConfigError(f"cannot create {folder} ({reason or exc})", "data_dir") from None
    path = folder / _SECRET_FILE
    try:
        return _checked(path, path.read_bytes())
    except FileNotFoundError:
        pass
    fresh = secrets.token_bytes(32)
    tmp = folder / f".{_SECRET_FILE}.{os.getpid()}.{secrets.token_hex(8)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:  # no permission, a read-only volume
        raise ConfigError(f"cannot write in {folder} ({exc.strerror or exc})", "data_dir") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(fresh)
            fh.flush()
            os.fsync(fh.fileno())  # never link a file whose bytes are not on disk
        os.link(tmp, path)  # fails if another creator won the race
    except FileExistsError:
        fresh = _checked(path, path.read_bytes())
    finally:
        tmp.unlink(missing_ok=True)
    return fresh


def read_secret_file(path: str | Path, key: str = "tenant_secret_file") -> bytes:
    """The tenant secret in the file at ``path``, given by the operator (a fleet's
    replicas share it: see module docstring); never created here, since a secret made
    by one replica alone would split the fleet. A file that is missing, unreadable or
    shorter than 16 bytes is a :class:`~ctxwarden.errors.ConfigError` named ``key``."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"no tenant secret at {path} (make one, e.g. `head -c 32 /dev/urandom > "
            f"{path}`, and give every replica the same file)",
            key,
        ) from None
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"cannot read {path} ({exc.strerror or exc})", key) from None
    if len(data) < _MIN_SECRET_BYTES:
        raise ConfigError(
            f"{path} holds {len(data)} bytes, too few for the tenant secret (at least "
            f"{_MIN_SECRET_BYTES})",
            key,
        )
    return data


def _checked(path: Path, data: bytes) -> bytes:
    if len(data) < _MIN_SECRET_BYTES:
        raise ConfigError(
            f"{path} holds {len(data)} bytes, too few for the tenant secret (at least "
            f"{_MIN_SECRET_BYTES}); restore it, or delete it to create a new one (the "
            "tenants' stored originals then become unreachable)",
            "data_dir",
        )
    return data


def credential_of(headers: Mapping[str, str]) -> str | None:
    """The API credential of a request: ``x-api-key`` first, then a Bearer token, then
    Azure OpenAI's ``api-key`` (its clients send no other)."""
    key = (headers.get("x-api-key") or "").strip()
    if key:
        return key
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return (headers.get("api-key") or "").strip() or None


class TenantKeys:
    """Derives tenant keys with one secret (see module docstring)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < _MIN_SECRET_BYTES:
            raise ValueError("tenant secret must be at least 16 bytes")
        self._secret = secret

    def fingerprint(self) -> str:
        """16 hex digits that tell two secrets apart without revealing either (an HMAC
        of a fixed text): what the store keeps of the secret it was first used with."""
        digest = hmac.new(self._secret, b"ctxwarden tenant secret", hashlib.sha256)
        return digest.hexdigest()[:16]

    def for_credential(self, credential: str | None) -> str:
        if not credential:
            return ANONYMOUS_TENANT
        digest = hmac.new(self._secret, credential.encode("utf-8"), hashlib.sha256)
        return "t-" + digest.hexdigest()[:32]

    def for_headers(self, headers: Mapping[str, str]) -> str:
        return self.for_credential(credential_of(headers))

    def session_label(self, session: object) -> str | None:
        """What logs show of a session key: ``h-`` and 16 hex digits of an HMAC under
        the secret, the same for the same key on every replica sharing the data
        directory. A key may come from a client header (an e-mail address) or be a
        plain digest of the conversation's first texts: an unkeyed hash of it would
        let anyone reading the logs test a guess at either."""
        if not session:
            return None
        data = b"session\0" + str(session).encode("utf-8", "surrogatepass")
        return "h-" + hmac.new(self._secret, data, hashlib.sha256).hexdigest()[:16]
