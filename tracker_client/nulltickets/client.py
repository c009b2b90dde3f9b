"""The NullTickets HTTP client: :class:`RemoteTracker` implements the ``Tracker`` protocol.

It talks to a real NullTickets server (docs/guarantees/nulltickets.md) or to the served one and
absorbs the server's traps so that the worker cannot tell the difference. It is composed of
:class:`~.options.ClientOptions` (every option, parsed once), :class:`~.transport.HttpTransport`
(one request: connection, credentials, timeouts, size guard, errors; no retry unless asked),
:class:`~.discovery.Discovery` (``GET /health`` read once), :class:`~.wire.Wire` (a row of the
contract table turned into a request and its answer into a model) and the quirks, each where it
is handled: :mod:`.tasks` (retry defaults, bulk splitting, the 500 on unknown artifact ids),
:mod:`.leases` (TTL clamp, the 300 s reset on heartbeat, event trimming, ``fail`` and allowed
triggers read back, ``release`` by expiry), :mod:`.reads` (cursors rebuilt from the last item),
:mod:`.waiting` (long polls, or polling and sleeping on a plain server), :mod:`.limits`.

Its methods are in five parts: here the lifecycle and the admin and producer side (pipelines,
tasks, dependencies, assignments, artifacts, the backlog operations), and a base class each for
the lease and run calls a worker makes (:class:`~.runs.RunCalls`), the KV store
(:class:`~.store.StoreCalls`), the agent extensions (:class:`~.agents.AgentCalls`) and the
batching ones (:class:`~.batching.BatchCalls`). The methods say only what differs from the
table; backlog operations NullTickets lacks raise :class:`~tracker_client.errors.Unsupported`
naming the operation on a plain server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Unpack

import httpx
from pydantic import SecretStr

from tracker_client.capabilities import Capabilities
from tracker_client.contract.batch_models import FinishItem, FinishManyOutcome
from tracker_client.contract.table import operation
from tracker_client.contract.wire_models import CancelCountAnswer, IdAnswer
from tracker_client.models import (
    Artifact,
    ArtifactCreate,
    Assignment,
    Dependency,
    Health,
    Lease,
    Page,
    Pipeline,
    QueueStats,
    Run,
    Task,
    TaskCreate,
    TaskDetail,
)
from tracker_client.nulltickets import reads
from tracker_client.nulltickets import tasks as writes
from tracker_client.nulltickets.agents import AgentCalls
from tracker_client.nulltickets.ahead import ClaimingAhead
from tracker_client.nulltickets.batching import BatchCalls
from tracker_client.nulltickets.codec import check_json
from tracker_client.nulltickets.discovery import Advertised, Discovery
from tracker_client.nulltickets.options import ClientOptionArgs, ClientOptions, RetrySettings
from tracker_client.nulltickets.pairing import Pairing
from tracker_client.nulltickets.runs import RunCalls
from tracker_client.nulltickets.store import StoreCalls
from tracker_client.nulltickets.transport import HttpTransport
from tracker_client.nulltickets.waiting import Waiting
from tracker_client.nulltickets.wire import Wire
from tracker_client.observe_models import WorkerInfo
from tracker_client.ops_models import (
    CancelResult,
    MaintenanceReport,
    PipelinePlan,
    RequeueResult,
    WaitResult,
)

__all__ = ["Capabilities", "ClientOptions", "RemoteTracker", "RetrySettings"]


class RemoteTracker(RunCalls, StoreCalls, AgentCalls, BatchCalls):
    """The ``Tracker`` protocol over HTTP (NullTickets or ``backlog-worker tracker serve``).

    ``RemoteTracker(url, api_token=None, transport=None, **options)`` with the options of
    :class:`~.options.ClientOptionArgs` (``timeout_s``, ``connect_timeout_s``, ``retry``,
    ``retry_attempts``/``retry_initial_s``/``retry_max_wait_s``/``retry_budget_s``,
    ``max_request_bytes``, ``poll_interval_s``), which may also ride on the URL
    (``http://host:7700?timeout_s=5``; strings are coerced). A call is tried once unless
    ``retry``/``retry_attempts`` ask for more. ``transport`` replaces httpx's (tests).
    """

    def __init__(
        self,
        url: str,
        *,
        api_token: str | SecretStr | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Unpack[ClientOptionArgs],
    ) -> None:
        token = api_token.get_secret_value() if isinstance(api_token, SecretStr) else api_token
        self.options = ClientOptions.parse(url, api_token=token, **options)
        self.url = self.options.url
        self.poll_interval_s = self.options.poll_interval_s
        self._http = HttpTransport(self.options, transport)
        self._discovery = Discovery(self._http, self.url)
        self._wire = Wire(self._http, self._discovery)
        self._waiting = Waiting(self._wire, self.options.poll_interval_s)
        #: A ``finish_many`` and the ``claim_many`` that follows it in one request, where the
        #: server advertises ``finish_claim`` (:mod:`~tracker_client.nulltickets.pairing`).
        self.pairing = Pairing(self._wire)
        #: A busy worker's next batch claimed with its reports, kept here
        #: (:mod:`~tracker_client.nulltickets.ahead`), where the server advertises
        #: ``finish_claim``.
        self.ahead = ClaimingAhead(self._wire, self.pairing)
        self._closed = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- lifecycle and capabilities -------------------------------------------------------------
    @property
    def advertised(self) -> Advertised | None:
        """What ``/health`` advertised; None until the first request."""
        return self._discovery.advertised

    async def capabilities(self) -> Capabilities:
        """What this server can do, from ``/health`` (read once; a plain NullTickets: nothing)."""
        return await self._discovery.capabilities()

    @property
    def max_lease_ttl_ms(self) -> int | None:
        """The longest lease that survives a heartbeat (300 s on NullTickets; None: no limit).
        Prefer ``capabilities().max_lease_ttl_ms``."""
        return self._discovery.max_lease_ttl_ms

    async def health(self) -> Health:
        """``GET /health``; also refreshes what the server advertises about itself."""
        return self._wire.parse(operation("health"), await self._discovery.health(), Health)

    async def ping(self) -> None:
        """``GET /health``, read for what the server advertises only (the census unparsed)."""
        await self._discovery.health()

    async def aclose(self) -> None:
        """Release the leases claimed ahead and never handed out, close the HTTP client.
        Idempotent."""
        if not self._closed:
            self._closed = True
            try:
                await self.ahead.aclose()  # the leases claimed ahead, released
            finally:
                await self._http.aclose()

    # -- pipelines ------------------------------------------------------------------------------
    async def create_pipeline(
        self, name: str, definition: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> str:
        """``POST /pipelines``; returns the id. The definition is sent as given (the tracker
        names what is wrong with one that is no object)."""
        check_json(definition, "pipeline definition")
        body = {"name": name, "definition": definition}
        if isinstance(definition, Mapping):
            body["definition"] = dict(definition)
        answer = await self._wire.call(
            "create_pipeline", body=body, idempotency_key=idempotency_key, into=IdAnswer
        )
        return answer.id

    async def list_pipelines(self) -> list[Pipeline]:
        """``GET /pipelines``, newest first."""
        return await self._wire.call("list_pipelines", into=list[Pipeline])

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        """``GET /pipelines/{pipeline_id}``."""
        return await self._wire.call("get_pipeline", pipeline_id, into=Pipeline)

    # -- tasks ----------------------------------------------------------------------------------
    async def create_task(self, task: TaskCreate, *, idempotency_key: str | None = None) -> str:
        """``POST /tasks``; returns the id (see :func:`.tasks.task_body` for what is sent)."""
        body = await writes.task_body(self._wire, task, "create_task")
        answer = await self._wire.call(
            "create_task", body=body, idempotency_key=idempotency_key, into=IdAnswer
        )
        return answer.id

    async def create_tasks(
        self, tasks: Sequence[TaskCreate], *, idempotency_key: str | None = None
    ) -> list[str]:
        """``POST /tasks/bulk``, split into requests that fit the server's size limit (only on
        NullTickets): then each request is atomic but the batch is not; an error carries
        ``created_ids``, and the *same* ``idempotency_key`` resumes without duplicates."""
        return await writes.create_tasks(self._wire, tasks, idempotency_key)

    async def list_tasks(
        self,
        *,
        stage: str | None = None,
        pipeline_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Task]:
        """``GET /tasks``; ``next_cursor`` is rebuilt from the last item (no skipped task)."""
        return await reads.list_tasks(self._wire, stage, pipeline_id, limit, cursor)

    async def get_task(self, task_id: str) -> TaskDetail:
        """``GET /tasks/{task_id}``."""
        return await reads.get_task(self._wire, task_id)

    async def list_runs(self, task_id: str) -> list[Run]:
        """Every run of the task (served tracker); only the latest run on NullTickets."""
        return await reads.list_runs(self._wire, task_id)

    # -- dependencies and assignments -----------------------------------------------------------
    async def add_dependency(
        self, task_id: str, depends_on_task_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """``POST /tasks/{task_id}/dependencies`` (cycles refused)."""
        body = {"depends_on_task_id": depends_on_task_id}
        await self._wire.send("add_dependency", task_id, body=body, idempotency_key=idempotency_key)

    async def list_dependencies(self, task_id: str) -> list[Dependency]:
        """``GET /tasks/{task_id}/dependencies``."""
        return await self._wire.call("list_dependencies", task_id, into=list[Dependency])

    async def assign(
        self,
        task_id: str,
        agent_id: str,
        *,
        assigned_by: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """``POST /tasks/{task_id}/assignments``."""
        body = {"agent_id": agent_id}
        if assigned_by is not None:
            body["assigned_by"] = assigned_by
        await self._wire.send("assign", task_id, body=body, idempotency_key=idempotency_key)

    async def list_assignments(self, task_id: str) -> list[Assignment]:
        """``GET /tasks/{task_id}/assignments``."""
        return await self._wire.call("list_assignments", task_id, into=list[Assignment])

    async def unassign(
        self, task_id: str, agent_id: str, *, idempotency_key: str | None = None
    ) -> None:
        """``DELETE /tasks/{task_id}/assignments/{agent_id}``."""
        await self._wire.send("unassign", task_id, agent_id, idempotency_key=idempotency_key)

    # -- artifacts and operations ---------------------------------------------------------------
    async def add_artifact(
        self, artifact: ArtifactCreate, *, idempotency_key: str | None = None
    ) -> str:
        """``POST /artifacts``. After a 500 the ids are checked (NullTickets answers 500, not
        404, for an unknown ``task_id``/``run_id``): an unknown one is ``NotFound``."""
        return await writes.add_artifact(self._wire, artifact, idempotency_key)

    async def list_artifacts(
        self,
        *,
        task_id: str | None = None,
        run_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Artifact]:
        """``GET /artifacts``; cursor rebuilt from the last item."""
        return await reads.list_artifacts(self._wire, task_id, run_id, limit, cursor)

    async def queue_stats(
        self, *, near_expiry_ms: int | None = 60_000, stuck_ms: int = 300_000
    ) -> QueueStats:
        """``GET /ops/queue`` (``near_expiry_ms=None``: see :func:`.reads.queue_stats`)."""
        return await reads.queue_stats(self._wire, near_expiry_ms, stuck_ms)

    # -- backlog extensions (served tracker only) ----------------------------------------------
    async def cancel(
        self, task_id: str, *, reason: str = "cancelled", idempotency_key: str | None = None
    ) -> CancelResult:
        """``POST /tasks/{task_id}/cancel`` (``Idempotency-Key``: the key, or a fresh one that
        the retries of this call reuse)."""
        return await self._wire.call(
            "cancel",
            task_id,
            body={"reason": reason},
            idempotency_key=idempotency_key,
            into=CancelResult,
        )

    async def cancel_all(
        self,
        *,
        pipeline_id: str | None = None,
        role: str | None = None,
        idempotency_key: str | None = None,
    ) -> int:
        """``POST /ops/cancel-all``; how many tasks were cancelled."""
        body = {k: v for k, v in (("pipeline_id", pipeline_id), ("role", role)) if v is not None}
        answer = await self._wire.call(
            "cancel_all", body=body, idempotency_key=idempotency_key, into=CancelCountAnswer
        )
        return answer.cancelled

    async def requeue(
        self,
        task_id: str,
        *,
        stage: str | None = None,
        reset_attempts: bool = True,
        idempotency_key: str | None = None,
    ) -> RequeueResult:
        """``POST /tasks/{task_id}/requeue``."""
        body: dict[str, Any] = {"reset_attempts": reset_attempts}
        if stage is not None:
            body["stage"] = stage
        return await self._wire.call(
            "requeue", task_id, body=body, idempotency_key=idempotency_key, into=RequeueResult
        )

    async def call(self, operation: str, /, *params: str, **arguments: Any) -> Any:
        """Any operation of the contract table by name, from its row alone (see the protocol)."""
        return await self._wire.generic(operation, *params, **arguments)

    async def claim_many(
        self,
        agent_id: str,
        agent_role: str,
        lease_ttl_ms: int,
        n: int,
        *,
        concurrency: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> list[Lease]:
        """``POST /leases/claim-many`` (extension ``claim_many``): up to ``n`` leases of
        ``agent_role`` in one write (empty: no work)."""
        arguments: dict[str, Any] = {"concurrency": concurrency} if concurrency is not None else {}
        claim = {"agent_id": agent_id, "agent_role": agent_role, "lease_ttl_ms": lease_ttl_ms}

        async def send(k: int) -> list[Lease]:
            async def alone() -> list[Lease]:
                leases: list[Lease] = await self.call(
                    "claim_many", n=k, idempotency_key=idempotency_key, **claim, **arguments
                )
                return leases

            if not self._pairs():
                return await alone()
            body = {**claim, "n": k, **arguments}
            return await self.pairing.claim_many(body, idempotency_key, alone)

        if not self._pairs() or concurrency is not None:
            return await send(n)
        # A plain claim: answered from the leases claimed ahead where some are kept (.ahead).
        return await self.ahead.claim_many(
            agent_id, agent_role, lease_ttl_ms, n, idempotency_key, send
        )

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """``POST /runs/finish-many`` (extension ``finish_many``): the final reports of many
        runs in one request; per item, its ``finish`` answer or the error refusing it. Where
        the server advertises ``finish_claim``, the ``claim_many`` that follows within a few
        scheduling passes rides in the same request (:mod:`~.pairing`)."""
        if not self._pairs():
            return await super().finish_many(items)
        return await self.ahead.finish_many(items)

    def _pairs(self) -> bool:
        advertised = self._discovery.advertised
        return advertised is not None and "finish_claim" in advertised.extensions

    async def apply_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """``POST /pipelines/apply`` (extension ``pipeline_versions``; ``Unsupported`` before
        anything is sent on a server that lacks it)."""
        return await self._wire.call(
            "apply_pipeline", body=_apply_body(name, definition, moves), into=PipelinePlan
        )

    async def diff_pipeline(
        self, name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None = None
    ) -> PipelinePlan:
        """``POST /pipelines/diff`` (extension ``pipeline_versions``): writes nothing."""
        return await self._wire.call(
            "diff_pipeline", body=_apply_body(name, definition, moves), into=PipelinePlan
        )

    async def register_worker(self, worker_id: str, **fields: Any) -> WorkerInfo:
        """``PUT`` the worker's entry (extension ``workers``): register or refresh it."""
        info: WorkerInfo = await self.call("register_worker", worker_id, **fields)
        return info

    async def maintenance(self) -> MaintenanceReport:
        """``POST /ops/maintenance`` (NullTickets reclaims expired leases itself, during
        claims only)."""
        return await self._wire.call("maintenance", into=MaintenanceReport)

    async def wait_for_work(self, timeout_s: float, *, since: str | None = None) -> str:
        """Long-poll ``GET /ops/wait-for-work`` (served tracker); sleep ``timeout_s`` elsewhere.
        Returning is a hint, not a promise of work; the answer is the server's generation
        (``since``: see :meth:`~tracker_client.nulltickets.waiting.Waiting.wait_for_work`)."""
        return await self._waiting.wait_for_work(timeout_s, since=since)

    async def wait(self, task_id: str, *, timeout_s: float) -> WaitResult:
        """Block until the task is finished or ``timeout_s`` passes: a long poll on the served
        tracker, ``GET /tasks/{task_id}`` every ``poll_interval_s`` on NullTickets."""
        return await self._waiting.wait(task_id, timeout_s)


def _apply_body(
    name: str, definition: Mapping[str, Any], moves: Mapping[str, str] | None
) -> dict[str, Any]:
    """The body of ``apply_pipeline``/``diff_pipeline`` (sent as given: the rail names what is
    wrong with it)."""
    check_json(definition, "pipeline definition")
    body: dict[str, Any] = {"name": name, "definition": dict(definition)}
    if moves is not None:
        body["moves"] = dict(moves)
    return body
