"""The ``backlog-worker`` command line (click). The only place that installs signal handlers.

Subcommands live in sibling modules and are registered here. Exit codes: 0 ok, 1 failure
(task failed/dead-lettered, check found problems), 2 usage or configuration error,
3 tracker unreachable, 4 backlog full, 5 wait timed out.

A subcommand's module is imported only when that command is looked up (or the group's help
lists every command), so ``backlog-worker run`` never loads the operator commands (rich), the
HTTP server (starlette, uvicorn) or their dependencies: a long-running worker keeps less memory.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

__all__ = ["COMMAND_MODULES", "main"]

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


class _LazyGroup(click.Group):
    """A group whose subcommands are registered by their module on first lookup."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._registered: set[str] = set()

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
            self._register(COMMAND_MODULES[cmd_name])
        return self.commands.get(cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="backlog-worker")
def main() -> None:
    """A durable task rail for AI agents: workers, trackers and operator tools."""
