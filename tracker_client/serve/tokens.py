"""Scoped api tokens of the served rail: worker, producer and read-only credentials beside the
admin token, kept hashed in one file the server re-reads when it changes.

Each token has a *kind* and a scope (docs/operate/security.md#scoped-tokens):

* ``worker``: claims, heartbeats and reports for a set of roles, and what a worker process
  needs around them (its presence, the wake-up poll, maintenance, spans, artifacts, the store,
  subtasks);
* ``producer``: creating, reading, waiting on and cancelling tasks of a set of pipelines;
* ``read``: reads only: queue figures, tasks, runs, events, the dashboard without buttons.

The value (``bwt_`` and 43 random characters) is shown once, by ``backlog-worker token
create``; the file keeps its SHA-256 only, with the token's id, name, kind and scope, mode
0600, written atomically. The server looks a presented token up by its digest and re-reads the
file when its size, inode or modification time change (at most once per
:data:`RELOAD_EVERY_S`), so a token created or revoked takes effect without a restart. This
module touches that file only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracker_client.errors import ConfigError

__all__ = [
    "KINDS",
    "RELOAD_EVERY_S",
    "TOKENS_ENV",
    "TOKEN_PREFIX",
    "Kind",
    "ScopedToken",
    "TokenStore",
    "digest",
    "tokens_path",
]

Kind = Literal["worker", "producer", "read"]
#: The kinds of scoped token, and what each is scoped by.
KINDS: dict[str, str] = {"worker": "roles", "producer": "pipelines", "read": ""}
_KIND: dict[str, Kind] = {"worker": "worker", "producer": "producer", "read": "read"}
#: Every token value starts so (a leaked one is recognisable by secret scanners).
TOKEN_PREFIX = "bwt_"  # noqa: S105 - a prefix, not a secret
#: How often, at most, the server looks whether the file changed.
RELOAD_EVERY_S = 0.5
_FILE_VERSION = 1
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.@")


#: The environment variable naming the tokens file (for ``tracker serve`` and ``token``).
TOKENS_ENV = "BACKLOG_WORKER_TOKENS_FILE"


def tokens_path(given: Path | None, rail_url: str | None) -> Path:
    """The tokens file: ``given`` (``--tokens``), else :data:`TOKENS_ENV`, else beside an
    embedded rail's file (``rail.db`` -> ``rail.db.tokens.json``)."""
    if given is not None:
        return given
    env = os.environ.get(TOKENS_ENV)
    if env:
        return Path(env)
    if rail_url is not None and rail_url.startswith("sqlite:"):
        from tracker_client.factory import parse_sqlite_url

        path, _ = parse_sqlite_url(rail_url)
        if path != ":memory:":
            return Path(path + ".tokens.json")
    raise ConfigError(
        "name the tokens file with --tokens FILE or "
        + TOKENS_ENV
        + " (only an embedded rail has one by default, beside its file)"
    )


def digest(value: str | bytes) -> str:
    """The SHA-256 (hex) a token is stored and looked up by."""
    raw = value.encode() if isinstance(value, str) else value
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class ScopedToken:
    """One token as stored: never its value, only its digest."""

    id: str
    name: str
    kind: Kind
    sha256: str
    created_at: str
    roles: tuple[str, ...] = ()
    pipelines: tuple[str, ...] = ()

    def scope(self) -> str:
        """The scope in words: ``roles coder, review`` / ``pipelines ingest`` / ``read-only``."""
        if self.kind == "worker":
            return "roles " + ", ".join(self.roles)
        if self.kind == "producer":
            return "pipelines " + ", ".join(self.pipelines)
        return "read-only"

    def as_json(self) -> dict[str, Any]:
        """The token's stored form (and ``token list --json``'s)."""
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "roles": list(self.roles),
            "pipelines": list(self.pipelines),
            "sha256": self.sha256,
            "created_at": self.created_at,
        }


def _names(what: str, values: Iterable[str]) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(v.strip() for v in values))
    for value in out:
        if not value or len(value) > 128 or any(c.isspace() or ord(c) < 32 for c in value):
            raise ConfigError(f"token: {what} {value!r} is not a valid name")
    return out


