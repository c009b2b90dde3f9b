"""An example third-party executor: greets the task, moves it on with the role's default trigger.

backlog-worker finds it through the entry point ``greeter`` in the group
``backlog_worker.executors`` (this package's pyproject.toml), calls ``Greeter(options)`` once
with the role's ``[roles.options]`` table when the worker starts, then awaits ``execute`` once
per claimed task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.errors import ExecutorError

__all__ = ["Greeter"]


class Greeter:
    """Options: ``greeting`` (a string, default "hello"), ``delay_s`` (a pause, default 0)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        # Refuse bad options here: the worker (and `backlog-worker check`) then names the role.
        unknown = set(options) - {"greeting", "delay_s"}
        if unknown:
            raise ExecutorError(f"unknown option(s) {', '.join(sorted(unknown))}")
        self.greeting = options.get("greeting", "hello")
        if not isinstance(self.greeting, str) or not self.greeting:
            raise ExecutorError("option 'greeting' must be a non-empty string")
        self.delay_s = options.get("delay_s", 0)
        if isinstance(self.delay_s, bool) or not isinstance(self.delay_s, int | float):
            raise ExecutorError("option 'delay_s' must be a number of seconds")

    async def readiness(self) -> list[str]:
        """Problems that would fail every run (none here); `backlog-worker check` prints them."""
        return []

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        """Report the greeting, wait (cancellable, like any anyio sleep), then move the task on."""
        said = f"{self.greeting}, {ctx.task.title}"
        await ctx.report("progress", {"said": said})
        await anyio.sleep(self.delay_s)
        await ctx.report("result", {"said": said, "attempt": ctx.attempt}, flush=True)
        return Transition()  # no trigger: the stage's only way out, else `default_trigger`
