"""Typed calls of the operations a :class:`~tracker_client.protocol.Tracker` reaches by name.

:meth:`Tracker.call <tracker_client.protocol.Tracker.call>` takes an operation's name and
answers ``Any``. An :class:`Op` binds a name to the answer model its row of the contract table
declares, so ``await LIST_RATE_LIMITS.call(tracker)`` is a ``list[RateLimit]`` that mypy sees.
The bindings are checked against the table by the suite (``tests/test_calls.py``): a row whose
answer changes fails there, not at a caller.

No I/O: it imports the answer models and the protocol only.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tracker_client.observe_models import OtlpIngestResult, Span, WorkerInfo
from tracker_client.ops_models import PurgeResult, RequeueAllResult, TaskFollow
from tracker_client.schedule_models import RateLimit, Schedule

if TYPE_CHECKING:
    from tracker_client.protocol import Tracker

__all__ = [
    "CLEAR_RATE_LIMIT",
    "CREATE_SCHEDULE",
    "DELETE_SCHEDULE",
    "FOLLOW_TASK",
    "GET_SCHEDULE",
    "INGEST_TRACES",
    "LIST_RATE_LIMITS",
    "LIST_SCHEDULES",
    "LIST_SPANS",
    "LIST_WORKERS",
    "PAUSE_SCHEDULE",
    "PURGE",
    "REQUEUE_ALL",
    "RESUME_SCHEDULE",
    "SET_RATE_LIMIT",
    "Op",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Op(Generic[T]):
    """One operation of the contract table, by name, with the type of its answer.

    ``answer_type`` is what the table's row says the answer validates as (the model, or a list
    of it); the suite compares the two.
    """

    name: str
    answer_type: Any

    async def call(self, tracker: Tracker, *params: str, **arguments: Any) -> T:
        """``tracker.call(name, *params, **arguments)``, typed: its path parameters in order,
        its body fields and query parameters as keywords (see ``Tracker.call``)."""
        answer: T = await tracker.call(self.name, *params, **arguments)
        return answer


def _one(name: str, model: type[T]) -> Op[T]:
    return Op(name, model)


def _list(name: str, model: type[T]) -> Op[list[T]]:
    return Op(name, GenericAlias(list, (model,)))


#: ``POST /v1/traces`` (extension ``spans``): an OTLP/JSON document, as ``document=``.
INGEST_TRACES = _one("ingest_traces", OtlpIngestResult)
#: The spans of a task (extension ``spans``).
LIST_SPANS = _list("list_spans", Span)
#: A task's new events, waiting up to ``timeout_ms`` (extension ``follow``).
FOLLOW_TASK = _one("follow_task", TaskFollow)
#: The registered workers, ``state=`` to keep one state (extension ``workers``).
LIST_WORKERS = _list("list_workers", WorkerInfo)
#: Delete finished tasks older than ``older_than_ms`` (extension ``purge``).
PURGE = _one("purge", PurgeResult)
#: Requeue a pipeline's dead-lettered tasks (extension ``requeue_all``).
REQUEUE_ALL = _one("requeue_all", RequeueAllResult)
#: The schedules (extension ``schedules``), one by name and its changes.
CREATE_SCHEDULE = _one("create_schedule", Schedule)
LIST_SCHEDULES = _list("list_schedules", Schedule)
GET_SCHEDULE = _one("get_schedule", Schedule)
PAUSE_SCHEDULE = _one("pause_schedule", Schedule)
RESUME_SCHEDULE = _one("resume_schedule", Schedule)
DELETE_SCHEDULE = _one("delete_schedule", Schedule)
#: Fleet-wide rate limits by role (extension ``rate_limits``).
SET_RATE_LIMIT = _one("set_rate_limit", RateLimit)
LIST_RATE_LIMITS = _list("list_rate_limits", RateLimit)
CLEAR_RATE_LIMIT = _one("clear_rate_limit", RateLimit)
