"""A parked claim's cancel that reaches the server while the claim is still on its way to park
(extension ``parked_claim``): the two travel on separate connections, so a stopping worker's
cancel can be served between the claim's arrival and the moment it waits for work (it first
reads its key's record: a trip to the database thread). The cancel must stop it there: the
claim answers ``[]`` and leases nothing, instead of parking on for a caller that is gone and
leasing the next task to it (held until its TTL).

The served app runs on a real 127.0.0.1 port (uvicorn, as ``tracker serve`` runs it) over a
real SQLite rail; the only hook is the order: the claim's read of its record waits until the
cancel has reached the rail (:class:`_CancelComesFirst`), what a loaded server does by chance.
The embedded rail's other way in before the claim parks, the leases its agent's reports claimed
ahead, is held the same way (:class:`_CancelledWhileClaiming`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest

from tests.embedded.test_batch_statements import DONE, PIPE
from tests.remote.fixtures import serve_on_port
from tracker_client.contract.batch_models import FinishItem
from tracker_client.contract.parked_models import ParkedCancelled
from tracker_client.embedded import EmbeddedTracker
from tracker_client.models import Lease, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.rules.common import Ctx
from tracker_client.serve.app import create_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

R = TypeVar("R")

FLOW = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


class _CancelComesFirst(EmbeddedTracker):
    """An embedded rail whose parked claims' read of their key's record waits until a cancel
    reaches the rail (``reading`` is set as the claim starts it; ``cancelled`` once the
    rail's cancel has answered)."""

    reading: anyio.Event
    hold: anyio.Event
    cancelled: anyio.Event

    async def _read(self, where: str, fn: Callable[[Ctx], R]) -> R:
        if where == "parked_claim":  # the parked claim's look at its key's record
            self.reading.set()
            await self.hold.wait()
        return await super()._read(where, fn)

    async def cancel_parked_claim(self, *, idempotency_key: str | None = None) -> ParkedCancelled:
        # The held read goes on only after this step: the cancel's own look at the key (in
        # the same step, before its first await) comes first, deterministically.
        self.hold.set()
        answer = await super().cancel_parked_claim(idempotency_key=idempotency_key)
        self.cancelled.set()
        return answer


@asynccontextmanager
async def _served(tmp_path: Path) -> AsyncIterator[tuple[_CancelComesFirst, str, str]]:
    """The rail (with the ``flow`` pipeline), its served URL and the pipeline's id."""
    rail = await _CancelComesFirst.open(str(tmp_path / "rail.db"))
    rail.reading, rail.hold, rail.cancelled = anyio.Event(), anyio.Event(), anyio.Event()
    try:
        pid = await rail.create_pipeline("flow", FLOW)
        async with serve_on_port(create_app(rail)) as url:
            yield rail, url, pid
    finally:
        await rail.aclose()


async def _park(tracker: RemoteTracker, key: str) -> list[Lease]:
    return await tracker.parked_claim("w1", "coder", 30_000, 1, 20_000, idempotency_key=key)


async def _not_leased(rail: EmbeddedTracker, task_id: str) -> None:
    """The task is free: a plain claim takes it (nothing holds it to a TTL)."""
    lease = await rail.claim("w2", "coder", 30_000)
    assert lease is not None and lease.task.id == task_id
    assert lease.run.agent_id == "w2"


async def test_a_cancel_served_before_its_claim_parks_stops_it(tmp_path: Path) -> None:
    async with _served(tmp_path) as (rail, url, pid):
        worker, producer = RemoteTracker(url, timeout_s=5), RemoteTracker(url, timeout_s=5)
        try:
            key = str(uuid.uuid4())
            got: list[Lease] = []

            async def parked() -> None:
                got.extend(await _park(worker, key))

            with anyio.fail_after(10):  # far below the claim's 20 s wait
                async with anyio.create_task_group() as tg:
                    tg.start_soon(parked)
                    await rail.reading.wait()  # the claim is at the server, not parked yet
                    answer = await producer.cancel_parked_claim(idempotency_key=key)
                    task_id = await producer.create_task(TaskCreate(pipeline_id=pid, title="t"))
            # Without the fix the claim parked on after the cancel and leased the task.
            assert got == [] and answer.released == 0
            await _not_leased(rail, task_id)
            assert await _park(worker, key) == []  # the key stays cancelled
        finally:
            await worker.aclose()
            await producer.aclose()


async def test_a_client_gone_before_its_claim_parks_stops_it(tmp_path: Path) -> None:
    """The worker closes the claim's connection (it stopped) while the server is still on
    the claim's way to park: the server notices and the claim leases nothing."""
    async with _served(tmp_path) as (rail, url, pid):
        producer = RemoteTracker(url, timeout_s=5)
        body: dict[str, Any] = {"agent_id": "w1", "agent_role": "coder", "n": 1}
        body |= {"lease_ttl_ms": 30_000, "wait_ms": 20_000}
        try:
            with anyio.fail_after(10):
                async with (
                    httpx.AsyncClient(base_url=url, timeout=10) as http,
                    anyio.create_task_group() as tg,
                ):

                    async def parked() -> None:
                        headers = {"Idempotency-Key": "g"}
                        await http.post("/leases/claim-parked", json=body, headers=headers)

                    tg.start_soon(parked)
                    await rail.reading.wait()
                    tg.cancel_scope.cancel()  # the request's connection is closed
                await rail.cancelled.wait()  # the server saw the client leave and cancelled
                task_id = await producer.create_task(TaskCreate(pipeline_id=pid, title="t"))
                # Every parked claim has answered: none is left to take the task later.
                while rail._parked.waiting:
                    await anyio.sleep(0.005)
            await _not_leased(rail, task_id)
        finally:
            await producer.aclose()


def _leased(tracker: EmbeddedTracker) -> set[str]:
    """Ids of the tasks under a live lease now (read from the rows)."""
    rows = tracker.engine.db.conn.execute("SELECT id FROM tasks WHERE lease_expires_at_ms > 0")
    return {str(row[0]) for row in rows}


class _CancelledWhileClaiming(EmbeddedTracker):
    """An embedded rail where a parked claim's cancel is served while the claim takes the
    leases its agent's last reports claimed ahead (a claim before it parks: the window)."""

    key: str | None = None
    answer: ParkedCancelled | None = None

    async def claim_many(self, *args: Any, **kwargs: Any) -> list[Lease]:
        got = await super().claim_many(*args, **kwargs)
        key, self.key = self.key, None
        if key is not None:  # the parked claim's claim of the kept leases has just answered
            self.answer = await self.cancel_parked_claim(idempotency_key=key)
        return got


async def test_kept_leases_a_cancelled_parked_claim_took_are_given_back(tmp_path: Path) -> None:
    """The kept leases a parked claim takes at once are not answered to a caller whose cancel
    came meanwhile: they are given back, and the key stays cancelled."""
    tracker = await _CancelledWhileClaiming.open(str(tmp_path / "rail.db"))
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        tasks = [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(6)]
        await tracker.create_tasks(tasks)
        first = await tracker.claim_many("a", "coder", 60_000, 3)
        await tracker.finish_many([FinishItem(x, transition=DONE) for x in first])
        kept = _leased(tracker)
        assert len(kept) == 3  # its reports claimed its next batch ahead
        tracker.key = "park-1"
        with anyio.fail_after(10):
            got = await tracker.parked_claim(
                "a", "coder", 60_000, 3, 30_000, idempotency_key="park-1"
            )
            assert got == [] and tracker.answer is not None
            assert _leased(tracker) == set()  # given back, not held to their TTL
            assert (
                await tracker.parked_claim("a", "coder", 60_000, 3, 0, idempotency_key="park-1")
                == []
            )
    finally:
        await tracker.aclose()
