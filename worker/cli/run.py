"""``backlog-worker run`` and ``backlog-worker check``.

``run`` is the daemon: it loads the configuration, opens the tracker, builds every role's
executor, installs signal handling (TERM/INT: staged shutdown, a second one skips the grace;
HUP: reload the configuration for new claims) and runs a :class:`~worker.daemon.Worker`.
``check`` validates the same things without claiming anything and exits non-zero on a problem.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import click

from plugins.api import SupportsReadiness
from tracker_client.errors import (
    BacklogWorkerError,
    ConfigError,
    ExecutorError,
    TrackerError,
    TrackerUnavailable,
)
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker
from worker.cli.check_report import CheckReport
from worker.cli.errors import NO_TOKEN, describe, exit_code_for
from worker.cli.systemd.unit import STOP_MARGIN_S
from worker.cli.token import token_options, token_overrides
from worker.config import Config, load_config
from worker.config_secrets import release_secret_env
from worker.daemon import Role, Worker, WorkerState
from worker.reload import plan_reload
from worker.sdnotify import Notifier, Watchdog, format_status, report_status
from worker.triggers import trigger_problems
from worker.workdirs import check_workdir_base

__all__ = ["build_roles", "register", "select_roles"]

log = logging.getLogger("backlog_worker.cli")

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_TRACKER = 0, 1, 2, 3

#: After a second TERM/INT the process is gone within this long, even if a final report or a
#: call is still hung at the tracker (its lease then expires on its own).
FORCED_EXIT_S = 0.9


def select_roles(config: Config, names: Sequence[str]) -> Config:
    """Keep only the roles named (all when ``names`` is empty); unknown names are a ConfigError."""
    if not config.roles:
        where = f" in {config.source}" if config.source else ""
        raise ConfigError(f"no [[roles]] configured{where}: a worker needs at least one role")
    if not names:
        return config
    known = {r.name for r in config.roles}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--role {unknown[0]!r} is not configured "
            f"(configured roles: {', '.join(sorted(known))})"
        )
    roles = tuple(r for r in config.roles if r.name in names)
    return Config(
        tracker=config.tracker,
        worker=config.worker,
        roles=roles,
        source=config.source,
        log_level=config.log_level,
        log_format=config.log_format,
    )


def build_roles(config: Config) -> list[Role]:
    """Load each role's executor through the plugin registry (``ExecutorError`` names it)."""
    from plugins.registry import load_executor

    return [Role(config=r, executor=load_executor(r.executor, r.options)) for r in config.roles]


def _load(config_path: Path | None, overrides: dict[str, Any], roles: Sequence[str]) -> Config:
    return select_roles(load_config(config_path, **overrides), roles)


def _setup_logging(config: Config) -> None:
    try:
        from worker.logs import configure_logging
    except ImportError:  # pragma: no cover - before the logging module exists
        logging.basicConfig(level=config.log_level, stream=sys.stderr)
        return
    configure_logging(
        config.log_level,
        config.log_format,
        secrets=[t for t in [config.tracker.api_token] if t],
        worker=True,
    )


async def _open(config: Config) -> Tracker:
    options = dict(config.tracker.options)
    if config.tracker.url.lower().startswith(("http://", "https://")):
        # The worker retries transient errors itself (bounded by the lease); the client's own
        # retries would multiply that budget, so it tries once unless the config says otherwise.
        options.setdefault("timeout_s", config.tracker.request_timeout_s)
        options.setdefault("retry_attempts", 1)
    # create=False: a worker never starts a rail (a typo'd path would be an empty new one).
    return await open_tracker(
        config.tracker.url, api_token=config.tracker.api_token, create=False, **options
    )


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


