"""OTLP ingest and the spans of a task (``POST /v1/traces``, extension ``spans``).

An OTLP/JSON document (:mod:`.otlpjson` checks and reads it, before any write) becomes one
``span_batches`` row and a ``spans`` row per span, in one transaction: a document with one bad
span stores nothing. A body of any other content type (OTLP protobuf) is kept as a blob, as
NullTickets keeps it: one batch row, no spans. A span naming only its run
(``nulltickets.run_id``) is linked to the run's task too, so ``list_spans(task_id)`` finds it.

Spans go with their task when it is purged; spans linked to no task of the rail and blobs go
once they are older than the retention (:mod:`.retention`).

This room touches the ``span_batches`` and ``spans`` tables (schema 0005) and reads ``runs``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tracker_client.errors import ValidationFailed
from tracker_client.rules.common import Ctx

if TYPE_CHECKING:  # the parser runs on a server's path, cold in a worker (issue 31, memory)
    import sqlite3

    # created on first use (tracker_client.observe_cold): a worker never builds them
    from tracker_client.observe_models import OtlpIngestResult, Span
    from tracker_client.rules import otlpjson

__all__ = [
    "DEFAULT_SPAN_LIMIT",
    "MAX_BLOB_BYTES",
    "check_content_type",
    "list_task_spans",
    "span_limit",
    "store_blob",
    "store_spans",
]

#: Spans ``list_spans`` answers when no limit is given (and the most it answers).
DEFAULT_SPAN_LIMIT = 1000
#: Largest blob kept (the served tracker's OTLP body limit is lower by default).
MAX_BLOB_BYTES = 64 * 1024 * 1024


def _batch(ctx: Ctx, content_type: str, stored: str, blob: bytes | None, accepted: int) -> int:
    cur = ctx.exec("spans.batch", (ctx.now, content_type, stored, blob, accepted))
    return int(cur.lastrowid or 0)


def store_spans(
    ctx: Ctx, spans: Sequence[otlpjson.ParsedSpan], content_type: str = "application/json"
) -> OtlpIngestResult:
    """Store checked spans as one JSON batch, each linked to its task (a run's task when only
    the run is named)."""
    batch_id = _batch(ctx, content_type, "json", None, len(spans))
    task_of_run: dict[str, str | None] = {}
    rows = []
    for s in spans:
        task_id = s.task_id
        if task_id is None and s.run_id is not None:
            if s.run_id not in task_of_run:
                task_of_run[s.run_id] = ctx.scalar("spans.run_task", (s.run_id,))
            task_id = task_of_run[s.run_id]
        rows.append(
            (
                batch_id,
                s.trace_id,
                s.span_id,
                s.parent_span_id,
                s.name,
                s.kind,
                s.start_time_unix_nano,
                s.end_time_unix_nano,
                s.status_code,
                s.status_message,
                s.service_name,
                task_id,
                s.run_id,
                s.attributes_json,
            )
        )
    ctx.conn.executemany(ctx.sql["spans.insert"], rows)
    from tracker_client.observe_models import OtlpIngestResult

    return OtlpIngestResult(batch_id=batch_id, accepted_spans=len(spans), stored="json")


def check_content_type(content_type: object) -> str:
    """The checked content type of a trace blob; ``ValidationFailed`` names a bad one."""
    if not isinstance(content_type, str) or not content_type.strip():
        raise ValidationFailed("content_type: must be a non-empty string")
    if len(content_type) > 255 or not content_type.isprintable():
        raise ValidationFailed("content_type: at most 255 printable characters")
    return content_type.strip()


def store_blob(ctx: Ctx, data: bytes, content_type: str) -> OtlpIngestResult:
    """Keep an OTLP body of a non-JSON content type as it is (no spans are read from it)."""
    from tracker_client.observe_models import OtlpIngestResult

    batch_id = _batch(ctx, content_type, "blob", data, 0)
    return OtlpIngestResult(batch_id=batch_id, accepted_spans=0, stored="blob")


def _span(row: sqlite3.Row) -> Span:
    from tracker_client.observe_models import Span

    data = dict(row)
    data["attributes"] = json.loads(data["attributes"])
    return Span.model_validate(data)


def span_limit(limit: object) -> int:
    """The checked ``list_spans`` limit (None: :data:`DEFAULT_SPAN_LIMIT`)."""
    if limit is None:
        return DEFAULT_SPAN_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationFailed(f"limit: must be 1..1000, got {limit!r}", code="invalid_limit")
    return limit


def list_task_spans(ctx: Ctx, task_id: str, run_id: str | None, limit: int) -> list[Span]:
    """The task's spans (or one run's), by start time (spans without one last), at most
    ``limit``."""
    rows = ctx.all("spans.of_task", {"task_id": task_id, "run_id": run_id, "limit": limit})
    return [_span(r) for r in rows]
