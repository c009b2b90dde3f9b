"""``backlog-worker tracker serve``: share an embedded rail over the NullTickets HTTP API.

Workers on other machines then use ``tracker.url = "http://host:port"``. Binds 127.0.0.1 unless
``--host`` says otherwise; with ``--token``/``--token-file``/``BACKLOG_WORKER_API_TOKEN`` every
admin route needs ``Authorization: Bearer <token>`` (lease routes take the lease token).

It may touch the tracker factory (an embedded rail only), the served application
(:mod:`tracker_client.serve`), uvicorn and its listening socket, and the token (flag, file or
environment); it runs no worker and no executor.
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import click

from tracker_client.errors import BacklogWorkerError, ConfigError, NoRail, TrackerError
from tracker_client.factory import URL_FORMS, open_tracker
from tracker_client.serve.browser import named_hosts
from tracker_client.sweeps import SweepCounts
from tracker_client.urlmask import mask_url
from worker.cli.serve_token import TOKEN_ENV, read_token, read_url, warn_about_the_token
from worker.cli.web import allowed_host_option, proxy_settings, trusted_proxy_option

if TYPE_CHECKING:
    from tracker_client.protocol import Tracker
    from tracker_client.serve.connections import ConnectionLimits
    from tracker_client.serve.tokens import TokenStore

__all__ = ["register", "serve_tracker"]

log = logging.getLogger("backlog_worker.server")

EXIT_CONFIG, EXIT_TRACKER = 2, 3


async def serve_tracker(
    url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 7700,
    api_token: str | None = None,
    max_request_bytes: int | None = None,
    max_otlp_bytes: int | None = None,
    limits: ConnectionLimits | None = None,
    create: bool = False,
    metrics_listen: tuple[str, int] | None = None,
    http: str | None = None,
    allowed_hosts: tuple[str, ...] = (),
    trusted_proxies: tuple[str, ...] = (),
    tokens: TokenStore | None = None,
) -> None:
    """Open the embedded tracker at ``url`` and serve it with uvicorn until interrupted.

    ``max_otlp_bytes``: the OTLP ingest body limit (``POST /v1/traces``; default 4 MiB).
    ``limits``: read timeouts and the connection cap (:mod:`tracker_client.serve.connections`).
    ``create``: start a new rail when the file is missing (else ``no rail at PATH``), for a
    rail whose pipelines its clients create over HTTP, as on a NullTickets server.
    ``metrics_listen``: serve Prometheus ``/metrics`` there (:mod:`tracker_client.serve.metrics`;
    bound first: an address in use is a ConfigError before anything is served).
    ``http``: uvicorn's HTTP/1.1 implementation, ``h11`` or ``httptools`` (default: httptools
    where installed; :func:`~tracker_client.serve.connections.default_http`).
    ``allowed_hosts``: ``Host`` names answered beside the default ones (``*``: any;
    :class:`~tracker_client.serve.browser.HostRule`), on the API, the dashboard and ``/metrics``.
    ``trusted_proxies``: whose ``X-Forwarded-For`` is believed (none by default).
    ``tokens``: the scoped tokens accepted beside the admin token
    (:mod:`tracker_client.serve.tokens`; re-read when the file changes).
    """
    import asyncio

    import uvicorn

    from tracker_client.serve.app import DEFAULT_MAX_REQUEST_BYTES, create_app
    from tracker_client.serve.browser import HostRule
    from tracker_client.serve.connections import (
        ConnectionGuard,
        ConnectionLimits,
        default_http,
        install_loop_error_limiter,
    )
    from tracker_client.serve.otlp import DEFAULT_MAX_OTLP_BYTES

    limits = limits or ConnectionLimits()
    install_loop_error_limiter(asyncio.get_running_loop())

    _check_url(url)
    http = http or default_http()
    try:
        guard = ConnectionGuard(limits, http)
    except ImportError as exc:  # --http httptools where it is not installed
        raise ConfigError(f"--http {http}: {exc.name or exc} is not installed") from None
    server_class = _make_server_class()
    metrics_sock = None if metrics_listen is None else _bind_metrics(*metrics_listen)
    sweeps = SweepCounts()
    try:
        # a typo never starts a new rail; every expired lease it sweeps is counted (/metrics)
        tracker = await open_tracker(url, create=create, sweeps=sweeps)
    except NoRail as exc:
        raise NoRail(f"{exc}; or start it here with `tracker serve --create`") from None
    try:
        app = create_app(
            tracker,
            api_token=api_token,
            max_request_bytes=max_request_bytes or DEFAULT_MAX_REQUEST_BYTES,
            max_otlp_bytes=max_otlp_bytes or DEFAULT_MAX_OTLP_BYTES,
            hosts=HostRule.for_bind(host, allowed_hosts),
            tokens=tokens,
        )
        config = uvicorn.Config(
            guard.wrap(app),
            host=host,
            port=port,
            log_config=None,
            lifespan="off",
            ws="none",
            server_header=False,
            http=guard.protocol,
            # Idle persistent connections close after this (the ``keep_alive`` extension says
            # 5 s; the client lets go of its own at 2 s).
            timeout_keep_alive=5,
            # Connections accepted per loop tick: past the cap they are closed at once anyway.
            backlog=min(2048, limits.max_connections),
            **proxy_settings(trusted_proxies),
        )
        server = server_class(config)
        server.closing = app.state.closing
        shown = mask_url(url)  # no password in the log
        server.announce = (
            f"serving {shown} (api auth: {'admin token required' if api_token else 'disabled'};"
            f" http: {http})"
        )
        async with anyio.create_task_group() as tg:
            if metrics_sock is not None:
                hosts = HostRule.for_bind(metrics_sock.getsockname()[0], allowed_hosts)
                rail = (tracker, sweeps)
                _start_metrics(tg, metrics_sock, app, rail, server, limits, api_token, hosts)
            await server.serve()
            tg.cancel_scope.cancel()
        if not server.started:
            raise ConfigError(f"could not listen on {host}:{port} (in use, or not permitted?)")
    finally:
        await tracker.aclose()


def _bind_metrics(host: str, port: int) -> socket.socket:
    from tracker_client.serve.metrics import bind, listening_on

    sock = bind(host, port, what="--metrics-listen")
    log.info("metrics on http://%s/metrics", listening_on(sock), extra={"action": "metrics_on"})
    return sock


def _start_metrics(
    tg: Any,
    sock: socket.socket,
    app: Any,
    rail: tuple[Tracker, SweepCounts],
    server: Any,
    limits: Any,
    token: Any,
    hosts: Any,
) -> None:
    """Count the API's requests and answer ``/metrics`` on ``sock`` beside the server (the
    metrics port asks for the api token when the rail has one); ``rail``: the tracker and
    the counts of what its sweeps reclaimed."""
    from tracker_client.serve.metrics import ServedMetrics, serve_metrics

    tracker, sweeps = rail
    metrics = ServedMetrics(
        tracker,
        open_connections=lambda: len(server.server_state.connections),
        refused_connections=lambda: limits.refused,
        sweeps=sweeps,
    )
    app.observe(metrics.observe)
    tg.start_soon(lambda: serve_metrics(sock, metrics.render, token=token, hosts=hosts))


def _make_server_class() -> type[Any]:
    import uvicorn

    from tracker_client.serve.app import Closing

    class Server(uvicorn.Server):
        """uvicorn's server, announcing the address it really listens on (``--port 0``)."""

        announce = ""
        closing: Closing | None = None

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Answer long polls first: uvicorn waits for every request in flight, and an idle
            # worker's wait-for-work would hold the stop up for its whole timeout.
            if self.closing is not None:
                self.closing.set()
            await super().shutdown(sockets)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            for server in getattr(self, "servers", []):
                for sock in server.sockets:
                    host, port = sock.getsockname()[:2]
                    log.info(
                        "%s; listening on http://%s:%d",
                        self.announce,
                        host,
                        port,
                        extra={"action": "serve_started"},
                    )

    return Server


