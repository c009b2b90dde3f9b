"""Typed models of what the rail shows about itself: OTLP spans linked to tasks, live workers.

Kept beside :mod:`tracker_client.models` (the NullTickets data) because none of this is in the
NullTickets task model: spans come from its OTLP ingest (``POST /v1/traces``, see the HTTP API)
and workers are an extension of this project's rails. Every tracker answers them through
``await tracker.call("list_spans", task_id)`` / ``tracker.call("list_workers")`` when its
capabilities list the ``spans`` / ``workers`` extension.
"""

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from tracker_client.observe_cold import OtlpIngestResult, Span

__all__ = [
    "OtlpIngestResult",
    "RunningTask",
    "Span",
    "WorkerInfo",
    "WorkerRegister",
    "WorkerState",
]


#: The names :mod:`tracker_client.observe_cold` defines, imported when one is first looked up:
#: the OTLP ingest's answer and the spans, which a worker never builds.
_COLD = frozenset({"OtlpIngestResult", "Span"})


def __getattr__(name: str) -> Any:
    """A model of :mod:`tracker_client.observe_cold`, created on its first lookup (:pep:`562`)."""
    if name in _COLD:
        from tracker_client import observe_cold

        found = getattr(observe_cold, name)
        globals()[name] = found  # looked up once
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


#: ``alive``: seen within its stated refresh window; ``lost``: silent longer than
#: ``lost_after_ms`` (killed, host gone, partitioned); ``stopped``: said goodbye on shutdown.
WorkerState = Literal["alive", "lost", "stopped"]


class WorkerRegister(BaseModel):
    """The body of ``PUT /workers/{worker_id}``: a worker saying who it is (and that it is still
    alive: the same call refreshes ``last_seen_at_ms``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    host: str
    pid: int
    version: str
    roles: list[str]
    slots: int
    #: The worker's agent id (the ``agent_id`` of its claims): how its running tasks are found.
    agent_id: str
    started_at_ms: int
    #: How long after its last refresh the rail reports the worker ``lost``.
    lost_after_ms: int = 60_000
    #: True on a clean shutdown: the worker is then ``stopped``, not ``lost``.
    stopping: bool = False
    #: The runs the worker holds at this refresh. Only read when several registered workers
    #: share one ``agent_id`` (a configured one): each then shows the runs it said it holds.
    run_ids: list[str] | None = None


class RunningTask(_Model):
    """A task a worker runs now (a ``running`` run whose agent is the worker's)."""

    task_id: str
    run_id: str
    role: str
    started_at_ms: int


class WorkerInfo(_Model):
    """One worker as the rail knows it: its registration, when it was last seen, its state and
    what it runs now."""

    id: str
    host: str
    pid: int
    version: str
    roles: list[str]
    slots: int
    agent_id: str
    started_at_ms: int
    last_seen_at_ms: int
    lost_after_ms: int
    state: WorkerState
    running: list[RunningTask] = Field(default_factory=list)
