"""What ``run`` and ``check`` share: the configuration for the selected roles, their
executors built and asked for readiness, the tracker opened as a worker opens it.

It may touch the configuration, the plugin registry and the tracker factory; no daemon.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from plugins.api import SupportsReadiness
from tracker_client.errors import ConfigError
from tracker_client.factory import URL_FORMS, open_tracker
from tracker_client.protocol import Tracker
from tracker_client.sweeps import SweepCounts
from worker.config.importpath import use_python_path
from worker.config.models import DEFAULT_TRACKER_URL, Config, RoleConfig, load_config
from worker.daemon import Role

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_TRACKER",
    "build_role",
    "build_roles",
    "config_option",
    "fail",
    "load_selected",
    "open_for_worker",
    "overrides_of",
    "readiness",
    "role_option",
    "select_roles",
    "tracker_option",
]

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_TRACKER = 0, 1, 2, 3


def select_roles(config: Config, names: Sequence[str]) -> Config:
    """Keep only the roles named (all when ``names`` is empty), and every other key as it is;
    unknown names are a ConfigError."""
    if not config.roles:
        if config.source:
            where = f" in {config.source}"
        else:  # no file at all: most likely a first run without --config
            where = " (no --config FILE given, nor $BACKLOG_WORKER_CONFIG)"
        raise ConfigError(
            f"no [[roles]] configured{where}: a worker needs at least one role "
            "(a [[roles]] table naming its executor: docs/getting-started/quickstart.md)"
        )
    if not names:
        return config
    known = {r.name for r in config.roles}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"--role {unknown[0]!r} is not configured "
            f"(configured roles: {', '.join(sorted(known))})"
        )
    # Everything else stays (schedules, metrics, tracing too); nothing to validate again.
    return config.model_copy(update={"roles": tuple(r for r in config.roles if r.name in names)})


def build_role(role: RoleConfig) -> Role:
    """Load one role's executor through the plugin registry (``ExecutorError`` names it);
    ``[worker] python_path`` must be on the import path already (:func:`use_python_path`)."""
    from plugins.registry import load_executor

    return Role(config=role, executor=load_executor(role.executor, role.options))


def build_roles(config: Config) -> list[Role]:
    """Load each role's executor (:func:`build_role`), after ``[worker] python_path`` is put on
    the import path (:func:`use_python_path`); the first that cannot be built raises."""
    use_python_path(config)
    return [build_role(r) for r in config.roles]


def load_selected(
    config_path: Path | None, overrides: dict[str, Any], roles: Sequence[str]
) -> Config:
    """The configuration (file, environment, ``overrides``) with only the ``roles`` named."""
    return select_roles(load_config(config_path, **overrides), roles)


async def open_for_worker(config: Config, sweeps: SweepCounts | None = None) -> Tracker:
    """Open the configured tracker as a worker does (never creating a rail); ``sweeps``
    counts the expired leases a rail opened here reclaims (the worker's metrics).

    The worker retries transient errors itself, in one layer bounded by the lease
    (:mod:`worker.retry`); the HTTP client tries once, its default (a ``retry_*`` option in
    ``[tracker.options]`` still turns its own retries on).
    """
    # create=False: a worker never starts a rail (a typo'd path would be an empty new one).
    return await open_tracker(
        config.tracker.url,
        api_token=config.tracker.api_token,
        create=False,
        request_timeout_s=config.tracker.request_timeout_s,
        sweeps=sweeps,
        **config.tracker.options,
    )


def fail(message: str, code: int) -> None:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


async def readiness(roles: Sequence[Role]) -> list[str]:
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


def overrides_of(**flags: Any) -> dict[str, Any]:
    """The flags that were given (None: not given, the configuration decides)."""
    return {k: v for k, v in flags.items() if v is not None}


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="BACKLOG_WORKER_CONFIG",
    help="TOML configuration file (env BACKLOG_WORKER_CONFIG).",
)
tracker_option = click.option(
    "--tracker",
    metavar="URL",
    help=f"Tracker URL: {URL_FORMS}. Default: the config's [tracker] url, else "
    f"{DEFAULT_TRACKER_URL}.",
)
role_option = click.option(
    "--role", "roles", multiple=True, help="Serve only this configured role (repeatable)."
)
