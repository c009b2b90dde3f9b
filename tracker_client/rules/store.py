"""The KV store with FTS5 full-text search (namespace, key and the value's JSON are indexed).

The functions run on the database thread inside a transaction; :class:`~.rail.Rail` is the
tracker's face of them (PostgreSQL searches its own way: ``postgres/search.py``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.models import StoreEntry
from tracker_client.rules.common import MIB, Ctx, dumps, stored_json

if TYPE_CHECKING:
    import sqlite3

__all__ = ["delete", "delete_namespace", "entry_from_row", "get", "list_namespace", "put", "search"]

RESERVED = "search"


def _names(namespace: str, key: str | None = None) -> None:
    if not isinstance(namespace, str) or not namespace:
        raise ValidationFailed("store namespace must be a non-empty string")
    if key is not None and (not isinstance(key, str) or not key):
        raise ValidationFailed("store key must be a non-empty string")


def entry_from_row(row: sqlite3.Row) -> StoreEntry:
    """The :class:`StoreEntry` a ``store`` row holds."""
    return StoreEntry.model_validate(
        {
            "namespace": row["namespace"],
            "key": row["key"],
            "value": stored_json(
                row["value"], "value", f"store key {row['namespace']}/{row['key']}"
            ),
            "created_at_ms": row["created_at_ms"],
            "updated_at_ms": row["updated_at_ms"],
        }
    )


def put(ctx: Ctx, namespace: str, key: str, value: Any) -> None:
    """Upsert; an update keeps ``created_at_ms``."""
    _names(namespace, key)
    if namespace == RESERVED:
        raise ValidationFailed(
            f"{RESERVED!r} is a reserved namespace name", code="reserved_namespace"
        )
    text = dumps(value, "store value", max_bytes=MIB)
    ctx.exec("store.put", (namespace, key, text, ctx.now, ctx.now))


def get(ctx: Ctx, namespace: str, key: str) -> StoreEntry:
    """One entry, or ``NotFound``."""
    row = ctx.one("store.get", (namespace, key))
    if row is None:
        raise NotFound(f"store key {namespace}/{key} not found", code="not_found")
    return entry_from_row(row)


def delete(ctx: Ctx, namespace: str, key: str) -> None:
    """Delete one key; absent keys are fine."""
    ctx.exec("store.delete", (namespace, key))


def delete_namespace(ctx: Ctx, namespace: str) -> None:
    """Delete every key of a namespace."""
    ctx.exec("store.delete_namespace", (namespace,))


def list_namespace(ctx: Ctx, namespace: str) -> list[StoreEntry]:
    """All entries of a namespace, sorted by key."""
    return [entry_from_row(r) for r in ctx.all("store.list", (namespace,))]


#: The most words a search query may have: each is a phrase every match must contain, and on
#: PostgreSQL the search time grows with the square of the word count (4,000 words: 14.6 s),
#: past ~5,000 its stack overflows (docs/guarantees/edge-cases.md).
MAX_SEARCH_WORDS = 64
#: The JSON paths ``filter_path`` takes, the same on every rail: ``$`` then keys (``.name`` or
#: ``."any key"``) and array indexes (``[0]``). No filters, variables, wildcards, methods or
#: arithmetic (SQLite has none of them; on PostgreSQL they fail while the search runs).
_FILTER_PATH = re.compile(
    r"\$(?:"
    r"\.[^\s.\[\]\"'$@?()\\*+\-/%!=<>&|,:;{}]+"  # .key
    r'|\."(?:[^"\\]|\\.)*"'  # ."any key"
    r"|\[\d+\]"  # [0]
    r")*"
)


def _no_nul(value: object, what: str) -> None:
    if isinstance(value, str) and "\x00" in value:
        raise ValidationFailed(
            f"{what} must not contain a NUL (\\0) character", code="invalid_query"
        )


def check_search(
    query: object, namespace: object, filter_path: object, filter_value: object
) -> list[str]:
    """The words of a search, after refusing what no rail can search for (each a clear
    ``invalid_query``, HTTP 400, never an outage): no word, more than
    :data:`MAX_SEARCH_WORDS`, a NUL character anywhere, a ``filter_path`` that is not a
    plain path (``$.a.b``, ``$."a b"``, ``$.items[0]``)."""
    if not isinstance(query, str) or not query.split():
        raise ValidationFailed("search query must contain at least one word", code="invalid_query")
    for value, what in (
        (query, "search query"),
        (namespace, "namespace"),
        (filter_path, "filter_path"),
        (filter_value, "filter_value"),
    ):
        _no_nul(value, what)
    words = query.split()
    if len(words) > MAX_SEARCH_WORDS:
        raise ValidationFailed(
            f"search query has {len(words)} words; at most {MAX_SEARCH_WORDS}",
            code="invalid_query",
        )
    if filter_path is not None and (
        not isinstance(filter_path, str) or _FILTER_PATH.fullmatch(filter_path) is None
    ):
        raise ValidationFailed(
            f"filter_path must be a JSON path of keys and indexes starting with '$' (e.g. "
            f'$.status, $."a key", $.items[0]), got {filter_path!r}',
            code="invalid_query",
        )
    return words


def match_expression(words: list[str]) -> str:
    """Each word (from :func:`check_search`) as a quoted FTS5 phrase, ANDed."""
    return " AND ".join('"' + word.replace('"', '""') + '"' for word in words)


def search(
    ctx: Ctx,
    query: str,
    namespace: str | None,
    limit: int,
    filter_path: str | None,
    filter_value: str | None,
) -> list[StoreEntry]:
    """Entries matching every word of ``query``, best first."""
    import sqlite3  # here only: a PostgreSQL worker never loads it (issue 31, memory)

    expr = match_expression(check_search(query, namespace, filter_path, filter_value))
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise ValidationFailed(
            f"limit must be an integer 1..1000, got {limit!r}", code="invalid_limit"
        )
    params = {
        "match": expr,
        "namespace": namespace,
        "path": filter_path,
        "value": filter_value,
        "limit": limit,
    }
    try:
        rows = ctx.all("store.search_fts", params)
    except sqlite3.OperationalError as exc:
        if "json" in str(exc).lower() or "path" in str(exc).lower():
            raise ValidationFailed(
                f"filter_path {filter_path!r} is not a valid JSON path ({exc})",
                code="invalid_query",
            ) from exc
        raise
    return [entry_from_row(r) for r in rows]
