"""The rail's models a running worker never builds, created on their first use.

:mod:`tracker_client.observe_models` names them (their ``__module__`` is that module's, as the
API reference and pickles name them) and imports this module when one is first looked up
(:pep:`562`): the answer of an OTLP ingest and the spans a task's view lists. A worker skips
creating them (~3 M instructions of its start-up, ``python -m bench.startup``, issue 31); the
rules that build them import them inside the functions that do.
"""

from typing import Any, Literal

from pydantic import Field

from tracker_client.observe_models import _COLD, _Model

#: The names :mod:`tracker_client.observe_models` creates from here on first lookup.
__all__ = sorted(_COLD)


class OtlpIngestResult(_Model):
    """The answer of ``POST /v1/traces`` and ``POST /otlp/v1/traces``, as NullTickets gives it:
    ``stored`` is ``"json"`` when the spans were parsed, ``"blob"`` when the body was kept as is
    (any non-JSON content type; ``accepted_spans`` is then 0)."""

    __module__ = "tracker_client.observe_models"

    batch_id: int
    accepted_spans: int
    stored: Literal["json", "blob"]


class Span(_Model):
    """One span of an ingested OTLP/JSON batch, linked to a task and/or run when it carries the
    ``nulltickets.task_id`` / ``nulltickets.run_id`` attributes. Times are Unix nanoseconds."""

    __module__ = "tracker_client.observe_models"

    batch_id: int
    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str
    kind: int | None = None
    start_time_unix_nano: int | None = None
    end_time_unix_nano: int | None = None
    status_code: int | None = None
    status_message: str | None = None
    service_name: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    #: The span's attributes flattened to ``{key: value}`` (OTLP ``AnyValue`` unwrapped).
    attributes: dict[str, Any] = Field(default_factory=dict)
