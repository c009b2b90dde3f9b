"""``backlog-worker dashboard``: the web dashboard of any rail, served on its own.

``tracker serve`` already shows its dashboard at ``/ui``; this command serves the same pages
(:mod:`tracker_client.dashboard`) for a rail that is not served (an embedded rail, opened here)
or for a remote one (``http://...``, read through its API with the token). It binds 127.0.0.1
unless ``--host`` says otherwise, at ``http://HOST:PORT/ui/``.

The admin token (``--token``, ``--token-file``, ``BACKLOG_WORKER_API_TOKEN`` or the config's
``[tracker]``) is the one the dashboard's login asks for, and the one a remote rail is read
with. Without one the pages are read-only unless ``--allow-actions`` is given.

It may touch the tracker (through the dashboard), uvicorn and its listening socket, and the
token (never logged); it runs no worker.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracker_client.factory import URL_FORMS
from tracker_client.protocol import Tracker
from tracker_client.serve.browser import named_hosts
from tracker_client.urlmask import mask_url
from worker.cli.ops.common import OpsContext, resolve_tracker
from worker.cli.token import token_options
from worker.cli.web import allowed_host_option, proxy_settings, trusted_proxy_option

if TYPE_CHECKING:
    from tracker_client.serve.helpers import Closing

__all__ = ["dashboard_command", "serve_dashboard"]

log = logging.getLogger("backlog_worker.dashboard")

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


async def serve_dashboard(
    tracker: Tracker,
    *,
    url: str,
    host: str,
    port: int,
    api_token: str | None,
    allow_actions: bool,
    refresh_s: int,
    allowed_hosts: tuple[str, ...] = (),
    trusted_proxies: tuple[str, ...] = (),
) -> int:
    """Serve ``tracker``'s dashboard with uvicorn until interrupted; the exit code.

    Requests whose ``Host`` is not one of the server's (default names plus ``allowed_hosts``)
    and browsers' cross-origin writes are refused (:class:`~tracker_client.serve.browser.\
BrowserGuard`): an open dashboard with ``--allow-actions`` is not a DNS-rebinding target."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import RedirectResponse
    from starlette.routing import Mount, Route

    from tracker_client.dashboard import DashboardSettings, create_dashboard
    from tracker_client.serve.browser import BrowserGuard, HostRule
    from tracker_client.serve.helpers import Closing

    closing = Closing()  # set when the server stops: open live task pages end at once
    settings = DashboardSettings(
        admin_token=api_token, allow_actions=allow_actions, refresh_s=refresh_s, closing=closing
    )

    async def home(request: Any) -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=303)

    app = Starlette(
        routes=[Route("/", home), Mount("/ui", app=create_dashboard(tracker, settings))]
    )
    config = uvicorn.Config(
        BrowserGuard(app, HostRule.for_bind(host, allowed_hosts)),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        ws="none",
        server_header=False,
        **proxy_settings(trusted_proxies),
    )
    mode = (
        "login with the admin token"
        if api_token
        else ("open, actions allowed" if allow_actions else "open, read-only")
    )
    server = _server(config, f"dashboard of {mask_url(url)} ({mode})", closing)
    await server.serve()
    if not server.started:
        click.echo(
            f"error: could not listen on {host}:{port} (in use, or not permitted?)", err=True
        )
        return 2
    return 0


def _server(config: Any, announce: str, closing: Closing) -> Any:
    """uvicorn's server, announcing the address it really listens on (``--port 0``), and
    setting ``closing`` first when it stops (uvicorn waits for every answer in flight: an open
    live task page would hold the stop up)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            closing.set()
            await super().shutdown(sockets)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            for server in getattr(self, "servers", []):
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    log.info(
                        "%s at http://%s:%d/ui/; listening on http://%s:%d",
                        announce,
                        host,
                        port,
                        host,
                        port,
                        extra={"action": "dashboard_started"},
                    )

    return Server(config)


@click.command("dashboard")
@click.option(
    "--tracker",
    "tracker_url",
    default=None,
    metavar="URL",
    help=f"The rail to show: {URL_FORMS}. Default: $BACKLOG_WORKER_TRACKER_URL or the "
    "config's [tracker].",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    envvar="BACKLOG_WORKER_CONFIG",
    help="Config file (TOML) whose [tracker] section names the rail.",
)
@token_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=7701, show_default=True, type=click.IntRange(0, 65535))
@allowed_host_option
@trusted_proxy_option
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Without an admin token, still show the cancel and requeue buttons (anyone who can "
    "reach the address can press them).",
)
@click.option(
    "--refresh",
    "refresh_s",
    default=5,
    show_default=True,
    type=click.IntRange(1, 3600),
    help="Seconds between a list page's reloads.",
)
@click.option("--log-level", default="INFO", show_default=True)
def dashboard_command(
    tracker_url: str | None,
    config_path: Path | None,
    host: str,
    port: int,
    allow_actions: bool,
    refresh_s: int,
    allowed_host: tuple[str, ...],
    trusted_proxy: tuple[str, ...],
    log_level: str,
) -> None:
    """Serve the web dashboard of a rail at http://HOST:PORT/ui/ (read-only without a token)."""
    ctx = OpsContext.build(tracker_url, config_path, as_json=False)
    target = resolve_tracker(tracker_url, config_path)
    api_token = target.api_token
    _setup_logging(log_level, api_token)
    if api_token is None and allow_actions and host not in _LOOPBACK:
        log.warning(
            "dashboard on %s without an admin token and with --allow-actions: anyone who can "
            "reach it can cancel and requeue tasks",
            host,
            extra={"action": "dashboard_open_actions"},
        )

    async def run(tracker: Tracker) -> int:
        return await serve_dashboard(
            tracker,
            url=target.url,
            host=host,
            port=port,
            api_token=api_token,
            allow_actions=allow_actions,
            refresh_s=refresh_s,
            allowed_hosts=tuple(named_hosts(allowed_host)),
            trusted_proxies=trusted_proxy,
        )

    ctx.run(run)


def _setup_logging(level: str, api_token: str | None) -> None:
    from worker.logs import configure_logging

    try:
        configure_logging(level.upper(), "auto", secrets=[api_token] if api_token else [])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--log-level") from None
