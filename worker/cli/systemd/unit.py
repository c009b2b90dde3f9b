"""``backlog-worker systemd-unit``: print systemd units for the current install.

The template ``backlog-worker@.service`` runs one worker per instance (the instance name is the
worker's name: its config file and its agent id); ``backlog-worker.target`` groups the enabled
instances; ``--tracker-serve`` prints ``backlog-tracker.service`` (:mod:`worker.cli.systemd.serve`).
``contrib/systemd/`` holds the same units rendered for ``/usr/local/bin`` (a test keeps them
identical to the renderers' output), so the CLI and the files never drift. The sandbox is fitted
to where the install and the ``--config`` files' paths are (:mod:`worker.cli.systemd.sandbox`):
a unit must work on the machine it is generated on, or say why it cannot.

It may touch the install's paths (the interpreter, the scripts on ``PATH``), the ``--config`` files
(through the sandbox) and stdout; it writes no file and never calls systemd.
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from worker.cli.systemd import STOP_MARGIN_S
from worker.cli.systemd.sandbox import (
    ConfiguredPath,
    Placement,
    UnitRefused,
    config_paths,
    hardening_lines,
    install_paths,
    note_lines,
    plan_placement,
    service_home,
)
from worker.cli.systemd.sandbox import escape as _escape
from worker.cli.systemd.sandbox import exec_arg as _arg
from worker.cli.systemd.serve import DEFAULT_RAIL, serve_unit

__all__ = [
    "CONTRIB_EXEC",
    "STOP_MARGIN_S",
    "UnitOptions",
    "placement_for",
    "register",
    "render_service",
    "render_target",
    "resolve_exec",
    "stop_timeout_s",
]

#: The executable path the units in ``contrib/systemd`` name (a system-wide pip install).
CONTRIB_EXEC: tuple[str, ...] = ("/usr/local/bin/backlog-worker",)
_INSTANCE = re.compile(r"[A-Za-z0-9_.:-]+")


def stop_timeout_s(shutdown_grace_s: float) -> int:
    """``TimeoutStopSec`` for a grace: the grace plus :data:`STOP_MARGIN_S`, whole seconds.

    The daemon also sends ``EXTEND_TIMEOUT_USEC`` while draining, so this is the floor that
    holds even if a notification is lost.
    """
    return math.ceil(shutdown_grace_s) + STOP_MARGIN_S


@dataclass(frozen=True)
class UnitOptions:
    """What varies between rendered units."""

    exec_start: Sequence[str] = CONTRIB_EXEC
    user_mode: bool = False
    config_dir: str | None = None
    instance: str | None = None
    service_user: str = "backlog-worker"
    shutdown_grace_s: float = 30.0
    watchdog_s: int = 30
    #: Paths the service must reach (the install, what the configs name): see
    #: :func:`worker.cli.systemd.sandbox.plan_placement`. Empty for the contrib units.
    paths: tuple[ConfiguredPath, ...] = ()
    allow_tmp: bool = False
    memory_deny_write_execute: bool = False

    @property
    def conf_dir(self) -> str:
        """The config directory as unit-file text: ``/etc/backlog-worker``, ``%E/...`` per user."""
        if self.config_dir:
            return _escape(self.config_dir.rstrip("/"))
        return "%E/backlog-worker" if self.user_mode else "/etc/backlog-worker"


def placement_for(opts: UnitOptions) -> Placement | None:
    """The sandbox fitted to ``opts.paths`` (None for a user unit, which has no mount
    namespace); raises :class:`UnitRefused` for a path under ``/tmp`` without ``allow_tmp``."""
    if opts.user_mode:
        return None
    return plan_placement(opts.paths, service_user=opts.service_user, allow_tmp=opts.allow_tmp)


def _exec_line(opts: UnitOptions, name: str) -> str:
    argv = [_arg(_escape(part)) for part in opts.exec_start]
    argv += ["run", "--config", _arg(f"{opts.conf_dir}/{name}.toml")]
    return " ".join(argv)


def render_service(opts: UnitOptions | None = None) -> str:
    """The service unit: the ``@`` template, or one concrete unit with ``opts.instance``."""
    o = opts or UnitOptions()
    if o.instance is not None and not _INSTANCE.fullmatch(o.instance):
        raise ValueError(
            f"instance name {o.instance!r}: use letters, digits, '_', '.', ':' and '-' only"
        )
    name = o.instance if o.instance is not None else "%i"
    placement = placement_for(o)
    private_tmp = placement is None or placement.private_tmp
    notes = note_lines(placement.warnings if placement is not None else ())
    unit = f"backlog-worker-{o.instance}.service" if o.instance else "backlog-worker@.service"
    conf = o.conf_dir
    state = "%S/backlog-worker"
    rail = f"{Path.home()}/.local/state" if o.user_mode else "/var/lib"
    grace = f"{o.shutdown_grace_s:g}"
    stop_s = stop_timeout_s(o.shutdown_grace_s)
    if o.user_mode:
        start_cmd = f"systemctl --user enable --now {unit if o.instance else 'backlog-worker@1'}"
    else:
        start_cmd = f"systemctl enable --now {unit if o.instance else 'backlog-worker@{1..4}'}"
    lines = [
        f"# {unit}: backlog-worker, one worker per {'unit' if o.instance else 'instance'}.",
        "#",
        f"#   config         {conf}/{name}.toml (one file per instance)",
        f"#   embedded rail  {rail}/backlog-worker/rail.db (StateDirectory), shared by every",
        f'#                  instance: [tracker] url = "sqlite://{rail}/backlog-worker/rail.db"',
        f"#   api token      {conf}/api-token -> $CREDENTIALS_DIRECTORY/api-token, set",
        '#                  [tracker] api_token_file = "api-token" (remote trackers only)',
        f"#   start          {start_cmd}",
        "#   stop           SIGTERM: stop claiming, drain in-flight tasks for shutdown_grace_s",
        f"#                  ({grace} s here) with heartbeats, then cancel and report; a second",
        "#                  SIGTERM skips the grace. TimeoutStopSec = grace + "
        f"{STOP_MARGIN_S} s, and the",
        "#                  worker sends EXTEND_TIMEOUT_USEC while it drains.",
        "#   reload         systemctl reload: SIGHUP, re-reads the config for new claims;",
        "#                  in-flight tasks keep running.",
        *notes,
        "",
        "[Unit]",
        f"Description=backlog-worker {name}",
        "After=network-online.target",
        "Wants=network-online.target",
        *(() if o.instance else ("PartOf=backlog-worker.target",)),
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "# READY=1 comes after the tracker answered and every executor passed its readiness",
        "# check; WATCHDOG=1 only while the claim loop makes progress and no tracker call is",
        "# stuck past its budget, so a wedged worker is restarted.",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={_exec_line(o, name)}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"Environment=BACKLOG_WORKER_INSTANCE={name}",
        "Environment=PYTHONUNBUFFERED=1",
        "# The same journal tag whether ExecStart is the script or python -m worker.",
        "SyslogIdentifier=backlog-worker",
        f"WorkingDirectory={state}",
        "TimeoutStartSec=120",
        f"WatchdogSec={o.watchdog_s}",
        "Restart=on-failure",
        "RestartSec=5",
        "# SIGTERM to the worker only: it drains, then stops its executors' process groups",
        "# itself; whatever is left at TimeoutStopSec gets SIGKILL. If the worker dies",
        "# (crash, OOM, kill -9), its executor guard SIGKILLs the executors' sessions, and",
        "# once the main process has exited systemd SIGKILLs the rest of the cgroup (a",
        "# setsid descendant of an executor, which escapes the guard, included).",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        f"TimeoutStopSec={stop_s}",
    ]
    if not o.user_mode:
        lines += [
            "# A fixed user (not DynamicUser=): all instances share the state directory.",
            f"User={o.service_user}",
            f"Group={o.service_user}",
        ]
    lines += [
        "StateDirectory=backlog-worker" + ("" if private_tmp else " backlog-worker/tmp"),
        "StateDirectoryMode=0750",
        "# The token file stays root-only; the worker reads its private copy. SetCredential=",
        "# is the fallback (a blank token) when the file is absent: embedded-only setups.",
        f"LoadCredential=api-token:{conf}/api-token",
        "SetCredential=api-token:\\n",
    ]
    if o.user_mode:
        lines += ["# Mount sandboxing (ProtectSystem=...) needs a system unit in user mode."]
    lines += hardening_lines(placement, memory_deny_write_execute=o.memory_deny_write_execute)
    wanted = "default.target" if o.user_mode else "multi-user.target"
    lines += [
        "",
        "[Install]",
        f"WantedBy={wanted}" if o.instance else f"WantedBy={wanted} backlog-worker.target",
    ]
    return "\n".join(lines) + "\n"


def render_target(*, user_mode: bool = False) -> str:
    """``backlog-worker.target``: start, stop and restart every enabled instance together."""
    wanted = "default.target" if user_mode else "multi-user.target"
    ctl = "systemctl --user" if user_mode else "systemctl"
    lines = [
        "# backlog-worker.target: every enabled backlog-worker@ instance.",
        "#",
        f"#   {ctl} enable --now backlog-worker@{{1..4}}   adds instances to this target",
        f"#   {ctl} restart backlog-worker.target        restarts them all (PartOf=)",
        f"#   {ctl} stop backlog-worker.target           drains and stops them all",
        "",
        "[Unit]",
        "Description=backlog-worker instances",
        "",
        "[Install]",
        f"WantedBy={wanted}",
    ]
    return "\n".join(lines) + "\n"


def resolve_exec() -> tuple[str, ...]:
    """The command that starts this install: its ``backlog-worker`` script, else ``-m worker``.

    The script next to the running interpreter wins (a virtualenv's ``bin/``), then the one
    on ``PATH``; both are resolved to absolute paths, as systemd needs.
    """
    interpreter = Path(sys.executable)
    beside = interpreter.parent / "backlog-worker"
    if beside.is_file():
        return (str(beside.absolute()),)
    found = shutil.which("backlog-worker")
    if found:
        return (str(Path(found).resolve()),)
    return (str(interpreter.absolute()), "-m", "worker")


@click.command("systemd-unit")
@click.option("--user", "user_mode", is_flag=True, help="A unit for the per-user manager.")
@click.option(
    "--config-dir",
    help="Directory of the per-instance <name>.toml files and the api-token file "
    "(default /etc/backlog-worker, or %E/backlog-worker with --user).",
)
@click.option(
    "--instance",
    help="Print a concrete unit for this one instance instead of the @ template.",
)
@click.option("--target", "target", is_flag=True, help="Print backlog-worker.target instead.")
@click.option(
    "--tracker-serve",
    "tracker_serve",
    is_flag=True,
    help="Print backlog-tracker.service (tracker serve, token by LoadCredential) instead.",
)
@click.option(
    "--config",
    "configs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A worker config the unit must serve (repeatable): its rail directory, workdir and "
    "executor directories become ReadWritePaths=, and paths hidden by the sandbox are "
    "handled as for the install.",
)
@click.option(
    "--allow-tmp",
    is_flag=True,
    help="Render even though the install or a configured path is under /tmp or /var/tmp "
    "(drops PrivateTmp; the unit breaks when /tmp is cleared).",
)
@click.option(
    "--memory-deny-write-execute",
    is_flag=True,
    help="Add MemoryDenyWriteExecute=yes: fine for Python executors, fatal for JIT "
    "runtimes (node, a JVM) that command executors start.",
)
@click.option("--rail", default=DEFAULT_RAIL, show_default=True, help="--tracker-serve: the rail.")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="--tracker-serve: bind address."
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=7700,
    show_default=True,
    help="--tracker-serve: port.",
)
@click.option(
    "--service-user",
    default="backlog-worker",
    show_default=True,
    help="User= and Group= of system units.",
)
@click.option(
    "--shutdown-grace-s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="The workers' shutdown_grace_s; TimeoutStopSec is this plus 30 s.",
)
@click.option(
    "--watchdog-s",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="WatchdogSec (0 disables the watchdog).",
)
def systemd_unit_command(
    user_mode: bool,
    config_dir: str | None,
    instance: str | None,
    target: bool,
    tracker_serve: bool,
    configs: tuple[Path, ...],
    allow_tmp: bool,
    memory_deny_write_execute: bool,
    rail: str,
    host: str,
    port: int,
    service_user: str,
    shutdown_grace_s: float,
    watchdog_s: int,
) -> None:
    """Print a systemd unit for this install (paths resolved) to stdout.

    The sandbox is fitted to where this install and the --config files' paths are: under a
    home directory, ProtectHome=read-only (with a warning); under /tmp, a refusal unless
    --allow-tmp; written paths outside the state directory, ReadWritePaths=. Warnings go to
    stderr and into the unit as NOTE comments.

    \b
    System-wide, four workers on one embedded rail:
      backlog-worker systemd-unit > /etc/systemd/system/backlog-worker@.service
      backlog-worker systemd-unit --target > /etc/systemd/system/backlog-worker.target
      systemctl daemon-reload && systemctl enable --now backlog-worker@{1..4}
    \b
    The rail over HTTP (loopback; TLS by a reverse proxy):
      backlog-worker systemd-unit --tracker-serve > /etc/systemd/system/backlog-tracker.service
    """
    if target:
        click.echo(render_target(user_mode=user_mode), nl=False)
        return
    if config_dir is not None and not config_dir.startswith("/"):
        raise click.BadParameter(
            f"{config_dir!r} is not an absolute path (systemd needs one)", param_hint="--config-dir"
        )
    if service_user and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", service_user):
        raise click.BadParameter(
            f"{service_user!r} is not a user name", param_hint="--service-user"
        )
    if tracker_serve and (user_mode or instance is not None):
        raise click.UsageError(
            "--tracker-serve prints one system unit (the workers' user and state directory):"
            " drop --user and --instance"
        )
    exec_start = resolve_exec()
    paths = install_paths(exec_start) + ([] if user_mode else service_home(service_user))
    for config in configs:
        try:
            paths += config_paths(config)
        except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
            raise click.BadParameter(f"{config}: {exc}", param_hint="--config") from None
    try:
        if tracker_serve:
            text, warnings = serve_unit(
                exec_start, paths, rail, host, port, config_dir, service_user, allow_tmp
            )
        else:
            opts = UnitOptions(
                exec_start=exec_start,
                user_mode=user_mode,
                config_dir=config_dir,
                instance=instance,
                service_user=service_user,
                shutdown_grace_s=shutdown_grace_s,
                watchdog_s=watchdog_s,
                paths=tuple(paths),
                allow_tmp=allow_tmp,
                memory_deny_write_execute=memory_deny_write_execute,
            )
            placement = placement_for(opts)
            text = render_service(opts)
            warnings = list(placement.warnings) if placement is not None else []
    except UnitRefused as exc:
        click.echo(f"error: {exc}", err=True)  # one line, as every command's refusal
        sys.exit(2)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--instance") from None
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(text, nl=False)


def register(group: click.Group) -> None:
    """Add ``systemd-unit`` to the ``backlog-worker`` command group."""
    group.add_command(systemd_unit_command)
