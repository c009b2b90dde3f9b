"""The NullTickets HTTP client: :class:`RemoteTracker` implements the ``Tracker`` protocol.

It talks to a real NullTickets server (CONTRACT.md) or to ``backlog-worker tracker serve`` (the
embedded tracker over the same API, with the traps fixed and extension routes). It absorbs the
server's traps so that the worker cannot tell the difference:

* one connection per request, timeouts, ``Content-Length`` bodies, requests kept under 60 KB
  (bulk creates split, oversized event data trimmed with a marker, anything else refused before
  sending);
* admin token on admin routes, the lease token replacing it on lease routes;
* an idempotency key per logical write, reused across its retries only (never on heartbeats, a
  fresh one per claim so a cached 204 is never replayed);
* cursors built from the last item (the server's own ``next_cursor`` skips one item per page);
* error bodies parsed defensively; statuses mapped to :mod:`tracker_client.errors`; transient
  failures retried by tenacity;
* dead letters read back from the task after ``fail``; leases over 300 s clamped.

Backlog operations NullTickets lacks raise :class:`~tracker_client.errors.Unsupported` naming the
operation on a plain server, and use the extension routes when the server is
``backlog-worker tracker serve`` (detected once, from ``"extensions"`` in ``GET /health``).
``wait`` polls the task on a plain server; ``wait_for_work`` sleeps.

Splitting a bulk create makes it non-atomic on a NullTickets server (see ``create_tasks``).
"""

from __future__ import annotations

import math
from typing import Any

import anyio
from pydantic import TypeAdapter

from tracker_client.capabilities import Capabilities
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import (
    Artifact,
    CancelResult,
    Event,
    MaintenanceReport,
    Page,
    RequeueResult,
    Run,
    TaskDetail,
    WaitResult,
)
from tracker_client.nulltickets.leases import RemoteLeases
from tracker_client.nulltickets.transport import RetrySettings, encode_query
from tracker_client.nulltickets.transport import quote_segment as seg

__all__ = ["Capabilities", "RemoteTracker", "RetrySettings"]

_RUNS = TypeAdapter(list[Run])
_EVENT_PAGE = TypeAdapter(Page[Event])

#: Longest single long-poll of ``GET /tasks/{id}/wait``; longer waits loop.
WAIT_CHUNK_S = 25.0


