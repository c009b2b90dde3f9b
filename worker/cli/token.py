"""``--token``, ``--token-file`` and ``--tracker-file``: the api token (and the tracker URL from
a file) of one command, for every command that takes
``--tracker`` (the operator commands, ``run`` and ``check``).

The options are not passed to the command function: their values wait in the click context
(:func:`token_overrides` reads them) so that every command gains them without a new parameter.
They set ``tracker.api_token`` / ``tracker.api_token_file`` as flags, above
``BACKLOG_WORKER_API_TOKEN`` and the config file. ``--token`` puts the token where every local
user can read it (``ps``, ``/proc/PID/cmdline``), so using it prints a warning.
Kept free of heavy imports: ``run`` and ``check`` use it too.

It may touch the click context and stderr (the warning) only; reading a token file is
:mod:`worker.config.token`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = ["CMDLINE_WARNING", "token_options", "token_overrides"]

F = TypeVar("F", bound=Callable[..., Any])

_META = "backlog_worker.token_flags"

#: Printed on stderr when ``--token`` is used.
CMDLINE_WARNING = (
    "warning: --token is visible to every local user (ps, /proc/PID/cmdline); "
    "prefer --token-file FILE or BACKLOG_WORKER_API_TOKEN"
)


def _store(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            ctx.meta.setdefault(_META, {})[key] = value
            if key == "tracker.api_token":
                click.echo(CMDLINE_WARNING, err=True)
        return value

    return callback


def token_options(func: F) -> F:
    """Add ``--token``, ``--token-file`` and ``--tracker-file`` (the tracker URL read from a
    file, for a URL carrying a password; read back with :func:`token_overrides`)."""
    func = click.option(
        "--tracker-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        expose_value=False,
        callback=_store("tracker.url_file"),
        help="Read the tracker URL from this file (keeps a PostgreSQL password out of ps; a "
        "relative path is looked up in $CREDENTIALS_DIRECTORY first). Also "
        "$BACKLOG_WORKER_TRACKER_URL_FILE or the config's [tracker] url_file.",
    )(func)
    func = click.option(
        "--token-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        expose_value=False,
        callback=_store("tracker.api_token_file"),
        help="Read the tracker's api token from this file (a relative path is looked up in "
        "$CREDENTIALS_DIRECTORY first). Beats BACKLOG_WORKER_API_TOKEN and the config.",
    )(func)
    func = click.option(
        "--token",
        default=None,
        metavar="TOKEN",
        expose_value=False,
        callback=_store("tracker.api_token"),
        help="The tracker's api token. Visible to other local users in ps: prefer "
        "--token-file. Default: $BACKLOG_WORKER_API_TOKEN, else the config's [tracker] "
        "api_token / api_token_file.",
    )(func)
    return func


def token_overrides() -> dict[str, Any]:
    """The ``--token``/``--token-file`` given to the running command, as config overrides."""
    ctx = click.get_current_context(silent=True)
    return dict(ctx.meta.get(_META, {})) if ctx is not None else {}
