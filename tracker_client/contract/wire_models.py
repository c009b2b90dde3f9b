"""The bodies and small answers of the NullTickets wire contract, as pydantic models.

Request bodies as NullTickets documents them (unknown fields are ignored, as NullTickets
does), plus the served tracker's extension fields, each marked ``"x-extension": <name>`` in its
JSON schema (the ``/health`` extension that reads it; a plain server ignores the field). The
operation table that uses them is :mod:`tracker_client.contract.table`, which re-exports
every name here. Pure data: imports the models only.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracker_client import models as m
from tracker_client.bounds import NonEmpty
from tracker_client.contract.contract_types import MAX_LEASE_TTL_MS
from tracker_client.contract.run_bodies import Body as _Body
from tracker_client.contract.run_bodies import EventBody, FailBody, TransitionBody
from tracker_client.contract.run_bodies import extension as _ext

__all__ = [
    "AssignBody",
    "BulkBody",
    "CancelAllBody",
    "CancelBody",
    "CancelCountAnswer",
    "CheckpointBody",
    "ClaimBody",
    "CountAnswer",
    "DependencyBody",
    "EventBody",
    "EventIdAnswer",
    "ExpiryAnswer",
    "FailBody",
    "HeartbeatBody",
    "IdAnswer",
    "IdsAnswer",
    "OtlpTracesBody",
    "PipelineApplyBody",
    "PipelineBody",
    "PurgeBody",
    "ReleaseBody",
    "RequeueAllBody",
    "RequeueBody",
    "StatusAnswer",
    "StoreBody",
    "TaskTransitionBody",
    "TransitionBody",
    "WithdrawnAnswer",
]


# -- request bodies (docs/reference/http-api.md; unknown fields are ignored, as NullTickets does) --
class PipelineBody(_Body):
    """``POST /pipelines``."""

    name: str
    definition: Any = Field(json_schema_extra={"type": "object"})


class PipelineApplyBody(_Body):
    """``POST /pipelines/apply`` and ``/pipelines/diff`` (extension ``pipeline_versions``): a
    pipeline by name, its new definition and the moves of the stages it removes (old stage ->
    new stage). Checked by the rail, which names what is wrong."""

    name: str
    definition: Any = Field(json_schema_extra={"type": "object"})
    moves: Any = Field(None, json_schema_extra={"type": "object"})


class BulkBody(_Body):
    """``POST /tasks/bulk``: all or nothing."""

    tasks: list[m.TaskCreate]


class DependencyBody(_Body):
    """``POST /tasks/{task_id}/dependencies``."""

    depends_on_task_id: str


class AssignBody(_Body):
    """``POST /tasks/{task_id}/assignments``."""

    agent_id: NonEmpty
    assigned_by: str | None = None


class ClaimBody(_Body):
    """``POST /leases/claim``; ``concurrency`` is ``{"per_state": {stage: int}}``."""

    agent_id: NonEmpty
    agent_role: NonEmpty
    lease_ttl_ms: int = Field(
        300_000, json_schema_extra={"minimum": 1, "maximum": MAX_LEASE_TTL_MS}
    )
    concurrency: dict[str, Any] | None = None


class HeartbeatBody(_Body):
    """``POST /leases/{lease_id}/heartbeat``: NullTickets ignores the body."""

    lease_ttl_ms: int | None = Field(
        None,
        json_schema_extra={**_ext("heartbeat_ttl"), "minimum": 1, "maximum": MAX_LEASE_TTL_MS},
    )
    #: Extension: the lease's run, used only to say why a lease is gone (revoked, expired).
    run_id: str = Field("", json_schema_extra=_ext("heartbeat_ttl"))
    #: Extension: the run's checkpoint, written with the heartbeat (absent: left as it is).
    checkpoint: Any = Field(None, json_schema_extra=_ext("checkpoints"))


class ReleaseBody(_Body):
    """``POST /runs/{run_id}/release`` (extension ``release``)."""

    reason: str = "worker_shutdown"


class StoreBody(_Body):
    """``PUT /store/{namespace}/{key}``."""

    value: Any


class CancelBody(_Body):
    """``POST /tasks/{task_id}/cancel`` (extension ``cancel``)."""

    reason: str = "cancelled"


class CancelAllBody(_Body):
    """``POST /ops/cancel-all`` (extension ``cancel_all``)."""

    pipeline_id: str | None = None
    role: str | None = None


class RequeueBody(_Body):
    """``POST /tasks/{task_id}/requeue`` (extension ``requeue``)."""

    stage: str | None = None
    reset_attempts: bool = True


class RequeueAllBody(BaseModel):
    """``POST /ops/requeue-all`` (extension ``requeue_all``): which dead letters, and how."""

    model_config = ConfigDict(defer_build=True)

    pipeline_id: str
    reason: str | None = None
    #: Strict, as purge's: ``"3600000"`` or ``true`` is refused, not read as a number or flag.
    since_ms: int | None = Field(default=None, strict=True)
    stage: str | None = None
    dry_run: bool = Field(default=False, strict=True)
    reset_attempts: bool = Field(default=True, strict=True)


class PurgeBody(BaseModel):
    """``POST /ops/purge`` (extension ``purge``): finished tasks older than ``older_than_ms``."""

    model_config = ConfigDict(defer_build=True)

    #: Strict: ``true`` or ``"7"`` would otherwise be read as a 1 or 7 ms age (purge it all).
    older_than_ms: int = Field(strict=True)
    dry_run: bool = Field(default=False, strict=True)
    pipeline_id: str | None = None


class OtlpTracesBody(_Body):
    """``POST /v1/traces`` and ``POST /otlp/v1/traces`` with a JSON content type: an OTLP/JSON
    ``ExportTraceServiceRequest`` (docs/reference/http-api.md). Documents the body only: the
    tracker reads the whole document (``ingest_traces(document=...)``), checking each span itself;
    any other content type is stored as a blob."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    resourceSpans: list[dict[str, Any]] = Field(default_factory=list)


