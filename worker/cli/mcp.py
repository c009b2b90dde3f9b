"""``backlog-worker mcp``: the rail's MCP server, on stdio or streamable HTTP (docs/submit/mcp.md).

It opens the rail ``--tracker`` names (with ``--token``/``--token-file`` as every operator
command does) through the producer API and serves the tools of :mod:`tracker_client.mcp.tools`:
on stdio by default (an MCP client starts it as a subprocess), or with ``--http HOST:PORT``
over streamable HTTP at ``/mcp``, where every request needs a bearer token: the one in
``--http-token-file``, else the token the server itself acts with (so a client presents the
same admin or scoped token the served rail would take). Without a token it refuses to serve
HTTP, on any address. ``--task ID`` binds it to a task (its submissions become subtasks).

Needs the ``mcp`` extra; without it the command says which to install and exits 2. It may touch
the rail, stdin/stdout (the protocol, stdio mode), the listening socket and stderr.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import click

from worker.cli.token import token_options

__all__ = ["register"]

_HTTP = re.compile(r"^(?:(\[[0-9A-Fa-f:.]+\]|[^:\s]+):)?(\d{1,5})$")
#: Where ``--task`` is read from when not given (the nullclaw executor's config sets it).
TASK_ENV = "BACKLOG_MCP_TASK"  # not BACKLOG_WORKER_*: the settings refuse unknown ones


def _parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``PORT``: 127.0.0.1) -> (host, port); ConfigError naming it."""
    from tracker_client.errors import ConfigError

    found = _HTTP.match(value.strip())
    port = int(found.group(2)) if found else -1
    if found is None or port > 65535:
        raise ConfigError(
            f"--http {value!r}: give HOST:PORT (e.g. 127.0.0.1:8765) or a port (0-65535)"
        )
    return (found.group(1) or "127.0.0.1").strip("[]"), port


def _read_token_file(path: Path) -> str:
    from tracker_client.errors import ConfigError

    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"--http-token-file {path}: {exc.strerror or exc}") from exc
    if not value:
        raise ConfigError(f"--http-token-file {path}: the file is empty")
    return value


def _serve(
    tracker_url: str | None,
    config_path: Path | None,
    task_id: str | None,
    http: str | None,
    http_token_file: Path | None,
) -> None:
    import anyio

    from tracker_client.errors import BacklogWorkerError, ConfigError
    from tracker_client.extras import require
    from tracker_client.factory import require_rail
    from worker.cli.errors import NO_TOKEN, fail
    from worker.cli.ops.common import resolve_tracker, unwrap_groups

    url: str | None = None
    token_source: str | None = None
    try:
        require("mcp", "backlog-worker mcp")
        target = resolve_tracker(tracker_url, config_path)
        url, token_source = target.url, target.token_source or NO_TOKEN
        require_rail(url)
        address = None
        if http is not None:
            address = _parse_http(http)
            http_token = (
                _read_token_file(http_token_file)
                if http_token_file is not None
                else target.api_token
            )
            if http_token is None:
                raise ConfigError(
                    "--http needs a bearer token for its clients: --http-token-file FILE, or "
                    "the rail's own token (--token-file); it never serves without one"
                )
        elif http_token_file is not None:
            raise ConfigError("--http-token-file is for --http HOST:PORT only")

        async def main() -> None:
            from tracker_client.mcp.http import bind, serve_http, url_of
            from tracker_client.mcp.tools import build_server
            from tracker_client.producer import connect

            async with connect(target.url, token=target.api_token, **target.options) as rail:
                if task_id is not None:
                    await rail.task(task_id)  # an unknown task is an error now, not per call
                server = build_server(rail, task_id=task_id)
                if address is None:
                    await server.run_stdio_async()
                    return
                sock = bind(*address)
                with sock:
                    click.echo(f"MCP server listening on {url_of(sock)}", err=True)
                    assert http_token is not None
                    await serve_http(server, sock, http_token)

        unwrap_groups(anyio.run, main)
    except BacklogWorkerError as exc:
        raise fail(exc, url, token_source) from None
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None


def register(group: click.Group) -> None:
    """Add ``mcp`` to the command line."""

    @group.command("mcp", short_help="Serve the rail's MCP tools (stdio or HTTP).")
    @click.option(
        "--tracker",
        "tracker_url",
        default=None,
        metavar="URL",
        help="The rail: sqlite:///path.db, http(s)://host:port or postgresql://... Default:"
        " $BACKLOG_WORKER_TRACKER_URL, else the config's [tracker] url.",
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
    @click.option(
        "--task",
        "task_id",
        default=None,
        metavar="ID",
        help=f"Bind to this task: tasks submitted become its subtasks, store writes carry its"
        f" id. Default: ${TASK_ENV}.",
    )
    @click.option(
        "--http",
        default=None,
        metavar="HOST:PORT",
        help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST defaults"
        " to 127.0.0.1; port 0 picks a free one). Every request needs the bearer token.",
    )
    @click.option(
        "--http-token-file",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="The bearer token HTTP clients must send. Default: the rail's token"
        " (--token-file); with neither, --http refuses to start.",
    )
    def mcp_command(
        tracker_url: str | None,
        config_path: Path | None,
        task_id: str | None,
        http: str | None,
        http_token_file: Path | None,
    ) -> None:
        """Serve the rail's tools to MCP clients (agents): submit a task by pipeline name,
        wait for it, read its status, result and artifacts, cancel it, list a pipeline's
        tasks, search and write the shared store, act on a human step; resources for the
        pipelines and the queue. Acts with the token it is given: a scoped producer token
        limits it to its pipelines. Needs the mcp extra: pip install 'backlog-worker[mcp]'."""
        task = task_id if task_id is not None else (os.environ.get(TASK_ENV) or None)
        _serve(tracker_url, config_path, task, http, http_token_file)