def register(group: click.Group) -> None:
    """Add ``tracker serve`` to the command line."""

    @group.group("tracker")
    def tracker_group() -> None:
        """Operate a tracker: serve an embedded rail over HTTP."""

    @tracker_group.command("serve")
    @click.option(
        "--tracker",
        "url",
        envvar="BACKLOG_WORKER_TRACKER__URL",
        default=None,
        help=f"The rail to serve, as every --tracker names one ({URL_FORMS}); not an "
        "http(s):// one, which is served already.",
    )
    @click.option(
        "--tracker-file",
        "url_file",
        envvar="BACKLOG_WORKER_TRACKER_URL_FILE",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Read the rail's URL from this file (a PostgreSQL password then stays out of ps).",
    )
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
    @click.option("--port", default=7700, show_default=True, type=click.IntRange(0, 65535))
    @allowed_host_option
    @trusted_proxy_option
    @click.option(
        "--token",
        default=None,
        help=f"Admin api token; visible to local users in ps: prefer --token-file or {TOKEN_ENV}.",
    )
    @click.option(
        "--token-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Read the admin api token from this file.",
    )
    @click.option(
        "--tokens",
        "tokens_file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="The scoped tokens file (`backlog-worker token create`); default: $"
        + "BACKLOG_WORKER_TOKENS_FILE, else RAIL.tokens.json beside an embedded rail's file.",
    )
    @click.option(
        "--max-request-bytes",
        type=click.IntRange(1024),
        default=None,
        help="Largest request body accepted (default 16 MiB).",
    )
    @click.option(
        "--max-otlp-bytes",
        type=click.IntRange(1024),
        default=None,
        help="Largest OTLP trace body accepted on /v1/traces (default 4 MiB; 413 over it).",
    )
    @click.option(
        "--max-connections",
        type=click.IntRange(1),
        default=None,
        help="Most connections open at once (default: what the open-files limit leaves, <= 1000).",
    )
    @click.option(
        "--max-client-connections",
        type=click.IntRange(1),
        default=None,
        help="Most connections open at once from one client address (default: half of"
        " --max-connections).",
    )
    @click.option(
        "--header-timeout",
        type=click.FloatRange(0.1),
        default=10.0,
        show_default=True,
        help="Seconds a request's headers may take to arrive.",
    )
    @click.option(
        "--body-timeout",
        type=click.FloatRange(0.1),
        default=60.0,
        show_default=True,
        help="Seconds a request's body may take to arrive after its headers.",
    )
    @click.option(
        "--create",
        is_flag=True,
        help="Start a new rail (mode 0600) if the file is missing (else: no rail at PATH).",
    )
    @click.option(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="Serve Prometheus /metrics there (own port; needs the api token when one is set).",
    )
    @click.option(
        "--http",
        type=click.Choice(["h11", "httptools"]),
        default=None,
        help="HTTP/1.1 parser (default: httptools where installed, the cheaper per request).",
    )
    @click.option("--log-level", default="INFO", show_default=True)
    @click.option(
        "--log-tasks",
        is_flag=True,
        help="Also log each task's claim, finish and creation (at INFO; always at DEBUG).",
    )
    def serve(
        url: str | None,
        url_file: Path | None,
        host: str,
        port: int,
        token: str | None,
        token_file: Path | None,
        tokens_file: Path | None,
        max_request_bytes: int | None,
        max_otlp_bytes: int | None,
        max_connections: int | None,
        max_client_connections: int | None,
        header_timeout: float,
        body_timeout: float,
        create: bool,
        metrics_listen: str | None,
        http: str | None,
        allowed_host: tuple[str, ...],
        trusted_proxy: tuple[str, ...],
        log_level: str,
        log_tasks: bool,
    ) -> None:
        """Serve an embedded tracker over the NullTickets HTTP API (plus extensions)."""
        try:
            from worker.config.models import check_environment

            check_environment()  # a misspelled BACKLOG_WORKER_API_TOKEN must not serve open
            api_token = read_token(token, token_file)
            url = read_url(url, url_file)
            _check_url(url)
            listen = _metrics_listen(metrics_listen)
            tokens = _scoped_tokens(tokens_file, url, api_token)
            _setup_logging(log_level, api_token, log_tasks=log_tasks)
            warn_about_the_token(
                host, api_token, from_command_line=token is not None, token_file=token_file
            )
            _announce_hosts(host, named_hosts(allowed_host))
            rail = url
            anyio.run(
                lambda: serve_tracker(
                    rail,
                    host=host,
                    port=port,
                    api_token=api_token,
                    max_request_bytes=max_request_bytes,
                    max_otlp_bytes=max_otlp_bytes,
                    limits=_limits(
                        max_connections, max_client_connections, header_timeout, body_timeout
                    ),
                    create=create,
                    metrics_listen=listen,
                    http=http,
                    allowed_hosts=tuple(named_hosts(allowed_host)),
                    trusted_proxies=trusted_proxy,
                    tokens=tokens,
                ),
                backend_options={"use_uvloop": _has_uvloop()},
            )
        except ConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_CONFIG)
        except TrackerError as exc:
            click.echo(f"error: tracker: {exc}", err=True)
            sys.exit(EXIT_TRACKER)
        except BacklogWorkerError as exc:  # pragma: no cover - defensive
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:  # pragma: no cover - uvicorn handles SIGINT itself
            pass


