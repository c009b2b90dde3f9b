"""The ``backlog-worker`` command line (click). The only place that installs signal handlers.

Subcommands live in sibling modules and are registered here. Exit codes: 0 ok, 1 failure
(task failed/dead-lettered, check found problems), 2 usage or configuration error,
3 tracker unreachable, 4 backlog full, 5 wait timed out.

A subcommand's module is imported only when that command is looked up, so ``backlog-worker
run`` never loads the operator commands (rich), the HTTP server (starlette, uvicorn) or their
dependencies: a long-running worker keeps less memory. The group's ``--help`` lists every command
from :data:`COMMAND_SUMMARIES` and imports none of them (~0.1 s of CPU less).
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import click

__all__ = ["COMMAND_MODULES", "COMMAND_SUMMARIES", "main"]

#: Which module registers which top-level command. Each module defines ``register(group)``;
#: ``tests/test_imports.py`` checks this table against what the modules really register.
COMMAND_MODULES: dict[str, str] = {
    "run": "worker.cli.run",
    "check": "worker.cli.check",
    "pipeline": "worker.cli.ops.commands",
    "task": "worker.cli.ops.commands",
    "submit": "worker.cli.ops.commands",
    "queue": "worker.cli.ops.commands",
    "plugins": "worker.cli.ops.commands",
    "demo": "worker.cli.ops.commands",
    "purge": "worker.cli.ops.commands",
    "schedule": "worker.cli.ops.commands",
    "limit": "worker.cli.ops.commands",
    "workers": "worker.cli.ops.commands",
    "dashboard": "worker.cli.ops.commands",
    "rail": "worker.cli.ops.rail",
    "tracker": "worker.cli.serve",
    "token": "worker.cli.scoped_tokens",
    "mcp": "worker.cli.mcp",
    "systemd-unit": "worker.cli.systemd.unit",
}

#: What the group's ``--help`` lists for a command whose module is not imported yet: the
#: command's own ``short_help`` where it sets one, else the first paragraph of its help (which
#: click shortens to the line, as it would the command's). ``tests/cli/test_help_listing.py``
#: checks each against the command itself.
COMMAND_SUMMARIES: dict[str, tuple[Literal["short_help", "help"], str]] = {
    "check": (
        "help",
        "Validate the configuration, reach the tracker and check every executor's readiness.",
    ),
    "dashboard": (
        "help",
        "Serve the web dashboard of a rail at http://HOST:PORT/ui/ (read-only without a token).",
    ),
    "demo": ("short_help", "Watch tasks flow through a temporary rail (no config)."),
    "limit": (
        "help",
        "Fleet-wide claim rates and caps of leased tasks per role, stored in the rail.",
    ),
    "mcp": ("short_help", "Serve the rail's MCP tools (stdio or HTTP)."),
    "pipeline": ("help", "Create, change and inspect pipelines (stages, roles, transitions)."),
    "plugins": ("help", "List installed executor plugins and whether they are ready."),
    "purge": ("short_help", "Delete finished tasks older than an age (--dry-run counts)."),
    "queue": ("short_help", "Per-role backlog figures, once or live (--watch)."),
    "rail": ("short_help", "Back up, verify, restore, copy or migrate a whole rail."),
    "run": (
        "help",
        "Run a worker: claim, execute, report, until stopped (TERM/INT drain; HUP reloads).",
    ),
    "schedule": (
        "help",
        "Periodic tasks stored in the rail: a task of a pipeline on every cron tick.",
    ),
    "submit": ("short_help", "Submit a task; with --wait, block until it finishes."),
    "systemd-unit": ("help", "Print a systemd unit for this install (paths resolved) to stdout."),
    "task": ("help", "Enqueue, list, inspect, cancel and requeue tasks."),
    "token": ("short_help", "Create, list or revoke the served rail's scoped tokens."),
    "tracker": ("help", "Operate a tracker: serve an embedded rail over HTTP."),
    "workers": (
        "help",
        "The workers registered on the rail, alive first, with the tasks each runs now.",
    ),
}


class _LazyGroup(click.Group):
    """A group whose subcommands are registered by their module on first lookup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._registered: set[str] = set()
        #: The group's --help is listing its commands (:meth:`format_commands`).
        self._listing = False

    def _register(self, module_name: str) -> None:
        if module_name in self._registered:
            return
        self._registered.add(module_name)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # pragma: no cover - only while a module is missing
            if exc.name != module_name:
                raise
            return
        module.register(self)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, registered or not yet imported."""
        return sorted(set(self.commands) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing (only) the module that registers it."""
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            if self._listing and cmd_name in COMMAND_SUMMARIES:
                kind, text = COMMAND_SUMMARIES[cmd_name]
                if kind == "short_help":
                    return click.Command(cmd_name, short_help=text)
                return click.Command(cmd_name, help=text)
            self._register(COMMAND_MODULES[cmd_name])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' listing of ``--help``, written by click from :meth:`get_command`,
        which meanwhile answers a command whose module is not imported yet with its entry in
        :data:`COMMAND_SUMMARIES` instead of importing it."""
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="backlog-worker")
def main() -> None:
    """A durable task rail for AI agents: workers, trackers and operator tools."""
