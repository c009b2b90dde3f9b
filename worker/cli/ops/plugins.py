"""``backlog-worker plugins``: installed executor plugins, and their readiness.

Each installed executor is imported; one used by a configured role is built with that role's
options and asked for its ``readiness()``; one not used by any role is built with no options
(many executors need options, which is reported, not a failure). Exit 1 when a configured
role's executor cannot be loaded or is not ready.

It may touch the configuration, the plugin registry (:mod:`plugins.registry`: executors imported and
built) and their ``readiness()``, and the terminal; it never opens a tracker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click
from rich import box
from rich.table import Table
from rich.text import Text

from plugins.api import SupportsReadiness
from tracker_client.errors import ExecutorError
from worker.cli.ops.common import (
    EXIT_FAILURE,
    EXIT_OK,
    OpsContext,
    common_options,
    input_errors,
)
from worker.config.importpath import use_python_path
from worker.config.models import RoleConfig, load_config

__all__ = ["PluginStatus", "plugins_command", "probe_plugins"]

#: Longest a readiness check may take before it counts as a problem.
READINESS_TIMEOUT_S = 15.0


@dataclass
class PluginStatus:
    """What ``plugins`` found about one executor (or one configured role's use of it)."""

    name: str
    source: str
    role: str | None = None
    #: The plugin's factory could be imported.
    imported: bool = False
    #: An executor was built from the options (the role's, or none for an unused plugin).
    built: bool = False
    ready: bool | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """``ready``, ``not ready``, ``needs options``, ``bad options`` or ``not loadable``."""
        if not self.imported:
            return "not loadable"
        if not self.built:
            return "bad options" if self.role else "needs options"
        return "ready" if self.ready else "not ready"

    def as_json(self) -> dict[str, Any]:
        """The JSON shape of one row."""
        return {
            "executor": self.name,
            "source": self.source,
            "role": self.role,
            "state": self.state,
            "problems": self.problems,
        }


async def _probe(name: str, options: dict[str, Any], status: PluginStatus) -> None:
    from plugins.registry import load_executor, load_factory

    try:
        load_factory(name)
    except ExecutorError as exc:
        status.problems.append(str(exc))
        return
    status.imported = True
    try:
        executor = load_executor(name, options)
    except ExecutorError as exc:
        status.problems.append(str(exc))
        return
    status.built = True
    if not isinstance(executor, SupportsReadiness):
        status.ready = True
        return
    try:
        with anyio.fail_after(READINESS_TIMEOUT_S):
            problems = await executor.readiness()
    except TimeoutError:
        problems = [f"readiness check took longer than {READINESS_TIMEOUT_S:g}s"]
    except Exception as exc:  # a plugin's bug is reported, never a traceback
        problems = [f"readiness check crashed: {type(exc).__name__}: {exc}"]
    status.ready = not problems
    status.problems.extend(problems)


async def probe_plugins(roles: tuple[RoleConfig, ...]) -> list[PluginStatus]:
    """One status per configured role, then one per installed executor no role uses."""
    from plugins.registry import installed_executors

    installed = installed_executors()
    out: list[PluginStatus] = []
    for role in roles:
        ep = installed.get(role.executor)
        status = PluginStatus(role.executor, ep.value if ep else role.executor, role=role.name)
        await _probe(role.executor, dict(role.options), status)
        out.append(status)
    used = {r.executor for r in roles}
    for name, ep in installed.items():
        if name not in used:
            status = PluginStatus(name, ep.value)
            await _probe(name, {}, status)
            out.append(status)
    return out


_STYLE = {
    "ready": "green",
    "not ready": "yellow",
    "needs options": "dim",
    "bad options": "red",
    "not loadable": "red",
}


@click.command("plugins")
@common_options
def plugins_command(tracker_url: str | None, config_path: Path | None, as_json: bool) -> None:
    """List installed executor plugins and whether they are ready.

    With --config, each configured role's executor is built with the role's options and its
    readiness checked; exit 1 when one of them is not ready.
    """
    ops = OpsContext.build(tracker_url, config_path, as_json)
    with input_errors():
        config = load_config(config_path)
        use_python_path(config)  # a python job's module imports as the worker imports it
        statuses = anyio.run(probe_plugins, config.roles)
    if ops.as_json:
        ops.emit_json([s.as_json() for s in statuses])
    else:
        table = Table(title="executor plugins", box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1))
        table.add_column("executor", no_wrap=True)
        table.add_column("role", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("source / problems", overflow="fold", ratio=1)
        for s in statuses:
            prefix = f"executor {s.name!r}: "
            details = Text(s.source, style="dim")
            for problem in s.problems:
                details.append("\n" + problem.removeprefix(prefix))
            table.add_row(s.name, s.role or "-", Text(s.state, style=_STYLE[s.state]), details)
        ops.print(table)
    broken = [s for s in statuses if s.role is not None and s.state != "ready"]
    raise click.exceptions.Exit(EXIT_FAILURE if broken else EXIT_OK)
