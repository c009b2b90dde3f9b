"""The store search's one statement (``store.search_tsvector``) answers what the query built per
word count answered: ``phraseto_tsquery(w1) && phraseto_tsquery(w2) && ...``, in rank order.

The statement folds the words of one JSON parameter with a recursive CTE instead of spelling one
``phraseto_tsquery`` per word into its text; these compare both on words that tokenise oddly (a
word of punctuation only has no lexeme, a word with a hyphen or an apostrophe is a phrase).
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

VALUES = {
    "a": {"text": "the quick brown fox"},
    "b": {"text": "quick-brown foxes jump"},
    "c": {"text": "it's a fox, quick"},
    "d": {"text": "brown brown brown quick fox fox"},
    "e": {"text": "nothing to see"},
}
QUERIES = [
    "quick",
    "quick fox",
    "brown fox",
    "quick-brown",
    "it's",
    "- quick",
    "fox -- ,",
    "QUICK Fox",
    "nothing see to",
    "absent",
]


def _old(conn: psycopg.Connection[Any], schema: str, words: list[str]) -> list[str]:
    """The search as it was written before: one phraseto_tsquery per word, ANDed."""
    terms = sql.SQL(" && ").join(
        sql.SQL("phraseto_tsquery('simple', {})").format(sql.Literal(w)) for w in words
    )
    query = sql.SQL(
        "SELECT s.key FROM {}.store s WHERE s.search @@ ({}) "
        "ORDER BY ts_rank(s.search, {}) DESC, s.id LIMIT 100"
    ).format(sql.Identifier(schema), terms, terms)
    return [str(r[0]) for r in conn.execute(query).fetchall()]


async def test_the_folded_query_answers_as_the_one_built_per_word(pg_server: PgServer) -> None:
    key = f"search-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    try:
        for name, value in VALUES.items():
            await tracker.store_put("ns", name, value)
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            for query in QUERIES:
                found = [e.key for e in await tracker.store_search(query, limit=100)]
                assert found == _old(conn, schema_name(key), query.split()), query
        assert [e.key for e in await tracker.store_search("quick fox", limit=100)]
    finally:
        await tracker.aclose()
