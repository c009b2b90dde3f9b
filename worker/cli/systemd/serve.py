"""``backlog-tracker.service``: ``backlog-worker tracker serve`` as a system service.

It serves the workers' embedded rail (the same ``StateDirectory``, the same ``User=``) over
plain HTTP on a loopback address by default; TLS belongs to a reverse proxy in front of it
(docs/operate/systemd.md has the proxy's configuration). The admin token comes through
``LoadCredential=`` and ``--token-file %d/api-token``, so it is never on the command line, in
the environment or in the unit. Nothing here runs
executors, so the sandbox is the workers' plus ``MemoryDenyWriteExecute=yes`` (tested: the
server runs with the kernel's write-xor-execute lock, ``tests/systemd/test_unit_mdwe.py``).

It renders text only: it may touch the shared sandbox (:mod:`worker.cli.systemd.sandbox`) and
nothing on the machine.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import click

from worker.cli.systemd.sandbox import (
    ConfiguredPath,
    Placement,
    escape,
    exec_arg,
    hardening_lines,
    note_lines,
    plan_placement,
    rail_dir,
)

__all__ = [
    "DEFAULT_RAIL",
    "ServeOptions",
    "is_loopback",
    "render_tracker_service",
    "serve_unit",
]

#: The rail the worker units share (their ``StateDirectory``).
DEFAULT_RAIL = "sqlite:///var/lib/backlog-worker/rail.db"


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServeOptions:
    """What varies in the rendered ``backlog-tracker.service``."""

    exec_start: Sequence[str]
    rail: str = DEFAULT_RAIL
    host: str = "127.0.0.1"
    port: int = 7700
    config_dir: str = "/etc/backlog-worker"
    service_user: str = "backlog-worker"


def render_tracker_service(
    opts: ServeOptions, placement: Placement | None = None, notes: Sequence[str] = ()
) -> str:
    """The unit text; ``placement`` fits the sandbox to the install and the rail's directory
    (the default: the rail in the state directory, the install outside /home and /tmp, as in
    ``contrib/systemd/backlog-tracker.service``)."""
    placement = placement or Placement()
    conf = escape(opts.config_dir.rstrip("/"))
    argv = [exec_arg(escape(part)) for part in opts.exec_start]
    argv += ["tracker", "serve", "--tracker", exec_arg(escape(opts.rail))]
    argv += ["--host", exec_arg(escape(opts.host)), "--port", str(opts.port)]
    argv += ["--token-file", "%d/api-token"]
    url_host = f"[{opts.host}]" if ":" in opts.host else opts.host
    if is_loopback(opts.host):
        reach = (
            "loopback only: remote workers come through a TLS reverse proxy "
            "(docs/operate/systemd.md)"
        )
    else:
        reach = "NOT loopback: plain HTTP on the network; prefer loopback behind a TLS proxy"
    lines = [
        "# backlog-tracker.service: the embedded rail over the NullTickets HTTP API.",
        "#",
        f"#   rail       {opts.rail}",
        "#              (create it first: the server never starts a rail)",
        f"#   listen     http://{url_host}:{opts.port}",
        f"#              {reach}",
        f"#   api token  {conf}/api-token -> %d/api-token (required: without the file",
        "#              the unit does not start); remote workers send the same token",
        "#   start      systemctl enable --now backlog-tracker",
        *notes,
        "",
        "[Unit]",
        "Description=backlog-worker tracker serve",
        "After=network-online.target" if not is_loopback(opts.host) else "After=network.target",
        *(() if is_loopback(opts.host) else ("Wants=network-online.target",)),
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=exec",
        f"ExecStart={' '.join(argv)}",
        "Environment=PYTHONUNBUFFERED=1",
        "SyslogIdentifier=backlog-tracker",
        "WorkingDirectory=%S/backlog-worker",
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=30",
        "# The workers' user and state directory: the rail file is theirs (mode 0600).",
        f"User={opts.service_user}",
        f"Group={opts.service_user}",
        "StateDirectory=backlog-worker" + ("" if placement.private_tmp else " backlog-worker/tmp"),
        "StateDirectoryMode=0750",
        "# The token file stays root-only; the server reads its private copy.",
        f"LoadCredential=api-token:{conf}/api-token",
        *hardening_lines(placement, memory_deny_write_execute=True, executors=False),
        *(
            (
                "# Loopback only: the reverse proxy on this host is the only peer.",
                "IPAddressAllow=localhost",
                "IPAddressDeny=any",
            )
            if is_loopback(opts.host)
            else ()
        ),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def serve_unit(
    exec_start: Sequence[str],
    paths: list[ConfiguredPath],
    rail: str,
    host: str,
    port: int,
    config_dir: str | None,
    service_user: str,
    allow_tmp: bool,
) -> tuple[str, list[str]]:
    """``backlog-tracker.service`` text and its warnings (see :mod:`worker.cli.systemd.serve`)."""
    if not (rail.startswith("sqlite:") or rail.startswith("/")):
        raise click.BadParameter(
            f"{rail!r} is not an embedded rail (sqlite:///path.db)", param_hint="--rail"
        )
    directory = rail_dir(rail)
    if directory is None:
        raise click.BadParameter(f"{rail!r}: give the rail by absolute path", param_hint="--rail")
    paths = [*paths, ConfiguredPath("--rail (the rail's directory)", directory, writable=True)]
    placement = plan_placement(paths, service_user=service_user, allow_tmp=allow_tmp)
    warnings = list(placement.warnings)
    if not is_loopback(host):
        warnings.append(
            f"--host {host} is not a loopback address: the server speaks plain HTTP, so tokens"
            " cross the network in clear; bind 127.0.0.1 and put a TLS reverse proxy in front"
            " (docs/operate/systemd.md)"
        )
    opts = ServeOptions(
        exec_start=exec_start,
        rail=rail,
        host=host,
        port=port,
        config_dir=config_dir or "/etc/backlog-worker",
        service_user=service_user,
    )
    return render_tracker_service(opts, placement, note_lines(warnings)), warnings