def _scoped_tokens(given: Path | None, url: str, api_token: str | None) -> TokenStore | None:
    """The scoped tokens file to serve (None: none), read once now so a broken one is an error
    before anything is served; scoped tokens need an admin token beside them."""
    from tracker_client.serve.tokens import TokenStore, tokens_path

    try:
        path = tokens_path(given, url)
    except ConfigError:
        return None  # a PostgreSQL rail without --tokens: the admin token only
    store = TokenStore(path)
    found = store.load()
    if api_token is None and (given is not None or found):
        raise ConfigError(
            f"{path}: scoped tokens need an admin token beside them (--token-file or "
            f"{TOKEN_ENV}); without one every route is open"
        )
    if found:
        log.info(
            "accepting %d scoped token(s) from %s beside the admin token",
            len(found),
            path,
            extra={"action": "serve_scoped_tokens"},
        )
    return store


def _announce_hosts(host: str, extra: list[str]) -> None:
    """Bound beyond loopback, say which ``Host`` names are answered: a client using another
    name (a DNS alias) gets 421 until it is added (docs/operate/security.md)."""
    from tracker_client.serve.browser import HostRule

    rule = HostRule.for_bind(host, extra)
    if rule.any_host or host in ("127.0.0.1", "localhost", "::1"):
        return
    log.info(
        "answering requests for Host %s and IP literals; add other names with --allowed-host"
        " or BACKLOG_WORKER_ALLOWED_HOSTS",
        ", ".join(sorted(rule.names)),
        extra={"action": "serve_allowed_hosts"},
    )


