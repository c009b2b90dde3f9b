"""The ``python`` executor's own cost per call: an ``async def`` against a plain ``def``.

    python -m bench.python_executor [--calls 5000]

A plain ``def`` runs in a new daemon thread per call (``plugins.python.sync``); this measures
that price with no-op functions on a context whose reports go nowhere.
"""

from __future__ import annotations

import argparse
import time

import anyio

from plugins.api import ExecutionContext
from plugins.context_hooks import ContextHooks
from plugins.python.executor import PythonExecutor
from plugins.python.sync import ThreadContext
from plugins.testing import ExecutorHarness, RecordingSink


def sync_noop(ctx: ThreadContext) -> None:
    """A plain function doing nothing."""


async def async_noop(ctx: ExecutionContext) -> None:
    """An async function doing nothing."""


async def _measure(calls: int) -> None:
    harness = ExecutorHarness()
    hooks = ContextHooks(RecordingSink(), "/nonexistent")
    ctx = ExecutionContext(task=harness.task, run=harness.run_model, hooks=hooks)
    for name in ("async_noop", "sync_noop"):
        executor = PythonExecutor({"callable": f"bench.python_executor:{name}"})
        for _ in range(min(calls, 200)):  # warm up
            await executor.execute(ctx)
        start = time.perf_counter()
        for _ in range(calls):
            await executor.execute(ctx)
        per_call = (time.perf_counter() - start) / calls
        print(f"{name}: {per_call * 1e6:.1f} us per call")


def main() -> None:
    """Parse ``--calls`` and print the cost per call of each kind of function."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    anyio.run(_measure, parser.parse_args().calls)


if __name__ == "__main__":
    main()
