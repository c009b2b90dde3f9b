"""The wire contract's table: :data:`OPERATIONS`, one :class:`~.contract_types.Operation` a row.

Each row says what NullTickets documents for one operation (method, path, auth, body,
answer, error statuses, quirks) and what the served tracker adds (its extension, the features
it extends, whether it wakes long polls). It is read through
:mod:`tracker_client.contract.table`, which re-exports it with the lookups built on it
(:func:`~.table.operation`, :func:`~.table.match`); it stands apart so that the table,
most of the contract by lines, is one page of data with nothing else in it.

Pure data: it imports the models and the row types, and nothing that talks.
"""

from __future__ import annotations

from typing import Any

from tracker_client import models as m
from tracker_client import ops_models as om
from tracker_client import schedule_models as sm
from tracker_client.agent_models import Upstream
from tracker_client.bounds import MAX_LIMIT, MAX_WAIT_MS
from tracker_client.contract.batch_bodies import (
    ClaimManyBody,
    FinishBody,
    FinishManyBody,
    FinishManyResult,
    ParkedClaimBody,
)
from tracker_client.contract.batch_models import FinishResult
from tracker_client.contract.contract_types import Auth, Method, Operation, Query
from tracker_client.contract.parked_models import ParkedCancelled
from tracker_client.contract.wire_models import (
    AssignBody,
    BulkBody,
    CancelAllBody,
    CancelBody,
    CancelCountAnswer,
    CheckpointBody,
    ClaimBody,
    CountAnswer,
    DependencyBody,
    EventBody,
    EventIdAnswer,
    ExpiryAnswer,
    FailBody,
    HeartbeatBody,
    IdAnswer,
    IdsAnswer,
    OtlpTracesBody,
    PipelineApplyBody,
    PipelineBody,
    PurgeBody,
    ReleaseBody,
    RequeueAllBody,
    RequeueBody,
    StatusAnswer,
    StoreBody,
    TaskTransitionBody,
    TransitionBody,
    WithdrawnAnswer,
)
from tracker_client.observe_models import OtlpIngestResult, Span, WorkerInfo, WorkerRegister
from tracker_client.ops_models import PipelinePlan

__all__ = ["OPERATIONS"]

_LIMIT = Query("limit", "integer", minimum=1, maximum=MAX_LIMIT)
_LIMIT_CURSOR = (_LIMIT, Query("cursor"))
_WAIT = (Query("timeout_ms", "integer", minimum=0, maximum=MAX_WAIT_MS),)
_SKIP = "next_cursor skips one item per page: build the cursor from the last item"


def _op(
    name: str, method: Method, path: str, summary: str, auth: Auth = "admin", **kw: Any
) -> Operation:
    return Operation(name=name, method=method, path=path, auth=auth, summary=summary, **kw)