async def _watch_signals(
    worker: Worker, reload: Callable[[], None], task_status: anyio.abc.TaskStatus[None]
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async with anyio.create_task_group() as tg:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    reload()
                    continue
                immediate = worker.stopping or worker.state in (
                    WorkerState.DRAINING,
                    WorkerState.STOPPED,
                )
                log.warning(
                    "received %s: %s",
                    signal.Signals(signum).name,
                    "stopping now (grace skipped)" if immediate else "draining",
                    extra={"action": "signal"},
                )
                worker.stop(immediate=immediate)
                if immediate:
                    tg.start_soon(_exit_if_still_running, worker)


async def _exit_if_still_running(worker: Worker) -> None:
    """After a second signal: the worker has :data:`FORCED_EXIT_S` to stop by itself; a call
    still hung at the tracker (a final report under its shield) does not hold the process."""
    await anyio.sleep(FORCED_EXIT_S)
    log.error(
        "still stopping after a second signal: exiting now; %d run(s) left unreported, their "
        "leases expire on their own",
        worker.stats.in_flight,
        extra={"action": "forced_exit"},
    )
    logging.shutdown()
    os._exit(EXIT_FAILURE)


class _Probe:
    """The watchdog's probe: the worker's progress (with the reason when there is none)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def __call__(self) -> bool:
        return self._worker.healthy()

    def problem(self) -> str | None:
        """Why there is no progress (read by the watchdog's log line)."""
        return self._worker.progress_problem()


async def _readiness(roles: Sequence[Role]) -> list[str]:
    """Every role's executor readiness problems, one line each (empty: ready)."""
    problems: list[str] = []
    for role in roles:
        if not isinstance(role.executor, SupportsReadiness):
            continue
        try:
            issues = await role.executor.readiness()
        except Exception as exc:
            issues = [f"readiness check crashed: {type(exc).__name__}: {exc}"]
        problems.extend(f"role {role.name} ({role.config.executor}): {p}" for p in issues)
    return problems


async def _run(config_path: Path | None, overrides: dict[str, Any], roles: Sequence[str]) -> int:
    # Taken (and removed from the environment) before any child process can inherit it.
    notifier = Notifier.from_env(unset_environment=True)
    config = _load(config_path, overrides, roles)
    built = build_roles(config)
    problems = await _readiness(built)
    if problems:
        raise ExecutorError("executors not ready:\n  " + "\n  ".join(problems))
    tracker = await _open(config)
    drain_deadline = 0.0
    worker: Worker

    def status() -> str:
        s = worker.stats
        return format_status(
            state=worker.state.value,
            busy=s.in_flight,
            slots=config.worker.concurrency,
            done=s.transitioned,
            failed=s.failed,
            last_error=s.last_error,
        )

    def on_state(state: WorkerState) -> None:
        nonlocal drain_deadline
        if state is WorkerState.RUNNING:  # the tracker answered; executors were ready
            notifier.ready(status=status())
        elif state is WorkerState.DRAINING:
            drain_deadline = time.monotonic() + config.worker.shutdown_grace_s
            notifier.stopping(status=status())

    def extend() -> float | None:
        # While draining within the grace, keep systemd from killing us mid-report.
        if worker.state is not WorkerState.DRAINING:
            return None
        return max(0.0, drain_deadline - time.monotonic()) + STOP_MARGIN_S

    def reload() -> None:
        nonlocal config
        notifier.reloading()
        try:
            # Roles and most [worker] keys apply to new claims; the rest is named (worker.reload).
            applied, _ = plan_reload(config, _load(config_path, overrides, roles))
            built = build_roles(applied)
            worker.set_config(applied.worker)
            worker.set_roles(built)
            config = applied
        except BacklogWorkerError as exc:
            log.error("reload refused: %s", exc, extra={"action": "reload_failed"})
            return
        finally:
            notifier.ready(status=status())
        log.info(
            "configuration reloaded: roles %s, %d slots",
            ", ".join(r.name for r in worker.roles),
            config.worker.concurrency,
            extra={"action": "reloaded"},
        )

    try:
        worker = Worker(
            tracker, config.worker, built, tracker_config=config.tracker, on_state=on_state
        )
        with notifier:
            async with anyio.create_task_group() as tg:
                await tg.start(_watch_signals, worker, reload)
                await tg.start(Watchdog(notifier).run, _Probe(worker))
                await tg.start(partial(report_status, notifier, status, extend_timeout=extend))
                await worker.run()
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await tracker.aclose()
    if worker.error is not None:
        raise worker.error  # the worker gave up (refused token; a drain that could not claim)
    return EXIT_OK


def _overrides(**flags: Any) -> dict[str, Any]:
    return {k: v for k, v in flags.items() if v is not None}


_config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="BACKLOG_WORKER_CONFIG",
    help="TOML configuration file (env BACKLOG_WORKER_CONFIG).",
)
_tracker_option = click.option(
    "--tracker", help="Tracker URL: sqlite:///path.db or http://host:port."
)
_role_option = click.option(
    "--role", "roles", multiple=True, help="Serve only this configured role (repeatable)."
)


@click.command("run")
@_config_option
@_tracker_option
@_role_option
@click.option("--concurrency", type=int, help="Slots: tasks run at once.")
@click.option("--agent-id", help="Agent id used for claims (default: host + instance/pid).")
@click.option("--drain", is_flag=True, default=None, help="Exit once the queue is empty.")
@click.option("--max-tasks", type=int, help="Exit after claiming this many tasks.")
@click.option("--log-level", help="DEBUG, INFO, WARNING, ERROR.")
@click.option("--log-format", type=click.Choice(["auto", "rich", "plain", "journal", "json"]))
@token_options
def run_command(
    config_path: Path | None,
    tracker: str | None,
    roles: tuple[str, ...],
    concurrency: int | None,
    agent_id: str | None,
    drain: bool | None,
    max_tasks: int | None,
    log_level: str | None,
    log_format: str | None,
) -> None:
    """Run a worker: claim, execute, report, until stopped (TERM/INT drain; HUP reloads)."""
    overrides = _overrides(
        **{
            "tracker.url": tracker,
            "worker.concurrency": concurrency,
            "worker.agent_id": agent_id,
            "worker.drain": drain,
            "worker.max_tasks": max_tasks,
            "log_level": log_level,
            "log_format": log_format,
        },
        **token_overrides(),
    )
    url: str | None = None
    token_source: str | None = None
    try:
        config = _load(config_path, overrides, roles)
        release_secret_env()  # before any child exists: /proc/<pid>/environ no longer has it
        url = config.tracker.url
        token_source = config.tracker.api_token_source or NO_TOKEN
        _setup_logging(config)
        code = anyio.run(_run, config_path, overrides, roles)
    except (ConfigError, ExecutorError) as exc:
        _fail(str(exc), EXIT_CONFIG)
    except TrackerError as exc:
        _fail(describe(exc, url, token_source), exit_code_for(exc))
    sys.exit(code)


async def _check(config: Config, report: CheckReport) -> None:
    url = config.tracker.url
    token_source = config.tracker.api_token_source or NO_TOKEN
    for level, text in check_workdir_base(config.worker.workdir):  # writable, and ours
        report.add("workdir", level, text)
    try:
        built = build_roles(config)
    except ExecutorError as exc:
        report.add("executors", "fail", str(exc), line=f"executor: {exc}")
        return
    try:
        tracker = await _open(config)
    except TrackerError as exc:
        report.add("tracker", "fail", describe(exc, url), line=f"tracker {url}: {exc}")
        return
    check = "tracker"
    try:
        with anyio.fail_after(config.tracker.request_timeout_s * 2):
            health = await tracker.health()
        detail = f"tracker {url} answered (version {health.version})"
        report.add("tracker", "ok", detail)
        # /health needs no token: an authenticated read proves the api token works.
        check = "api_token"
        with anyio.fail_after(config.tracker.request_timeout_s * 2):
            pipelines = await tracker.list_pipelines()
        detail = f"tracker accepted the api token ({len(pipelines)} pipeline(s))"
        report.add("api_token", "ok", detail)
        ceiling = getattr(tracker, "max_lease_ttl_ms", None)
        for role in config.roles:
            ttl = role.lease_ttl_s or config.worker.lease_ttl_s
            if isinstance(ceiling, int) and ttl * 1000 > ceiling:
                detail = (
                    f"role {role.name}: lease_ttl_s {ttl:g} exceeds the tracker's "
                    f"{ceiling / 1000:g}s heartbeat reset; it will be clamped"
                )
                report.add(f"lease_ttl:{role.name}", "warn", detail)
        for problem in trigger_problems(config.roles, pipelines):
            report.add("triggers", "warn", problem)
    except (TrackerUnavailable, TimeoutError) as exc:
        report.add(check, "fail", f"tracker {url} unreachable: {exc}")
    except TrackerError as exc:
        report.add(check, "fail", f"tracker {url}: {describe(exc, url, token_source)}")
    finally:
        await tracker.aclose()
    for built_role in built:
        issues = await _readiness([built_role])
        for issue in issues:
            report.add(f"role:{built_role.name}", "fail", issue)
        if not issues:
            detail = f"role {built_role.name}: executor {built_role.config.executor} ready"
            report.add(f"role:{built_role.name}", "ok", detail)


@click.command("check")
@_config_option
@_tracker_option
@_role_option
@token_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object on stdout: {"ok": ..., "checks": [{"name", "ok", "level", "detail"}]}.',
)
def check_command(
    config_path: Path | None, tracker: str | None, roles: tuple[str, ...], as_json: bool
) -> None:
    """Validate the configuration, reach the tracker and check every executor's readiness."""
    report = CheckReport(as_json=as_json)

    def refuse(exc: ConfigError) -> None:
        if not as_json:
            _fail(str(exc), EXIT_CONFIG)
        report.add("configuration", "fail", str(exc))
        report.finish()
        sys.exit(EXIT_CONFIG)

    try:
        config = _load(
            config_path, _overrides(**{"tracker.url": tracker}, **token_overrides()), roles
        )
    except ConfigError as exc:
        refuse(exc)
    report.add(
        "configuration", "ok", f"configuration{f' {config.source}' if config.source else ''}"
    )
    try:
        anyio.run(_check, config, report)
    except ConfigError as exc:  # no rail at the path: the same error and exit code as `run`
        refuse(exc)
    report.finish()
    sys.exit(EXIT_FAILURE if report.failed else EXIT_OK)


def register(group: click.Group) -> None:
    """Add ``run`` and ``check`` to the CLI."""
    group.add_command(run_command)
    group.add_command(check_command)
