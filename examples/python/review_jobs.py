"""The ``python`` executor's functions for examples/workers/python.toml.

Each is an ``async def`` taking the run's :class:`~plugins.api.ExecutionContext` and returning an
outcome; the worker imports them at start (``callable = "review_jobs:draft"``), so put this
directory on the import path: ``PYTHONPATH=examples/python backlog-worker run --config ...``.
They run in the worker's own process: anything blocking belongs in ``anyio.to_thread``.
"""

from __future__ import annotations

from typing import Any

from plugins.api import ExecutionContext, Outcome, Transition


async def draft(ctx: ExecutionContext) -> Outcome:
    """The writer: a draft file in the run's directory, a progress event, then ``submit``."""
    path = ctx.workdir / "draft.md"
    notes = f"\n\nReworked after review: {ctx.instructions}" if ctx.instructions else ""
    path.write_text(f"# {ctx.task.title}\n\n{ctx.task.description or 'A first draft.'}{notes}\n")
    await ctx.report("progress", {"draft": str(path), "bytes": path.stat().st_size})
    return Transition(trigger="submit")


async def review(ctx: ExecutionContext) -> dict[str, Any]:
    """The reviewer: sends a "WIP" title back once, approves the rest (a dict outcome works too)."""
    if ctx.task.title.startswith("WIP") and ctx.attempt <= 2:
        return {"trigger": "reject", "instructions": "Drop the WIP marker and say what changed."}
    await ctx.report("result", {"verdict": "approved", "attempt": ctx.attempt}, flush=True)
    return {"trigger": "approve"}
