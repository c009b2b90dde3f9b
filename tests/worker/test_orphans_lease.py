"""A concurrency key stays exclusive when heartbeats hang and the executor is slow to die.

Two workers share one served rail (a real ``tracker serve`` app on 127.0.0.1): worker 1 reaches it
through a proxy that hangs every heartbeat, worker 2 directly. Worker 1's lease runs out by its
own clock and its executor is cancelled; that executor ignores SIGTERM and has a 3 s grace, far
more than the lease has left. It must still be dead (SIGKILL) before the lease's end, or worker 2
takes the task over while it is alive: every executor checks at its start that no earlier one
that did not log its end is alive (see ``test_orphans_keys``).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.command.executor import CommandExecutor
from tests.faultproxy import FaultProxy, Hang
from tests.remote.fixtures import TEST_RETRY, serve_on_port
from tests.worker.conftest import start_worker, wait_until, worker_config
from tests.worker.test_orphans import PIPELINE
from tests.worker.test_orphans_keys import KEYED_SCRIPT, read_log
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.serve.app import create_app
from worker.config.models import RoleConfig
from worker.daemon import Role, Worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: The first executor also ignores SIGTERM: only SIGKILL ends it.
STUBBORN_SCRIPT = KEYED_SCRIPT.replace(
    "if first:\n",
    "if first:\n    import signal\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n",
)


@asynccontextmanager
async def two_routes(
    db: Path,
) -> AsyncIterator[tuple[EmbeddedTracker, RemoteTracker, RemoteTracker]]:
    """The rail, a client through a heartbeat-hanging proxy, and a direct client."""
    embedded = await EmbeddedTracker.open(str(db))
    try:
        async with serve_on_port(create_app(embedded)) as url:
            hang = Hang("/heartbeat", rate=1.0, hang_s=None)  # never answered
            proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=[hang])
            async with proxy.serve() as proxy_url:
                hung = RemoteTracker(proxy_url, timeout_s=30.0, retry=TEST_RETRY)
                direct = RemoteTracker(url, timeout_s=30.0, retry=TEST_RETRY)
                try:
                    yield embedded, hung, direct
                finally:
                    await hung.aclose()
                    await direct.aclose()
    finally:
        await embedded.aclose()


def command_role(options: dict[str, Any]) -> Role:
    return Role(
        RoleConfig(name="coder", executor="command", options=options), CommandExecutor(options)
    )


async def test_a_key_stays_exclusive_when_heartbeats_hang_and_the_executor_ignores_sigterm(
    tmp_path: Path,
) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN_SCRIPT)
    log = tmp_path / "executors.log"
    options = {"argv": [sys.executable, str(script), str(log), "{task.title}"], "term_grace_s": 3.0}
    async with two_routes(tmp_path / "rail.db") as (rail, hung, direct):
        pipeline_id = await rail.create_pipeline("flow", PIPELINE)
        await rail.create_tasks(
            [
                TaskCreate(pipeline_id=pipeline_id, title=f"t{i}", concurrency_key="repo-1")
                for i in range(3)
            ]
        )

        def make(tracker: RemoteTracker, name: str) -> Worker:
            config = worker_config(
                agent_id=name,
                concurrency=1,
                lease_ttl_s=4.0,
                shutdown_grace_s=0.0,
                workdir=tmp_path / name,
            )
            return Worker(tracker, config, [command_role(options)])

        async def done() -> bool:
            tasks = (await rail.list_tasks(pipeline_id=pipeline_id)).items
            return all(t.stage == "done" for t in tasks)

        w1, w2 = make(hung, "w1"), make(direct, "w2")
        async with anyio.create_task_group() as tg:
            await start_worker(tg, w1)
            await wait_until(lambda: len(read_log(log)) >= 1, timeout=30)
            await start_worker(tg, w2)
            await wait_until(done, timeout=60)
            w1.stop(immediate=True)
            w2.stop(immediate=True)
            # w1's keeper still waits on its hung heartbeat (30 s request timeout): don't wait
            tg.cancel_scope.cancel()
        # the stopped workers' long polls (wait for work) are still open at the server: new work
        # answers them now, so the server's shutdown need not wait for them to time out
        await rail.create_task(TaskCreate(pipeline_id=pipeline_id, title="wake-up"))
    lines = read_log(log)
    assert [line for line in lines if line[0] == "overlap"] == []
    assert sum(line[0] == "end" for line in lines) >= 3
