"""The options every command that starts a web server shares (``tracker serve``,
``dashboard``): which ``Host`` names it answers (docs/operate/security.md).

It may touch click only; the rules are :mod:`tracker_client.serve.browser`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["allowed_host_option"]

F = TypeVar("F", bound=Callable[..., Any])


def allowed_host_option(func: F) -> F:
    """Add ``--allowed-host NAME`` (repeatable; the function gets ``allowed_host``, a tuple)."""
    return click.option(
        "--allowed-host",
        multiple=True,
        metavar="NAME",
        help="Also answer requests whose Host is NAME (repeatable, or comma-separated; '*': any"
        " host). Loopback names, the bound address, this machine's name and IP literals are"
        " answered anyway; other names are refused (DNS rebinding). Also"
        " $BACKLOG_WORKER_ALLOWED_HOSTS.",
    )(func)
