"""Waiting over HTTP: ``wait`` (a task's end) and ``wait_for_work`` (the rail's next write).

On ``backlog-worker tracker serve`` both are long polls (extensions ``wait`` and
``wait_for_work``), sent in chunks of at most :data:`WAIT_CHUNK_S` with a read timeout that
covers the chunk; a plain NullTickets server has neither, so ``wait`` polls ``GET /tasks/{id}``
every ``poll_interval_s`` (deciding "finished" from the pipeline's terminal stages, cached:
NullTickets cannot change a pipeline) and ``wait_for_work`` just sleeps. May touch: the wire.
"""

from __future__ import annotations

import math
from typing import Any

import anyio

from tracker_client.errors import TrackerUnavailable
from tracker_client.models import Artifact, Event, Pipeline, TaskDetail
from tracker_client.nulltickets.reads import get_task, list_artifacts, list_events, list_runs
from tracker_client.nulltickets.wire import Wire
from tracker_client.ops_models import WaitResult

__all__ = ["WAIT_CHUNK_S", "Waiting"]

#: Longest single long poll (``GET /tasks/{id}/wait``, ``GET /ops/wait-for-work``); longer
#: waits loop.
WAIT_CHUNK_S = 25.0


class Waiting:
    """``wait`` and ``wait_for_work`` of one client (it keeps the pipelines it has read)."""

    def __init__(self, wire: Wire, poll_interval_s: float) -> None:
        self._wire = wire
        self._poll_interval_s = poll_interval_s
        self._pipelines: dict[str, dict[str, Any]] = {}

    def _read_timeout(self, chunk_s: float) -> float:
        """A long poll's read timeout: its wait plus the usual read timeout, plus a second."""
        return chunk_s + (self._wire.http.timeout.read or 10.0) + 1.0

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        """Return when work may be claimable, or after ``timeout_s``.

        Returning is a hint, not a promise of work; a transport failure also just returns (after
        at most ``timeout_s``) so an idle worker goes back to claiming. Never retried. Answers
        the server's generation as this long poll's answer carried it (empty: none seen yet); as
        ``since`` it makes the server answer at once when it has served a write after it. Without
        ``since``, the generation of the last answer of any request counts.
        """
        if not since:
            since = self._wire.http.generation  # before any await: a racing write counts
        timeout_s = max(0.0, timeout_s)
        if not await self._wire.discovery.has("wait_for_work"):
            await anyio.sleep(timeout_s)
            return self._wire.http.generation or ""
        deadline = anyio.current_time() + timeout_s
        chunk = min(timeout_s, WAIT_CHUNK_S)
        try:
            answer = await self._wire.send(
                "wait_for_work",
                query={"timeout_ms": math.ceil(chunk * 1000), "since": since},
                read_timeout_s=self._read_timeout(chunk),
                retry=False,
            )
        except TrackerUnavailable:
            await anyio.sleep(max(0.0, deadline - anyio.current_time()))
            return since or ""
        # This answer's own generation: a concurrent claim's answer may carry a later one
        # for a write that claim did not see.
        return answer.headers.get("x-rail-generation") or since or ""

    async def wait(self, task_id: str, timeout_s: float) -> WaitResult:
        """Block until the task is finished or ``timeout_s`` passes (long poll or polling)."""
        deadline = anyio.current_time() + max(0.0, timeout_s)
        if await self._wire.discovery.has("wait"):
            while True:
                chunk = min(max(0.0, deadline - anyio.current_time()), WAIT_CHUNK_S)
                result = await self._wire.call(
                    "wait",
                    task_id,
                    query={"timeout_ms": math.ceil(chunk * 1000)},
                    read_timeout_s=self._read_timeout(chunk),
                    into=WaitResult,
                )
                if result.finished or anyio.current_time() >= deadline:
                    return result
        while True:
            detail = await get_task(self._wire, task_id)
            outcome = await self._outcome(detail)
            if outcome is not None:
                return await self._finished(detail, outcome)
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return WaitResult(finished=False, outcome="pending", task=detail)
            await anyio.sleep(min(self._poll_interval_s, remaining))

    async def _outcome(self, detail: TaskDetail) -> Any:
        reason = detail.dead_letter_reason
        if reason is not None:
            return reason if reason in ("cancelled", "expired") else "dead_lettered"
        definition = self._pipelines.get(detail.pipeline_id)
        if definition is None:
            # Pipelines cannot be changed on NullTickets: cache the definition.
            pipeline = await self._wire.call("get_pipeline", detail.pipeline_id, into=Pipeline)
            definition = self._pipelines[detail.pipeline_id] = pipeline.definition
        states = definition.get("states")
        state = states.get(detail.stage) if isinstance(states, dict) else None
        if isinstance(state, dict) and state.get("terminal") is True:
            return "done"
        return None

    async def _finished(self, detail: TaskDetail, outcome: Any) -> WaitResult:
        artifacts: list[Artifact] = []
        cursor: str | None = None
        while True:
            page = await list_artifacts(self._wire, detail.id, None, 1000, cursor)
            artifacts.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        result_event: Event | None = None
        run_ids = [detail.latest_run.id] if detail.latest_run is not None else []
        if await self._wire.discovery.has("runs"):
            run_ids = [r.id for r in await list_runs(self._wire, detail.id)] or run_ids
        for run_id in reversed(run_ids):
            cursor = None
            while True:
                events = await list_events(self._wire, run_id, 1000, cursor)
                for event in events.items:
                    if event.kind == "result":
                        result_event = event
                cursor = events.next_cursor
                if cursor is None:
                    break
            if result_event is not None:
                break
        return WaitResult(
            finished=True,
            outcome=outcome,
            task=detail,
            artifacts=artifacts,
            result_event=result_event,
        )
