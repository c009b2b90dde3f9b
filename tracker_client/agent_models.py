"""Models of the agent extensions of the rail: subtasks, fan-in, upstream, checkpoints, human steps.

What a task's run reads of its dependencies (:class:`Upstream`) and the constants both sides
of the seam agree on (the checkpoint size limit, the dead-letter reasons of the
upstream-failure rule, the KV namespace a plain NullTickets rail keeps checkpoints in). The
bodies of the extension operations ``checkpoint`` and ``transition_task`` are with the wire
contract's (:mod:`tracker_client.contract.wire_models`: a worker never builds them, issue 31).
Fields the agent extensions add to existing models (``Task.parent_id``,
``TaskCreate.parent_id``, ``Lease.previous_checkpoint``, ``CancelResult.cancelled_descendants``)
live on those models in :mod:`tracker_client.models`.

Pure data: imports pydantic and the models only.

Partly public (docs/reference/stability.md): ``Upstream`` is on the Python API reference; the
constants are internal.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tracker_client.models import Artifact

__all__ = [
    "CHECKPOINT_NAMESPACE",
    "MAX_CHECKPOINT_BYTES",
    "UNSET",
    "UPSTREAM_CANCELLED",
    "UPSTREAM_DEAD_LETTERED",
    "Upstream",
    "UpstreamOutcome",
]

#: The largest checkpoint, as compact JSON (UTF-8 bytes): a checkpoint is a small resume note,
#: not a result store (results go to events and artifacts).
MAX_CHECKPOINT_BYTES = 64 * 1024

#: Dead-letter reason of a task waiting on a dependency that was dead-lettered (failed for
#: good, expired, crash-looped): that dependency never resolves, so its dependents never run.
UPSTREAM_DEAD_LETTERED = "upstream_dead_lettered"
#: Dead-letter reason of a task waiting on a dependency that was cancelled.
UPSTREAM_CANCELLED = "upstream_cancelled"

#: KV namespace a worker keeps checkpoints in on a plain NullTickets rail (key: the task id).
CHECKPOINT_NAMESPACE = "backlog_worker.checkpoints"

#: How a dependency ended: ``pending`` while it has not (yet) finished.
UpstreamOutcome = Literal["done", "dead_lettered", "cancelled", "pending"]


class Upstream(BaseModel):
    """One dependency of a task as its next run sees it (extension ``upstream``): where it
    ended, the data of its last ``result`` event and its artifacts."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    task_id: str
    title: str
    stage: str
    outcome: UpstreamOutcome
    #: The ``data`` of the dependency's last ``result`` event (None: it recorded none).
    result: Any = None
    artifacts: list[Artifact] = Field(default_factory=list)


class _Unset:
    """The type of :data:`UNSET`."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


#: "Not given" for an argument whose None is a value (a heartbeat's ``checkpoint``: ``None`` is
#: a checkpoint, leaving it out writes none).
UNSET: Any = _Unset()
