"""Which api token a command uses, and a label saying where it came from (never the token);
which tracker URL it uses when the URL may come from a file (it may carry a password).

Both ``tracker.api_token`` and ``tracker.api_token_file`` may be set by different layers (the
config file names a token file, ``--token`` or ``BACKLOG_WORKER_API_TOKEN`` overrides it): the
higher layer wins (flag > environment > file), so ``--token-file`` beats a token in the
environment. The label lets a refusal (401) say which token the tracker refused:
``from BACKLOG_WORKER_API_TOKEN``, ``from --token``, ``read from /run/tok (--token-file)``.

It may touch the token file (read, looked up in ``$CREDENTIALS_DIRECTORY`` first when relative) and
nothing else; the token itself never reaches a message.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from tracker_client.errors import ConfigError
from worker.config.sources import Sources, toml_place

__all__ = ["MIN_TOKEN_CHARS", "pick_token", "pick_url", "token_warnings"]

log = logging.getLogger("backlog_worker.config")

#: A shorter api token draws a warning: guessing it is a matter of hours even when throttled.
MIN_TOKEN_CHARS = 16

_TOKEN = ("tracker", "api_token")
_TOKEN_FILE = ("tracker", "api_token_file")
_URL = ("tracker", "url")
_URL_FILE = ("tracker", "url_file")
#: A higher layer's setting wins over a lower one's, whichever of the two keys it set.
_RANK = {"flag": 3, "env": 2, "file": 1}


def _where(loc: tuple[str, ...], sources: Sources) -> str:
    """The flag, variable or ``FILE [table] key`` that set ``loc``."""
    origin = sources.origin(loc)
    if origin is None:
        return ".".join(loc)
    if origin.kind == "file":
        return f"{origin.name} {toml_place(loc, {})}"
    return origin.name


def _rank(loc: tuple[str, ...], sources: Sources) -> int:
    origin = sources.origin(loc)
    return 0 if origin is None else _RANK[origin.kind]


def _read_secret_file(
    path: Path, sources: Sources, loc: tuple[str, ...] = _TOKEN_FILE
) -> tuple[str, Path]:
    # systemd's LoadCredential= puts secrets in $CREDENTIALS_DIRECTORY; a relative path is
    # looked up there first.
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    candidate = Path(creds) / path if creds and not path.is_absolute() else path
    try:
        value = candidate.read_text(encoding="utf-8").strip()
    except OSError as exc:
        problem = f"{candidate} cannot be read: {exc.strerror or exc}"
        raise ConfigError(sources.describe(loc, problem)) from exc
    if not value:
        raise ConfigError(sources.describe(loc, f"{candidate} is empty"))
    return value, candidate


def pick_token(
    token: str | None, token_file: Path | None, sources: Sources
) -> tuple[str | None, str | None]:
    """(the api token, where it came from) from the merged settings; (None, None) for none.

    A token file is read here (``ConfigError`` naming its source when it cannot be).
    """
    if token_file is not None and (
        token is None or _rank(_TOKEN_FILE, sources) > _rank(_TOKEN, sources)
    ):
        value, path = _read_secret_file(token_file, sources)
        for warning in token_warnings(value, path):
            log.warning("%s", warning, extra={"action": "weak_token"})
        return value, f"read from {path} ({_where(_TOKEN_FILE, sources)})"
    if token is not None:
        return token, f"from {_where(_TOKEN, sources)}"
    return None, None


def pick_url(url: str, url_file: Path | None, sources: Sources) -> str:
    """The tracker URL: ``url_file``'s content when it is set by a layer at least as high as
    the one that set ``url`` (the default URL never beats a file), else ``url``. Two flags
    (``--tracker`` and ``--tracker-file``) together are a ``ConfigError``."""
    if url_file is None:
        return url
    if _rank(_URL, sources) == _rank(_URL_FILE, sources) == _RANK["flag"]:
        raise ConfigError("use either --tracker or --tracker-file, not both")
    if _rank(_URL_FILE, sources) >= _rank(_URL, sources):
        value, _ = _read_secret_file(url_file, sources, _URL_FILE)
        return value
    return url


def token_warnings(token: str, path: Path | None = None) -> list[str]:
    """What is wrong with an api token (never the token itself): shorter than
    :data:`MIN_TOKEN_CHARS`, or read from a file other local users may read or write."""
    found = []
    if len(token) < MIN_TOKEN_CHARS:
        found.append(
            f"the api token{f' in {path}' if path else ''} has {len(token)} characters: a token"
            f" under {MIN_TOKEN_CHARS} can be guessed; make one with"
            " `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if path is not None:
        try:
            mode = path.stat().st_mode
        except OSError:
            return found
        if mode & (stat.S_IROTH | stat.S_IWOTH):
            found.append(
                f"the token file {path} is readable or writable by every local user (mode"
                f" {stat.S_IMODE(mode):04o}): chmod 600 {path}"
            )
    return found
