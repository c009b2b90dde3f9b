"""The worker's own cost per task, with the tracker taken out of the picture.

    python -m bench.worker_overhead [--tasks 5000] [--concurrency 10]

A stub tracker answers every claim with the same lease and every transition at once, so what is
left is the worker: slots, claim loop, one task per claimed run, the lease keeper, reporting,
retry wrappers. Compare with ``python -m bench.worker`` (real embedded tracker) to see which side
bounds throughput. A benchmark double only: tests always use the real embedded tracker.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from plugins.api import ExecutionContext, Outcome, Transition
from tracker_client.capabilities import Capabilities
from tracker_client.errors import Unsupported
from tracker_client.models import Health, Lease, Pipeline, Run, Task, TransitionResult
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

_TASK = Task(
    id="t",
    pipeline_id="p",
    stage="todo",
    title="x",
    description="",
    priority=0,
    task_version=1,
    next_eligible_at_ms=0,
    retry_delay_ms=0,
    created_at_ms=0,
    updated_at_ms=0,
)
_RUN = Run(
    id="r", task_id="t", attempt=1, status="running", agent_id="a", agent_role="b", started_at_ms=0
)
_LEASE = Lease(task=_TASK, run=_RUN, lease_id="l", lease_token="0" * 64, expires_at_ms=0)
_PIPELINE = Pipeline(
    id="p",
    name="p",
    definition={"transitions": [{"from": "todo", "to": "done", "trigger": "complete"}]},
    created_at_ms=0,
)


class _StubTracker:
    def __init__(self, tasks: int) -> None:
        self.left = tasks

    async def health(self) -> Health:
        return Health(status="ok", version="stub")

    async def capabilities(self) -> Capabilities:
        return Capabilities(max_lease_ttl_ms=None)  # keys sent, as across a network

    async def claim(self, *args: Any, **kwargs: Any) -> Lease | None:
        await anyio.lowlevel.checkpoint()
        if self.left <= 0:
            return None
        self.left -= 1
        return _LEASE

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        return _PIPELINE  # read once per worker and role: the trigger is chosen per stage

    async def transition(self, *args: Any, **kwargs: Any) -> TransitionResult:
        await anyio.lowlevel.checkpoint()
        return TransitionResult(previous_stage="todo", new_stage="done", trigger="complete")

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        await anyio.sleep(timeout_s)
        return ""

    async def maintenance(self) -> None:
        raise Unsupported("stub")

    async def queue_stats(self) -> None:
        raise Unsupported("stub")  # a draining worker then relies on its own retry times


class _Noop:
    async def execute(self, ctx: ExecutionContext) -> Outcome:
        return Transition()


async def _main(tasks: int, concurrency: int) -> None:
    worker = Worker(
        _StubTracker(tasks),  # type: ignore[arg-type]
        WorkerConfig(agent_id="bench", concurrency=concurrency, drain=True, idle_min_s=0.01),
        [Role(RoleConfig(name="b", executor="noop"), _Noop())],
    )
    wall, cpu = time.perf_counter(), time.process_time()
    await worker.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"worker alone, {tasks} no-op tasks, concurrency {concurrency}: "
        f"{tasks / wall:.0f} tasks/s, {cpu / tasks * 1e6:.0f} us CPU per task"
    )


def main() -> None:
    """Parse arguments, run, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    anyio.run(_main, args.tasks, args.concurrency)


if __name__ == "__main__":
    main()