# fmt: off
#: Every operation, in route order: a literal path comes before a parametrised one it overlaps
#: (``/store/search`` before ``/store/{namespace}``), since the first match wins.
OPERATIONS: tuple[Operation, ...] = (
    # health and discovery
    _op("health", "GET", "/health", "Health, stage census, extensions and limits", "public",
        response=m.Health),
    _op("openapi", "GET", "/openapi.json", "This document", "public"),
    _op("openapi_well_known", "GET", "/.well-known/openapi.json", "This document (well-known)",
        "public"),
    # OTLP ingest (JSON spans parsed and linked to nulltickets.task_id / run_id; else a blob)
    _op("ingest_traces", "POST", "/v1/traces", "OTLP ingest: JSON spans parsed and linked to "
        "their task and run; any other content type stored as a blob", body=OtlpTracesBody,
        response=OtlpIngestResult, errors=(400, 413), body_param="document", raw_body=True),
    _op("ingest_traces_collector", "POST", "/otlp/v1/traces", "OTLP ingest at the collector's "
        "path (as POST /v1/traces)", body=OtlpTracesBody, response=OtlpIngestResult,
        errors=(400, 413), body_param="document", raw_body=True),
    # pipelines
    _op("create_pipeline", "POST", "/pipelines", "Create pipeline", body=PipelineBody,
        status=201, response=IdAnswer, errors=(400, 409), idempotent=True),
    _op("list_pipelines", "GET", "/pipelines", "List pipelines, newest first",
        response=m.Pipeline, shape="list"),
    _op("get_pipeline", "GET", "/pipelines/{pipeline_id}", "Get pipeline", response=m.Pipeline,
        errors=(404,)),
    # tasks
    _op("create_tasks", "POST", "/tasks/bulk", "Create tasks, all or nothing", body=BulkBody,
        status=201, response=IdsAnswer, errors=(400, 404, 409, 429),
        features=("backlog", "delayed_tasks", "dedupe", "subtasks", "budgets"), wakes=True,
        idempotent=True, quirk="over 64 KiB the request is dropped unanswered: split it"),
    _op("create_task", "POST", "/tasks", "Create task", body=m.TaskCreate, status=201,
        response=IdAnswer, errors=(400, 404, 409, 429),
        features=("backlog", "delayed_tasks", "dedupe", "subtasks", "budgets"), wakes=True,
        idempotent=True),
    _op("list_tasks", "GET", "/tasks", "List tasks (cursor = last item, never skips)",
        response=m.Task, shape="page", errors=(400,), features=("list_state",),
        query=(Query("stage"), Query("pipeline_id"), *_LIMIT_CURSOR), quirk=_SKIP),
    _op("get_task", "GET", "/tasks/{task_id}", "Get task with latest run and relations",
        response=m.TaskDetail, errors=(404,)),
    _op("add_dependency", "POST", "/tasks/{task_id}/dependencies", "Add dependency (cycles "
        "refused)", body=DependencyBody, status=201, response=StatusAnswer,
        errors=(400, 404, 409), idempotent=True),
    _op("list_dependencies", "GET", "/tasks/{task_id}/dependencies", "List dependencies",
        response=m.Dependency, shape="list"),
    _op("assign", "POST", "/tasks/{task_id}/assignments", "Assign task", body=AssignBody,
        status=201, response=StatusAnswer, errors=(400, 404), idempotent=True),
    _op("list_assignments", "GET", "/tasks/{task_id}/assignments", "List assignments",
        response=m.Assignment, shape="list"),
    _op("unassign", "DELETE", "/tasks/{task_id}/assignments/{agent_id}", "Unassign",
        response=StatusAnswer, errors=(404,), wakes=True, idempotent=True),
    # leases and runs
    _op("claim", "POST", "/leases/claim", "Claim the best eligible task (204: no work)",
        body=ClaimBody, response=m.Lease, errors=(400,), idempotent=True,
        features=("checkpoints",)),
    _op("claim_many", "POST", "/leases/claim-many", "Claim up to n (1..100) eligible tasks of a "
        "role in one write, by claim's rules (a list; empty: no work)", body=ClaimManyBody,
        response=m.Lease, shape="list", errors=(400,), extension="claim_many", idempotent=True,
        features=("checkpoints",)),
    _op("parked_claim", "POST", "/leases/claim-parked", "Claim up to n tasks of a role, "
        "waiting up to wait_ms for work (a list; empty: none came); Idempotency-Key required",
        body=ParkedClaimBody, response=m.Lease, shape="list", errors=(400,),
        extension="parked_claim", idempotent=True, features=("checkpoints",)),
    _op("cancel_parked_claim", "POST", "/leases/claim-parked/cancel", "Stop the parked claim "
        "of this Idempotency-Key, giving back (releasing) what it leased",
        response=ParkedCancelled, errors=(400,), extension="parked_claim", idempotent=True),
    _op("heartbeat", "POST", "/leases/{lease_id}/heartbeat", "Extend the lease by its own TTL",
        "lease", body=HeartbeatBody, body_required=False, response=ExpiryAnswer,
        errors=(400, 401, 404, 410), features=("heartbeat_ttl", "checkpoints"),
        quirk="the lease is reset to 300 s whatever TTL it was claimed with"),
    _op("add_event", "POST", "/runs/{run_id}/events", "Add run event", "lease", body=EventBody,
        status=201, response=EventIdAnswer, errors=(400, 401, 404, 410), idempotent=True),
    _op("list_events", "GET", "/runs/{run_id}/events", "List run events", response=m.Event,
        shape="page", errors=(400,), query=_LIMIT_CURSOR,
        quirk=_SKIP + "; in the lease class at the auth layer: send some Bearer value"),
    _op("transition", "POST", "/runs/{run_id}/transition", "Complete the run and move the task",
        "lease", body=TransitionBody, response=m.TransitionResult,
        errors=(400, 401, 404, 409, 410), wakes=True, idempotent=True, features=("fan_in",)),
    _op("fail", "POST", "/runs/{run_id}/fail", "Fail the run (retry or dead letter)", "lease",
        body=FailBody, response=m.FailResult, errors=(400, 401, 404, 410),
        features=("fail_result", "backlog"), wakes=True, idempotent=True,
        quirk="answers {\"status\":\"failed\"} only: read the task back to know what followed"),
    _op("release", "POST", "/runs/{run_id}/release", "Give an unfinished run's task back (worker "
        "shutdown): no attempt counted", "lease", body=ReleaseBody, response=m.ReleaseResult,
        errors=(400, 401, 404, 410), extension="release", idempotent=True),
    _op("withdraw", "POST", "/runs/{run_id}/withdraw", "Undo a lease claimed ahead and never "
        "handed out: the task as if never claimed (no run left, attempt count unchanged)",
        "lease", response=WithdrawnAnswer, errors=(401, 404, 410), extension="withdraw"),
    _op("checkpoint", "POST", "/runs/{run_id}/checkpoint", "Replace the run's checkpoint (one "
        "JSON value, at most 64 KiB; the next claim of the task hands it back)", "lease",
        body=CheckpointBody, status=204, errors=(400, 401, 404, 410), extension="checkpoints"),
    _op("finish", "POST", "/runs/{run_id}/finish", "Write the run's last events, then its "
        "transition or its fail: one write, all or nothing", "lease", body=FinishBody,
        response=FinishResult, errors=(400, 401, 404, 409, 410), extension="finish", wakes=True,
        idempotent=True),
    _op("finish_many", "POST", "/runs/finish-many", "Write the final reports of many runs "
        "(each finish's events, then its transition or fail; each under its own lease token and "
        "idempotency key, all or nothing) in one write: one answer entry per item",
        body=FinishManyBody, response=FinishManyResult, errors=(400,), extension="finish_many",
        wakes=True, features=("finish_claim",)),
    # artifacts, ops
    _op("add_artifact", "POST", "/artifacts", "Add artifact", body=m.ArtifactCreate, status=201,
        response=IdAnswer, errors=(400, 404), idempotent=True),
    _op("list_artifacts", "GET", "/artifacts", "List artifacts", response=m.Artifact,
        shape="page", errors=(400,),
        query=(Query("task_id"), Query("run_id"), *_LIMIT_CURSOR), quirk=_SKIP),
    _op("queue_stats", "GET", "/ops/queue", "Per-role queue figures", response=m.QueueStats,
        query=(Query("near_expiry_ms", "integer"), Query("stuck_ms", "integer"))),
    # store
    _op("store_search", "GET", "/store/search", "Full-text search of the store",
        response=m.StoreEntry, shape="list", errors=(400,),
        query=(Query("q", required=True, min_length=1), Query("namespace"), _LIMIT,
               Query("filter_path"), Query("filter_value"))),
    _op("store_put", "PUT", "/store/{namespace}/{key}", "Upsert a value (204)", body=StoreBody,
        status=204, errors=(400,),
        quirk="its 400 error bodies are invalid JSON (an unescaped quote)"),
    _op("store_get", "GET", "/store/{namespace}/{key}", "Get a value", response=m.StoreEntry,
        errors=(404,)),
    _op("store_delete", "DELETE", "/store/{namespace}/{key}", "Delete a key (204)", status=204),
    _op("store_list", "GET", "/store/{namespace}", "List a namespace", response=m.StoreEntry,
        shape="list"),
    _op("store_delete_namespace", "DELETE", "/store/{namespace}", "Delete a namespace (204)",
        status=204),
    # extensions
    _op("cancel", "POST", "/tasks/{task_id}/cancel", "Cancel a waiting or running task (revokes "
        "its lease)", body=CancelBody, body_required=False, response=om.CancelResult,
        errors=(404, 409), extension="cancel", wakes=True, idempotent=True),
    _op("requeue", "POST", "/tasks/{task_id}/requeue", "Requeue a dead-lettered or cancelled "
        "task", body=RequeueBody, body_required=False, response=om.RequeueResult,
        errors=(400, 404, 409), extension="requeue", wakes=True, idempotent=True),
    _op("wait", "GET", "/tasks/{task_id}/wait", "Wait up to timeout_ms (max 60000) for the task "
        "to finish", response=om.WaitResult, errors=(400, 404), query=_WAIT,
        extension="wait"),
    _op("follow_task", "GET", "/tasks/{task_id}/follow", "Wait up to timeout_ms (max 60000) "
        "for events after the cursor, or the task's end", response=om.TaskFollow,
        errors=(400, 404), query=(Query("after"), *_WAIT, _LIMIT),
        extension="follow"),
    _op("list_upstream", "GET", "/tasks/{task_id}/upstream", "Each dependency of the task: "
        "stage, outcome, last result and artifacts", response=Upstream, shape="list",
        errors=(404,), extension="upstream"),
    _op("transition_task", "POST", "/tasks/{task_id}/transition", "Move a task waiting in a "
        "stage with no role (a human step), with a worker transition's checks",
        body=TaskTransitionBody, response=m.TransitionResult, errors=(400, 404, 409),
        extension="human_steps", wakes=True, idempotent=True),
    _op("list_runs", "GET", "/tasks/{task_id}/runs", "Every run of the task", response=m.Run,
        shape="list", errors=(404,), extension="runs"),
    _op("list_task_events", "GET", "/tasks/{task_id}/events", "Every event of the task",
        response=m.Event, shape="page", errors=(400, 404), extension="task_events",
        query=(*_LIMIT_CURSOR, Query("kind"))),
    _op("cancel_all", "POST", "/ops/cancel-all", "Cancel every task of a pipeline and/or role",
        body=CancelAllBody, response=CancelCountAnswer, errors=(400,), extension="cancel_all",
        wakes=True, idempotent=True),
    _op("maintenance", "POST", "/ops/maintenance", "Reclaim expired leases, expire tasks, purge "
        "keys", response=om.MaintenanceReport, extension="maintenance", wakes=True),
    _op("wait_for_work", "GET", "/ops/wait-for-work", "Return when the rail may have new work, "
        "or after timeout_ms (max 60000)", response=StatusAnswer, errors=(400,),
        query=(*_WAIT, Query("since")), extension="wait_for_work"),
    _op("count_tasks", "GET", "/ops/count", "Count tasks, by stage and/or pipeline",
        response=CountAnswer, query=(Query("stage"), Query("pipeline_id")), extension="count"),
    _op("purge", "POST", "/ops/purge", "Delete finished tasks older than older_than_ms, with "
        "their runs, events and artifact records (dry_run counts)", body=PurgeBody,
        response=om.PurgeResult, errors=(400,), extension="purge"),
    _op("requeue_all", "POST", "/ops/requeue-all", "Requeue a pipeline's dead-lettered tasks "
        "(reason, since_ms, stage; dry_run counts)", body=RequeueAllBody,
        response=om.RequeueAllResult, errors=(400, 404), extension="requeue_all", wakes=True),
    _op("create_schedule", "POST", "/schedules", "Create (or, replace, update) a periodic "
        "schedule", body=sm.ScheduleCreate, status=201, response=sm.Schedule,
        errors=(400, 404, 409), extension="schedules"),
    _op("list_schedules", "GET", "/schedules", "List schedules by name", response=sm.Schedule,
        shape="list", extension="schedules"),
    _op("get_schedule", "GET", "/schedules/{name}", "Get a schedule", response=sm.Schedule,
        errors=(404,), extension="schedules"),
    _op("pause_schedule", "POST", "/schedules/{name}/pause", "Pause a schedule (no ticks fire)",
        response=sm.Schedule, errors=(404,), extension="schedules"),
    _op("resume_schedule", "POST", "/schedules/{name}/resume", "Resume a schedule from the "
        "next future tick", response=sm.Schedule, errors=(404,), extension="schedules"),
    _op("delete_schedule", "DELETE", "/schedules/{name}", "Remove a schedule (its tasks stay)",
        response=sm.Schedule, errors=(404,), extension="schedules"),
    _op("list_rate_limits", "GET", "/rate-limits", "Every role's rate limit, by role",
        response=sm.RateLimit, shape="list", extension="rate_limits"),
    _op("set_rate_limit", "PUT", "/rate-limits/{role}", "Set a role's fleet-wide claim rate "
        "and/or cap of leased tasks", body=sm.RateLimitSet, response=sm.RateLimit, errors=(400,),
        extension="rate_limits"),
    _op("clear_rate_limit", "DELETE", "/rate-limits/{role}", "Remove a role's rate limit",
        response=sm.RateLimit, errors=(404,), extension="rate_limits"),
    _op("register_worker", "PUT", "/workers/{worker_id}", "Register a worker or refresh it (an "
        "upsert: last seen now)", body=WorkerRegister, response=WorkerInfo, errors=(400,),
        extension="workers"),
    _op("list_workers", "GET", "/workers", "Registered workers with their state and runs",
        response=WorkerInfo, shape="list", errors=(400,), query=(Query("state"),),
        extension="workers"),
    _op("forget_worker", "DELETE", "/workers/{worker_id}", "Remove a worker's registration",
        response=WorkerInfo, errors=(404,), extension="workers"),
    _op("apply_pipeline", "POST", "/pipelines/apply", "Create a pipeline by name or store its "
        "new definition as the next version, moving the tasks of removed stages (moves)",
        body=PipelineApplyBody, response=PipelinePlan, errors=(400, 409),
        extension="pipeline_versions", wakes=True),
    _op("diff_pipeline", "POST", "/pipelines/diff", "What applying a definition would change "
        "(stages, transitions, settings, tasks that would move), writing nothing",
        body=PipelineApplyBody, response=PipelinePlan, errors=(400, 409),
        extension="pipeline_versions"),
    _op("list_spans", "GET", "/tasks/{task_id}/spans", "The task's OTLP spans (or one run's), by "
        "start time", response=Span, shape="list", errors=(400,),
        query=(Query("run_id"), _LIMIT), extension="spans"),
)
# fmt: on