# -- small answers ------------------------------------------------------------------------------
class IdAnswer(_Body):
    """``{"id": str}``: a created pipeline, task or artifact."""

    id: str


class IdsAnswer(_Body):
    """``{"ids": [str]}``: created tasks, in input order."""

    ids: list[str]


class EventIdAnswer(_Body):
    """``{"id": int}``: a created event."""

    id: int


class StatusAnswer(_Body):
    """``{"status": str}`` (``created``, ``assigned``, ``unassigned``, ``ok``, ``changed``)."""

    status: str


class WithdrawnAnswer(_Body):
    """``{"withdrawn": bool}``: whether a lease claimed ahead was withdrawn (False: it had
    moved on, nothing written)."""

    withdrawn: bool


class ExpiryAnswer(_Body):
    """``{"expires_at_ms": int}``: a heartbeat's new expiry."""

    expires_at_ms: int


class CancelCountAnswer(_Body):
    """``{"cancelled": int}``."""

    cancelled: int


class CountAnswer(BaseModel):
    """``{"count": 7}``: the answer of ``count_tasks``."""

    model_config = ConfigDict(defer_build=True)

    count: int


class CheckpointBody(BaseModel):
    """``POST /runs/{run_id}/checkpoint`` (extension ``checkpoints``): the run's checkpoint,
    one JSON value of at most :data:`~tracker_client.agent_models.MAX_CHECKPOINT_BYTES` (the
    latest replaces the earlier)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    data: Any


class TaskTransitionBody(BaseModel):
    """``POST /tasks/{task_id}/transition`` (extension ``human_steps``): move a task waiting in
    a stage with no role (a human step) along ``trigger``, with the optimistic checks of a
    worker's transition. ``instructions`` reach the next run as a worker's would."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    trigger: str
    #: The stage the operator saw: a task moved meanwhile is 409 ``expected_stage_mismatch``.
    expected_stage: str
    expected_task_version: int | None = None
    instructions: str | None = None