def _parse(raw: Any, path: Path) -> list[ScopedToken]:
    if not isinstance(raw, dict) or raw.get("version") != _FILE_VERSION:
        raise ConfigError(f"{path}: not a backlog-worker tokens file (version {_FILE_VERSION})")
    tokens: list[ScopedToken] = []
    for n, item in enumerate(raw.get("tokens", [])):
        try:
            kind = _KIND.get(item["kind"])
            if kind is None:
                raise ValueError(f"kind {item['kind']!r}")
            tokens.append(
                ScopedToken(
                    id=str(item["id"]),
                    name=str(item["name"]),
                    kind=kind,
                    sha256=str(item["sha256"]),
                    created_at=str(item["created_at"]),
                    roles=tuple(str(r) for r in item.get("roles", [])),
                    pipelines=tuple(str(p) for p in item.get("pipelines", [])),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: token #{n + 1} is malformed ({exc})") from None
    return tokens


@dataclass
class TokenStore:
    """The tokens file at ``path``: lookups for the server, changes for ``backlog-worker token``."""

    path: Path
    _tokens: dict[str, ScopedToken] = field(default_factory=dict)
    _stamp: tuple[int, int, int] | None = None
    _checked: float = 0.0

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read the tokens file: {exc}") from exc
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def load(self) -> list[ScopedToken]:
        """Read the file now (none yet: no token); its tokens."""
        stamp = self._stat()
        if stamp is None:
            self._tokens, self._stamp = {}, None
            return []
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path}: cannot read the tokens file: {exc}") from exc
        tokens = _parse(raw, self.path)
        self._tokens = {t.sha256: t for t in tokens}
        self._stamp = stamp
        return tokens

    def find(self, value: bytes) -> ScopedToken | None:
        """The token whose value is ``value`` (re-reading a changed file first), or None.

        A file that became unreadable keeps the tokens last read (a half-edited file must not
        lock every worker out); the server logs nothing here, the caller decides.
        """
        now = time.monotonic()
        if now - self._checked >= RELOAD_EVERY_S:
            self._checked = now
            with contextlib.suppress(ConfigError):
                if self._stat() != self._stamp:
                    self.load()
        return self._tokens.get(digest(value))

    def _write(self, tokens: list[ScopedToken]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"version": _FILE_VERSION, "tokens": [t.as_json() for t in tokens]}
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self.load()

    def create(
        self,
        name: str,
        kind: str,
        *,
        roles: Iterable[str] = (),
        pipelines: Iterable[str] = (),
    ) -> tuple[ScopedToken, str]:
        """A new token (stored) and its value, which exists nowhere else: show it once."""
        checked = _KIND.get(kind)
        if checked is None:
            raise ConfigError(f"token: kind {kind!r} is not one of {', '.join(KINDS)}")
        if not name or len(name) > 128 or not set(name) <= _NAME_CHARS:
            raise ConfigError(
                "token: a name is 1-128 letters, digits and - _ . @ (it says whose token it is)"
            )
        role_list, pipeline_list = _names("role", roles), _names("pipeline", pipelines)
        if kind == "worker" and (not role_list or pipeline_list):
            raise ConfigError("token: a worker token names its roles (--role, one or more)")
        if kind == "producer" and (not pipeline_list or role_list):
            raise ConfigError(
                "token: a producer token names its pipelines (--pipeline, one or more)"
            )
        if kind == "read" and (role_list or pipeline_list):
            raise ConfigError("token: a read token reads everything; it takes no --role/--pipeline")
        tokens = self.load()
        if any(t.name == name for t in tokens):
            raise ConfigError(f"token: {name!r} exists already (revoke it first, or pick a name)")
        value = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = ScopedToken(
            id="tok_" + secrets.token_hex(4),
            name=name,
            kind=checked,
            sha256=digest(value),
            created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            roles=role_list,
            pipelines=pipeline_list,
        )
        self._write([*tokens, token])
        return token, value

    def revoke(self, which: str) -> ScopedToken:
        """Remove the token whose id or name is ``which``; the token removed."""
        tokens = self.load()
        found = [t for t in tokens if which in (t.id, t.name)]
        if not found:
            raise ConfigError(f"token: no token with id or name {which!r} in {self.path}")
        self._write([t for t in tokens if t is not found[0]])
        return found[0]
