"""The bodies of a run's own reports on the wire: ``transition``, ``fail`` and ``events``, and
the base every request body of the wire contract shares.

They are apart from the rest of the wire contract (:mod:`tracker_client.contract.wire_models`,
which re-exports them) because the batch bodies (:mod:`tracker_client.contract.batch_bodies`:
``finish``, ``finish_many``) carry them, and the remote client imports those: it then does not
create the wire contract's other ~20 models and its operation types as it starts (~5 ms of
start-up CPU, docs/benchmarks.md). A worker on a rail in its own process (SQLite, PostgreSQL)
imports none of them (issue 31). Pure data: imports pydantic only.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracker_client.bounds import NonEmpty

__all__ = ["Body", "EventBody", "FailBody", "TransitionBody", "extension"]


def extension(name: str) -> Any:
    """JSON-schema marker of a body field only the served tracker reads (extension ``name``;
    a test checks every name is one of ``contract.EXTENSIONS``)."""
    return {"x-extension": name}


class Body(BaseModel):
    """The base of every request body (docs/reference/http-api.md): unknown fields are
    ignored, as NullTickets does; built on first use."""

    model_config = ConfigDict(extra="ignore", defer_build=True)


class EventBody(Body):
    """``POST /runs/{run_id}/events``."""

    kind: NonEmpty
    data: Any = Field(default_factory=dict)


class TransitionBody(Body):
    """``POST /runs/{run_id}/transition``."""

    trigger: str
    instructions: str | None = None
    usage: Any = None
    expected_stage: str | None = None
    expected_task_version: int | None = None
    #: Extension: task ids the moved task waits for (dependency edges added in the same write).
    wait_for: list[str] = Field(default_factory=list, json_schema_extra=extension("fan_in"))


class FailBody(Body):
    """``POST /runs/{run_id}/fail``."""

    error: str
    usage: Any = None
    #: Extension: ``False`` dead-letters at once.
    retryable: bool = Field(True, json_schema_extra=extension("backlog"))