class RemoteTracker(RemoteLeases):
    """The ``Tracker`` protocol over HTTP (NullTickets or ``backlog-worker tracker serve``).

    ``RemoteTracker(url, api_token=None, timeout_s=10.0, connect_timeout_s=5.0, retry=None,
    retry_attempts=..., retry_initial_s=..., retry_max_wait_s=..., retry_budget_s=...,
    max_request_bytes=60_000, poll_interval_s=1.0, transport=None)``. Options may also be given
    as URL query parameters (``http://host:7700?timeout_s=5``); strings are coerced.
    ``max_lease_ttl_ms`` tells the worker the longest lease that survives a heartbeat
    (300 s on NullTickets).
    """

    # -- runs and task events -----------------------------------------------------------------
    async def list_runs(self, task_id: str) -> list[Run]:
        """Every run of the task (served tracker); only the latest run on NullTickets."""
        if await self._has("runs"):
            doc = await self._json("GET", f"/tasks/{seg(task_id)}/runs")
            return self._parse(_RUNS, doc, "GET /tasks/{id}/runs")
        detail = await self.get_task(task_id)
        return [detail.latest_run] if detail.latest_run is not None else []

    async def list_task_events(
        self, task_id: str, *, limit: int = 100, cursor: str | None = None, kind: str | None = None
    ) -> Page[Event]:
        """Every event of the task, or those of one ``kind`` (served tracker only)."""
        await self._require("task_events", "list_task_events")
        self._check_limit(limit, "list_task_events")
        query = encode_query({"limit": limit, "cursor": cursor, "kind": kind})
        doc = await self._json("GET", f"/tasks/{seg(task_id)}/events?{query}")
        page = self._parse(_EVENT_PAGE, doc, "GET /tasks/{id}/events")
        last = page.items[-1].id if page.items and page.next_cursor is not None else None
        return Page[Event](items=page.items, next_cursor=None if last is None else str(last))

    # -- backlog extensions -------------------------------------------------------------------
    async def cancel(self, task_id: str, *, reason: str = "cancelled") -> CancelResult:
        """``POST /tasks/{id}/cancel`` (served tracker only)."""
        await self._require("cancel", "cancel")
        doc = await self._json(
            "POST",
            f"/tasks/{seg(task_id)}/cancel",
            body={"reason": reason},
            idempotency_key=self._key(None),
        )
        return self._parse(CancelResult, doc, "POST /tasks/{id}/cancel")

    async def cancel_all(self, *, pipeline_id: str | None = None, role: str | None = None) -> int:
        """``POST /ops/cancel-all`` (served tracker only); returns how many were cancelled."""
        await self._require("cancel_all", "cancel_all")
        body = {k: v for k, v in (("pipeline_id", pipeline_id), ("role", role)) if v is not None}
        doc = await self._json(
            "POST", "/ops/cancel-all", body=body, idempotency_key=self._key(None)
        )
        count = doc.get("cancelled") if isinstance(doc, dict) else None
        if not isinstance(count, int):
            raise TrackerUnavailable(
                "POST /ops/cancel-all: answer without 'cancelled'", code="invalid_response"
            )
        return count

    async def requeue(
        self, task_id: str, *, stage: str | None = None, reset_attempts: bool = True
    ) -> RequeueResult:
        """``POST /tasks/{id}/requeue`` (served tracker only)."""
        await self._require("requeue", "requeue")
        body: dict[str, Any] = {"reset_attempts": reset_attempts}
        if stage is not None:
            body["stage"] = stage
        doc = await self._json(
            "POST",
            f"/tasks/{seg(task_id)}/requeue",
            body=body,
            idempotency_key=self._key(None),
        )
        return self._parse(RequeueResult, doc, "POST /tasks/{id}/requeue")

    async def maintenance(self) -> MaintenanceReport:
        """``POST /ops/maintenance`` (served tracker only).

        NullTickets reclaims expired leases itself, but only during claims.
        """
        await self._require("maintenance", "maintenance")
        doc = await self._json("POST", "/ops/maintenance", body={})
        return self._parse(MaintenanceReport, doc, "POST /ops/maintenance")

    async def wait_for_work(self, timeout_s: float) -> None:
        """Long-poll ``GET /ops/wait-for-work`` (served tracker); sleep ``timeout_s`` elsewhere.

        Returning is a hint, not a promise of work; a transport failure also just returns (after
        at most ``timeout_s``) so an idle worker goes back to claiming.
        """
        since = self._http.generation  # before any await: a write racing with this call counts
        timeout_s = max(0.0, timeout_s)
        if not await self._has("wait_for_work"):
            await anyio.sleep(timeout_s)
            return
        deadline = anyio.current_time() + timeout_s
        query = encode_query(
            {"timeout_ms": math.ceil(min(timeout_s, WAIT_CHUNK_S) * 1000), "since": since}
        )
        try:
            await self._call(
                "GET",
                f"/ops/wait-for-work?{query}",
                read_timeout_s=min(timeout_s, WAIT_CHUNK_S) + self._read_timeout() + 1.0,
                retry=False,
            )
        except TrackerUnavailable:
            await anyio.sleep(max(0.0, deadline - anyio.current_time()))

    def _read_timeout(self) -> float:
        return self._http.timeout.read or 10.0

    # -- wait ---------------------------------------------------------------------------------
    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished or ``timeout_s`` passes.

        Long-polls ``GET /tasks/{id}/wait`` on the served tracker; polls ``GET /tasks/{id}``
        every ``poll_interval_s`` on NullTickets.
        """
        deadline = anyio.current_time() + max(0.0, timeout_s)
        if await self._has("wait"):
            while True:
                remaining = max(0.0, deadline - anyio.current_time())
                chunk = min(remaining, WAIT_CHUNK_S)
                query = encode_query({"timeout_ms": math.ceil(chunk * 1000)})
                doc = await self._json(
                    "GET",
                    f"/tasks/{seg(task_id)}/wait?{query}",
                    read_timeout_s=chunk + self._read_timeout() + 1.0,
                )
                result = self._parse(WaitResult, doc, "GET /tasks/{id}/wait")
                if result.finished or anyio.current_time() >= deadline:
                    return result
        while True:
            detail = await self.get_task(task_id)
            outcome = await self._outcome(detail)
            if outcome is not None:
                return await self._finished(detail, outcome)
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return WaitResult(finished=False, outcome="pending", task=detail)
            await anyio.sleep(min(self.poll_interval_s, remaining))

    async def _outcome(self, detail: TaskDetail) -> Any:
        reason = detail.dead_letter_reason
        if reason is not None:
            return reason if reason in ("cancelled", "expired") else "dead_lettered"
        definition = self._pipelines.get(detail.pipeline_id)
        if definition is None:
            # Pipelines cannot be changed on NullTickets: cache the definition.
            definition = (await self.get_pipeline(detail.pipeline_id)).definition
            self._pipelines[detail.pipeline_id] = definition
        states = definition.get("states")
        state = states.get(detail.stage) if isinstance(states, dict) else None
        if isinstance(state, dict) and state.get("terminal") is True:
            return "done"
        return None

    async def _finished(self, detail: TaskDetail, outcome: Any) -> WaitResult:
        artifacts: list[Artifact] = []
        cursor: str | None = None
        while True:
            page = await self.list_artifacts(task_id=detail.id, limit=1000, cursor=cursor)
            artifacts.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        result_event: Event | None = None
        run_ids = [detail.latest_run.id] if detail.latest_run is not None else []
        if await self._has("runs"):
            run_ids = [r.id for r in await self.list_runs(detail.id)] or run_ids
        for run_id in reversed(run_ids):
            cursor = None
            while True:
                events = await self.list_events(run_id, limit=1000, cursor=cursor)
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
