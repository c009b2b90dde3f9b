"""The secrets of ``backlog-worker tracker serve``: where the api token and the rail's URL (which
may carry a PostgreSQL password) are read from, and the warnings about serving without a token
or with one on the command line.

It may touch the ``--token``/``--token-file`` values, the token file, the environment variable
:data:`TOKEN_ENV` and the server's log (which never shows the token); nothing else.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from tracker_client.errors import ConfigError

__all__ = ["TOKEN_ENV", "read_token", "read_url", "warn_about_the_token"]

log = logging.getLogger("backlog_worker.server")

TOKEN_ENV = "BACKLOG_WORKER_API_TOKEN"  # noqa: S105 - the variable name, not a secret


def read_token(token: str | None, token_file: Path | None) -> str | None:
    """The api token from ``--token``, ``--token-file`` or the environment (in that order)."""
    if token is not None and token_file is not None:
        raise ConfigError("use either --token or --token-file, not both")
    if token_file is not None:
        try:
            value = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"--token-file {token_file}: {exc.strerror or exc}") from exc
        if not value:
            raise ConfigError(f"--token-file {token_file}: the file is empty")
        return value
    if token is not None:
        if not token.strip():
            raise ConfigError("--token: the token is empty")
        return token.strip()
    env = os.environ.get(TOKEN_ENV, "").strip()
    return env or None


def read_url(url: str | None, url_file: Path | None) -> str:
    """The rail's URL from ``--tracker`` or ``--tracker-file`` (exactly one of them)."""
    if url is not None and url_file is not None:
        raise ConfigError("use either --tracker or --tracker-file, not both")
    if url_file is None:
        if url is None or not url.strip():
            raise ConfigError("give the rail to serve: --tracker URL or --tracker-file FILE")
        return url
    try:
        value = url_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"--tracker-file {url_file}: {exc.strerror or exc}") from exc
    if not value:
        raise ConfigError(f"--tracker-file {url_file}: the file is empty")
    return value


def warn_about_the_token(
    host: str, api_token: str | None, *, from_command_line: bool, token_file: Path | None = None
) -> None:
    """Say loudly what is open without a token, that ``--token`` is readable by others, and
    what is weak about the token (short, or in a file every local user may read)."""
    from worker.config.token import token_warnings

    if api_token is not None:
        for warning in token_warnings(api_token, token_file):
            log.warning("%s", warning, extra={"action": "serve_weak_token"})
    if api_token is None:
        reach = (
            "any local user or process"
            if host in ("127.0.0.1", "localhost", "::1")
            else "anyone who can reach it"
        )
        log.warning(
            "serving on %s without an api token: every admin route is open to %s (create and"
            " cancel tasks and pipelines, claim work, read and write the store, run"
            " maintenance); give one with --token-file or %s",
            host,
            reach,
            TOKEN_ENV,
            extra={"action": "serve_unauthenticated"},
        )
    elif from_command_line:
        log.warning(
            "--token puts the api token on the command line, where every local user can read"
            " it (/proc/PID/cmdline, ps); prefer --token-file or %s",
            TOKEN_ENV,
            extra={"action": "serve_token_on_command_line"},
        )
