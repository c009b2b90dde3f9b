"""What ``ctx.checkpoint`` costs: per call, and per run against the same runs without it.

    python -m bench.checkpoint [--calls 20000] [--tasks 1000] [--rounds 3] [--concurrency 4]

1. **Per call**: a real claimed lease on a fresh SQLite rail, the worker's own
   :class:`~worker.run.task.SessionSink` over its :class:`~worker.lease.LeaseSession`, and
   ``--calls`` calls of ``ctx.checkpoint({"step": i, "note": ...})`` (a ~100-byte value): the
   JSON and 64 KiB check, the scrubbing of known secrets and keeping the latest; nothing is
   written per call (the keeper's next heartbeat or the report writes it).
2. **Per run**: one in-process :class:`~worker.daemon.Worker` drains ``--tasks`` no-op tasks on a
   fresh rail per mode, modes interleaved round by round: ``none`` (no checkpoint), ``one`` (one
   checkpoint per run: written by the report, one more write per run) and ``many`` (100 per run:
   still one write). Printed: the median tasks/s and CPU per task (this process: the worker and
   the rail's database thread; the steadier figure on a shared machine), each as a ratio to
   ``none``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from plugins.api import ExecutionContext, Outcome, Transition
from plugins.context_hooks import ContextHooks
from tracker_client.factory import open_tracker
from tracker_client.models import TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker
from worker.retry import RetryPolicy, TrackerCalls
from worker.run.task import SessionSink

PIPELINE = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "agent"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
NOTE = "resume from here: " + "x" * 60


async def per_call(calls: int) -> float:
    """Microseconds per ``ctx.checkpoint`` call through the worker's sink."""
    from worker.lease import LeaseSession

    with tempfile.TemporaryDirectory() as tmp:
        tracker = await open_tracker(f"sqlite:///{tmp}/rail.db")
        try:
            pid = await tracker.create_pipeline("flow", PIPELINE)
            await tracker.create_task(TaskCreate(pipeline_id=pid, title="t"))
            lease = await tracker.claim("bench", "agent", 60_000)
            assert lease is not None
            session = LeaseSession(
                tracker, lease, calls=TrackerCalls(RetryPolicy(), keys=False), ttl_s=60
            )
            hooks = ContextHooks(SessionSink(session), Path(tmp) / "w")
            ctx = ExecutionContext(task=lease.task, run=lease.run, hooks=hooks)
            started = time.perf_counter()
            for i in range(calls):
                await ctx.checkpoint({"step": i, "note": NOTE})
            elapsed = time.perf_counter() - started
            await session.flush_checkpoint()  # the one write all those calls cost
        finally:
            await tracker.aclose()
    return elapsed / calls * 1e6


class Agent:
    """A no-op run with ``per_run`` checkpoints."""

    def __init__(self, per_run: int) -> None:
        self.per_run = per_run

    async def execute(self, ctx: ExecutionContext) -> Outcome:
        for i in range(self.per_run):
            await ctx.checkpoint({"step": i, "note": NOTE})
        return Transition("complete")


async def drain(tasks: int, per_run: int, concurrency: int) -> tuple[float, float]:
    """Tasks per second and CPU microseconds per task (this process: the worker and the
    embedded rail's database thread) of one in-process drain of ``tasks`` runs."""
    with tempfile.TemporaryDirectory() as tmp:
        tracker: Tracker = await open_tracker(f"sqlite:///{tmp}/rail.db")
        try:
            pid = await tracker.create_pipeline("flow", PIPELINE)
            await tracker.create_tasks(
                [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(tasks)]
            )
            role = Role(RoleConfig(name="agent", executor="python"), Agent(per_run))
            config = WorkerConfig(
                agent_id="bench",
                concurrency=concurrency,
                idle_min_s=0.001,
                idle_max_s=0.01,
                workdir=Path(tmp) / "runs",
                drain=True,
            )
            started, cpu = time.perf_counter(), time.process_time()
            await Worker(tracker, config, [role]).run()
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        finally:
            await tracker.aclose()
    return tasks / elapsed, cpu / tasks * 1e6


async def main(args: argparse.Namespace) -> None:
    """Both measurements, printed."""
    us = await per_call(args.calls)
    print(f"ctx.checkpoint: {us:.2f} us per call ({args.calls} calls, one write for all)")
    modes: dict[str, int] = {"none": 0, "one": 1, "many": 100}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode, per_run in modes.items():
            rate, cpu = await drain(args.tasks, per_run, args.concurrency)
            rates[mode].append(rate)
            cpus[mode].append(cpu)
    base_rate, base_cpu = statistics.median(rates["none"]), statistics.median(cpus["none"])
    for mode in modes:
        rate, cpu = statistics.median(rates[mode]), statistics.median(cpus[mode])
        print(
            f"{mode:>5} ({modes[mode]:>3} checkpoints/run): {rate:8.1f} tasks/s "
            f"(x{rate / base_rate:.3f}), {cpu:7.1f} us CPU/task (x{cpu / base_cpu:.3f})"
        )


def _args(argv: Any = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, _args())
