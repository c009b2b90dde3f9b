"""The store's full-text search on PostgreSQL: ``tsvector`` instead of SQLite's FTS5.

Every word of the query must match, each as a phrase of its tokens (``phraseto_tsquery``), as
the embedded rail's FTS5 expression does; best match first (``ts_rank``). ``filter_path`` is a
JSON path (``$.a.b``) whose value must equal ``filter_value`` as text. The statement is
``store.search_tsvector`` (``postgres/sql/store.sql``); it runs in a read transaction through
the rail's connection.
"""

from __future__ import annotations

import json

import psycopg

from tracker_client.errors import ValidationFailed
from tracker_client.models import StoreEntry
from tracker_client.rules.common import Ctx
from tracker_client.rules.store import check_search

__all__ = ["search"]


def search(
    ctx: Ctx,
    query: str,
    namespace: str | None,
    limit: int,
    filter_path: str | None,
    filter_value: str | None,
) -> list[StoreEntry]:
    """Entries matching every word of ``query``, best first."""
    from tracker_client.rules.store import entry_from_row

    words = check_search(query, namespace, filter_path, filter_value)  # as the embedded rail
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationFailed(
            f"limit must be an integer 1..1000, got {limit!r}", code="invalid_limit"
        )
    if filter_path is not None and not _valid_path(ctx, filter_path):
        raise ValidationFailed(
            f"filter_path {filter_path!r} is not a valid JSON path", code="invalid_query"
        )
    params = {
        "words": json.dumps(words),
        "namespace": namespace,
        "path": filter_path,
        "value": filter_value,
        "limit": limit,
    }
    return [entry_from_row(r) for r in ctx.all("store.search_tsvector", params)]


def _valid_path(ctx: Ctx, path: str) -> bool:
    """Whether PostgreSQL reads ``path`` as a JSON path (checked before the search uses it)."""
    ctx.exec("store.path_begin")
    try:
        ctx.exec("store.path_check", (path,))
    except psycopg.Error:
        ctx.exec("store.path_undo")
        return False
    ctx.exec("store.path_end")
    return True
