"""How every ``backlog-worker`` command reports an expected failure: one line, one exit code.

Kept free of heavy imports (no rich, no httpx) so that ``run`` and ``check`` can share the
operator commands' wording and exit codes without loading their output machinery.

It may touch the rail's error types (:mod:`tracker_client.errors`) and stderr only; it never opens a
tracker or reads the configuration.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import click

from tracker_client.errors import (
    BacklogFull,
    BacklogWorkerError,
    ConfigError,
    TokenRefused,
    TrackerCorrupt,
    TrackerError,
    TrackerUnavailable,
    ValidationFailed,
)

__all__ = [
    "EXIT_BACKLOG_FULL",
    "EXIT_CODES",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "NO_TOKEN",
    "OpsError",
    "describe",
    "escape_controls",
    "exit_code_for",
    "fail",
    "input_errors",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_BACKLOG_FULL = 4
EXIT_TIMEOUT = 5

#: Exit codes of every ``backlog-worker`` command, as docs/operate/commands.md ("Errors and exit
#: codes") documents them.
EXIT_CODES: Mapping[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "failure: the tracker refused (unknown task, conflict, ...) or the task failed",
    EXIT_USAGE: "usage or configuration error: bad flag, file, JSON, pipeline definition",
    EXIT_UNREACHABLE: "tracker unreachable (connection refused, timeout, database locked)",
    EXIT_BACKLOG_FULL: "backlog full: the role's waiting depth is at its cap; nothing written",
    EXIT_TIMEOUT: "wait timed out: the task is still queued or running",
}


#: The ``token_source`` of a command that sent no api token (see :func:`describe`).
NO_TOKEN = ""

#: Control characters except tab and newline: never sent raw to the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class OpsError(BacklogWorkerError):
    """An operator-facing failure: ``message`` is printed as one line, ``exit_code`` returned."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code of an error."""
    if isinstance(exc, OpsError):
        return exc.exit_code
    if isinstance(exc, BacklogFull):
        return EXIT_BACKLOG_FULL
    if isinstance(exc, TrackerUnavailable):
        return EXIT_UNREACHABLE
    if isinstance(exc, ConfigError | ValidationFailed | TrackerCorrupt):
        return EXIT_USAGE
    return EXIT_FAILURE


def describe(
    exc: BaseException, tracker_url: str | None = None, token_source: str | None = None
) -> str:
    """One line saying what went wrong.

    ``token_source`` says where the api token came from (``from BACKLOG_WORKER_API_TOKEN``,
    see :attr:`worker.config.models.TrackerConfig.api_token_source`), :data:`NO_TOKEN` when none was
    sent, None when unknown: a refused token is then named, never printed. A password in any
    URL the line quotes is masked (:func:`~tracker_client.urlmask.mask_url`).
    """
    from tracker_client.urlmask import mask_url  # an error's path only (issue 31, memory)

    return mask_url(_describe(exc, tracker_url, token_source))


def _describe(exc: BaseException, tracker_url: str | None, token_source: str | None) -> str:
    if isinstance(exc, OpsError):
        return exc.message
    if isinstance(exc, TokenRefused) and token_source is not None:
        return _refused(exc, token_source)
    if isinstance(exc, BacklogFull):
        return (
            f"backlog of role {exc.role!r} is full: {exc.depth} waiting, cap {exc.cap}; "
            "nothing was written"
        )
    if isinstance(exc, TrackerUnavailable):
        from tracker_client.urlmask import mask_url

        where = f" at {mask_url(tracker_url)}" if tracker_url else ""
        return f"tracker unreachable{where}: {exc.message}"
    if isinstance(exc, TrackerError):
        return exc.message if exc.code in exc.message else f"{exc.message} ({exc.code})"
    return str(exc) or type(exc).__name__


def _refused(exc: TokenRefused, token_source: str) -> str:
    if token_source == NO_TOKEN:
        return (
            f"the tracker requires an api token and no token was sent ({exc.status}): "
            f"{exc.detail}; give one with --token-file FILE, BACKLOG_WORKER_API_TOKEN or "
            "[tracker] api_token_file"
        )
    return f"the tracker refused the api token {token_source} ({exc.status}): {exc.detail}"


def fail(
    exc: BaseException, tracker_url: str | None = None, token_source: str | None = None
) -> click.exceptions.Exit:
    """Print ``exc`` as one line on stderr; return the Exit to raise (``token_source``: see
    :func:`describe`)."""
    click.echo(f"error: {escape_controls(describe(exc, tracker_url, token_source))}", err=True)
    return click.exceptions.Exit(exit_code_for(exc))


@contextmanager
def input_errors(tracker_url: str | None = None) -> Iterator[None]:
    """Turn an :class:`OpsError` (or any expected error) raised inside into a one-line exit."""
    try:
        yield
    except BacklogWorkerError as exc:
        raise fail(exc, tracker_url) from None


def escape_controls(text: str) -> str:
    """``text`` with control characters (ESC, BEL, ...) written as ``\\x1b`` escapes."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
