"""The options every command that starts a web server shares (``tracker serve``,
``dashboard``): which ``Host`` names it answers, and which proxies' ``X-Forwarded-For`` it
believes (docs/operate/security.md).

It may touch click only; the rules are :mod:`tracker_client.serve.browser`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["allowed_host_option", "proxy_settings", "trusted_proxy_option"]

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


def trusted_proxy_option(func: F) -> F:
    """Add ``--trusted-proxy ADDR`` (repeatable; the function gets ``trusted_proxy``)."""
    return click.option(
        "--trusted-proxy",
        multiple=True,
        metavar="ADDR",
        help="Believe X-Forwarded-For (the client's address, for the failed-auth throttle and"
        " the log) only from this proxy address (repeatable). Default: from nobody: the TCP"
        " peer is the client.",
    )(func)


def proxy_settings(trusted: tuple[str, ...]) -> dict[str, Any]:
    """uvicorn's ``proxy_headers``/``forwarded_allow_ips`` for ``trusted`` proxies: off when
    none (uvicorn's own default believes 127.0.0.1, so any local process could pick the
    address its failed tokens are counted under)."""
    names = [name.strip() for item in trusted for name in item.split(",") if name.strip()]
    if not names:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": names}
