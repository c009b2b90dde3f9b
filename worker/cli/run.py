"""``backlog-worker run``: the daemon, wired to signals and systemd.

It loads the configuration, opens the tracker, builds every role's executor, installs signal
handling (TERM/INT: staged shutdown, a second one skips the grace; HUP: reload the
configuration for new claims), tells systemd (ready, status, watchdog) and runs a
:class:`~worker.daemon.Worker`. ``check`` (:mod:`worker.cli.check`) validates the same things
without claiming anything, and registers itself (``run`` does not import it).

It may touch everything a running worker needs: the configuration (and the release of its secrets),
the executors and the tracker (through :mod:`worker.cli.prepare`), signals, systemd
(:mod:`worker.sdnotify`) and logging; what the worker does is :class:`~worker.daemon.Worker`'s.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import click

from tracker_client.errors import (
    BacklogWorkerError,
    ConfigError,
    ExecutorError,
    TrackerError,
)
from tracker_client.sweeps import SweepCounts
from worker.cli.errors import NO_TOKEN, describe, exit_code_for
from worker.cli.gc_tuning import BusyGc, freeze_for_exit
from worker.cli.prepare import (
    EXIT_CONFIG,
    EXIT_FAILURE,
    EXIT_OK,
    build_roles,
    config_option,
    fail,
    load_selected,
    open_for_worker,
    overrides_of,
    readiness,
    role_option,
    select_roles,
    tracker_option,
)
from worker.cli.systemd import STOP_MARGIN_S
from worker.cli.token import token_options, token_overrides
from worker.config.models import Config
from worker.config.secrets import release_secret_env
from worker.daemon import Worker, WorkerState
from worker.sdnotify import Notifier, Watchdog, format_status, report_status
from worker.telemetry.setup import build as build_telemetry

__all__ = ["build_roles", "register", "select_roles", "uvloop_wanted"]

log = logging.getLogger("backlog_worker.cli")

#: After a second TERM/INT the process is gone within this long, even if a final report or a
#: call is still hung at the tracker (its lease then expires on its own).
FORCED_EXIT_S = 0.9


def _setup_logging(config: Config) -> None:
    try:
        from worker.logs import configure_logging, omit_call_sites
    except ImportError:  # pragma: no cover - before the logging module exists
        logging.basicConfig(level=config.log_level, stream=sys.stderr)
        return
    configure_logging(
        config.log_level,
        config.log_format,
        secrets=[t for t in [config.tracker.api_token] if t],
        worker=True,
    )
    omit_call_sites()  # no format shows one; finding it costs each run's lines ~4 us each
    if not config.tracker.url.startswith(("http://", "https://")):
        _mute_repeated_rail_lines(config.log_level)


def _mute_repeated_rail_lines(level: str) -> None:
    """Where the rail runs in this process (SQLite, PostgreSQL), the lines of its that repeat a
    run's own (:class:`worker.logs.TrackerRunLines`, dropped by the handler) are muted at their
    source, unless ``level`` is DEBUG (then both are written): the rail then neither builds them
    (a count of the role's queue each) nor steps off its batch fast paths for them. At the
    default INFO a no-op task cost 678-682 us instead of 206 (docs/benchmarks.md)."""
    from tracker_client.rules.common import MUTED_ACTIONS
    from worker.logs import TrackerRunLines

    if logging.getLevelName(level.upper()) == logging.DEBUG:
        MUTED_ACTIONS.difference_update(TrackerRunLines.REPEATS)
    else:
        MUTED_ACTIONS.update(TrackerRunLines.REPEATS)


async def _watch_signals(
    worker: Worker,
    reload: Callable[[], Coroutine[Any, Any, None]],
    task_status: anyio.abc.TaskStatus[None],
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async with anyio.create_task_group() as tg:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    # In a task of its own: storing [[schedules]] waits on the tracker, and a
                    # TERM must still be heard meanwhile (reloads run one at a time).
                    tg.start_soon(reload)
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


async def _run(
    config: Config, config_path: Path | None, overrides: dict[str, Any], roles: Sequence[str]
) -> int:
    """Run a worker with ``config``, the configuration :func:`run_command` loaded (read once:
    the worker runs the configuration it checked; ``config_path``, ``overrides`` and ``roles``
    are read again only on a ``SIGHUP`` reload)."""
    # Taken (and removed from the environment) before any child process can inherit it.
    notifier = Notifier.from_env(unset_environment=True)
    built = build_roles(config)
    problems = await readiness(built)
    if problems:
        raise ExecutorError("executors not ready:\n  " + "\n  ".join(problems))
    sweeps = SweepCounts()  # what the rail's sweeps reclaim, for the worker's metrics
    tracker = await open_for_worker(config, sweeps)
    if config.schedules:  # stored (created or updated by name) before the first claim
        from worker.cli.ops.schedule import declare_schedules

        try:
            await declare_schedules(tracker, config.schedules)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await tracker.aclose()
            raise
    drain_deadline = 0.0
    worker: Worker
    # The collector's tuning is this process's (the run command's), never an embedded Worker's.
    busy_gc = BusyGc(config.worker.gc_tuning)

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
            busy_gc.apply()  # start-up's heap is built: frozen while the worker runs
            notifier.ready(status=status())
        elif state is WorkerState.DRAINING:
            drain_deadline = time.monotonic() + config.worker.shutdown_grace_s
            notifier.stopping(status=status())

    def extend() -> float | None:
        # While draining within the grace, keep systemd from killing us mid-report.
        if worker.state is not WorkerState.DRAINING:
            return None
        return max(0.0, drain_deadline - time.monotonic()) + STOP_MARGIN_S

    reloading = anyio.Lock()

    async def reload() -> None:
        nonlocal config
        async with reloading:
            notifier.reloading()
            from worker.config.reload import plan_reload  # only on SIGHUP

            try:
                # Roles and most [worker] keys apply to new claims; the rest is named
                # (config.reload); changed [[schedules]] are stored in the rail as at start.
                applied, _ = plan_reload(config, load_selected(config_path, overrides, roles))
                built = build_roles(applied)
                worker.set_config(applied.worker)
                worker.set_roles(built)
                previous, config = config, applied
            except BacklogWorkerError as exc:
                notifier.ready(status=status())
                log.error("reload refused: %s", exc, extra={"action": "reload_failed"})
                return
            if applied.schedules != previous.schedules:
                from worker.cli.ops.schedule import reload_schedules

                stored = await reload_schedules(tracker, previous.schedules, applied.schedules)
                if not stored:  # kept as running: the next reload tries them again
                    config = applied.model_copy(update={"schedules": previous.schedules})
            notifier.ready(status=status())
            log.info(
                "configuration reloaded: roles %s, %d slots",
                ", ".join(r.name for r in worker.roles),
                config.worker.concurrency,
                extra={"action": "reloaded"},
            )

    try:
        worker = Worker(
            tracker,
            config.worker,
            built,
            tracker_config=config.tracker,
            on_state=on_state,
            telemetry=build_telemetry(config.metrics, config.tracing, sweeps),
        )
        with notifier:
            async with anyio.create_task_group() as tg:
                await tg.start(_watch_signals, worker, reload)
                await tg.start(Watchdog(notifier).run, _Probe(worker))
                await tg.start(partial(report_status, notifier, status, extend_timeout=extend))
                await worker.run()
                tg.cancel_scope.cancel()
    finally:
        busy_gc.restore()
        with anyio.CancelScope(shield=True):
            await tracker.aclose()
    if worker.error is not None:
        raise worker.error  # the worker gave up (refused token; a drain that could not claim)
    return EXIT_OK


@click.command("run")
@config_option
@tracker_option
@role_option
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
    overrides = overrides_of(
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
        config = load_selected(config_path, overrides, roles)
        release_secret_env()  # before any child exists: /proc/<pid>/environ no longer has it
        url = config.tracker.url
        token_source = config.tracker.api_token_source or NO_TOKEN
        if url.lower().startswith(("http://", "https://")):
            _skip_httpx_cli()  # a remote rail: its client imports httpx
        _setup_logging(config)
        use_uvloop = uvloop_wanted(config.worker.event_loop)
        code = anyio.run(
            _run,
            config,
            config_path,
            overrides,
            roles,
            backend_options={"use_uvloop": use_uvloop},
        )
    except (ConfigError, ExecutorError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except TrackerError as exc:
        fail(describe(exc, url, token_source), exit_code_for(exc))
    freeze_for_exit(config.worker.gc_tuning)  # no collection of the heap at interpreter exit
    sys.exit(code)


def _skip_httpx_cli() -> None:
    """Keep httpx's command-line client out of a worker process.

    ``import httpx`` imports ``httpx._main`` (its ``httpx`` command: click, rich, pygments) when
    those are installed, as they are here (rich is this project's). A worker never runs that
    command, and on a remote rail it cost 3.9 MiB of peak RSS (``bench.memory --rail served``:
    52.4 against 48.5 MiB, same run). Marking the module absent makes httpx take its own
    fallback (``from ._main import main`` in a ``try``/``except ImportError``); everything else
    of httpx is unchanged. It is done in the ``run`` command of a remote rail only, before the
    tracker is opened; where httpx is already imported it changes nothing.
    """
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def uvloop_wanted(event_loop: str) -> bool:
    """Whether the worker's loop runs on uvloop, from ``[worker] event_loop``.

    ``auto``: where uvloop is installed (as ``tracker serve`` does). Measured interleaved, same
    run, 2 busy cores: ``bench.worker`` (3,000 no-op tasks, embedded) ~15 % less worker CPU per
    task (median 600 against 702 us, 1 process) and tasks/s not worse; ``bench.remote --phases
    worker`` the same within noise. Its cost: ~2 MiB more peak RSS (``python -m bench.memory``:
    its extension module and what it imports), which ``asyncio`` saves. ``uvloop`` where it is
    not installed is a ``ConfigError`` naming the key.
    """
    import importlib.util

    if event_loop == "asyncio":
        return False
    installed = importlib.util.find_spec("uvloop") is not None
    if event_loop == "uvloop" and not installed:
        raise ConfigError(
            '[worker] event_loop = "uvloop": uvloop is not installed (pip install uvloop, or '
            'use "auto" or "asyncio")'
        )
    return installed


def register(group: click.Group) -> None:
    """Add ``run`` to the CLI (``check`` is :mod:`worker.cli.check`'s)."""
    group.add_command(run_command)