def _has_uvloop() -> bool:
    """uvloop runs the server where it is installed: measured with ``bench.remote``'s cycle, it
    halves the server's CPU per request against asyncio's own loop (the method:
    docs/operate/rails.md, on ``python -m bench.remote``)."""
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def _metrics_listen(value: str | None) -> tuple[str, int] | None:
    from worker.config.telemetry import parse_listen

    try:
        return None if value is None else parse_listen(value)
    except ValueError as exc:
        raise ConfigError(f"--metrics-listen: {exc}") from None


def _limits(
    max_connections: int | None, per_client: int | None, header_s: float, body_s: float
) -> ConnectionLimits:
    from tracker_client.serve.connections import ConnectionLimits, default_max_connections

    return ConnectionLimits(
        header_timeout_s=header_s,
        body_timeout_s=body_s,
        max_connections=max_connections or default_max_connections(),
        max_client_connections=per_client,
    )


def _check_url(url: str) -> None:
    if url.startswith(("postgresql://", "postgres://")):
        return  # a PostgreSQL rail, served to NullTickets-API clients
    if not (url.startswith("sqlite:") or url.startswith("/") or url.startswith(".")):
        raise ConfigError(
            f"--tracker {mask_url(url)!r}: tracker serve shares an embedded rail; give sqlite:///path.db"
            " (or a PostgreSQL rail, postgresql://host/db)"
        )


def _setup_logging(level: str, api_token: str | None, *, log_tasks: bool = False) -> None:
    """The server's log at ``level``; the tracker's per-task lines only with ``log_tasks`` or at
    DEBUG (:mod:`tracker_client.serve.tasklines` says why)."""
    from tracker_client.serve.tasklines import log_task_lines

    try:
        from worker.logs import configure_logging

        configure_logging(level.upper(), "auto", secrets=[api_token] if api_token else [])
    except (ImportError, ValueError) as exc:
        if isinstance(exc, ValueError):
            raise ConfigError(f"--log-level: {exc}") from exc
        logging.basicConfig(level=level.upper(), stream=sys.stderr)  # pragma: no cover
    log_task_lines(log_tasks or logging.getLogger("backlog_worker").isEnabledFor(logging.DEBUG))
