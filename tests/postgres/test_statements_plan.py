"""Every PostgreSQL statement plans on the rail's schema as it is written.

The contract suite runs the statements its paths reach; some are reached only by rare paths (a
corrupt row's undo, a claim's housekeeping, the rules' own claim scan). Here each statement of
``tracker_client/postgres/sql`` is planned (``EXPLAIN``, nothing runs) on a freshly migrated rail
with every parameter bound as ``NULL`` on the client, as :class:`~tracker_client.postgres.dialect.
PgConn` binds them: a misspelt column, a wrong cast or a placeholder PostgreSQL does not read is
an error naming the statement. Savepoint statements are not plannable and are left out.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from tests.postgres.server import fresh_schema_url, schema_name, shared_server
from tracker_client.factory import open_tracker
from tracker_client.postgres.dialect import STATEMENTS

#: A psycopg.sql template's fields (follow.notify: the channel, bound once per instance).
TEMPLATE_FIELD = re.compile(r"\{(\w+)\}")
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PLANNABLE = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def _bound(cur: psycopg.ClientCursor[Any], text: str) -> str:
    """``text`` with every parameter bound as NULL (positional or by name), a template's
    fields as text literals."""
    fields = TEMPLATE_FIELD.findall(text)
    if fields:
        literals = {field: psycopg.sql.Literal(field) for field in fields}
        return psycopg.sql.SQL(text).format(**literals).as_string(cur.connection)
    if "%(" in text:
        return cur.mogrify(text, defaultdict(lambda: None))
    count = text.replace("%%", "").count("%s")
    return cur.mogrify(text, [None] * count) if count else text.replace("%%", "%")


async def test_every_postgres_statement_plans_on_a_migrated_rail() -> None:
    key = f"plan-{uuid.uuid4()}"
    tracker = await open_tracker(fresh_schema_url(key))
    await tracker.aclose()
    server = shared_server()
    planned: list[str] = []
    failed: dict[str, str] = {}
    with psycopg.connect(
        server.url, autocommit=True, options=f"-c search_path={schema_name(key)}"
    ) as conn:
        cur = psycopg.ClientCursor(conn)
        for name, statement in sorted(STATEMENTS.items()):
            if not statement.lstrip().upper().startswith(PLANNABLE):
                continue
            try:
                cur.execute(f"EXPLAIN {_bound(cur, statement)}")
            except psycopg.Error as exc:
                failed[name] = str(exc).splitlines()[0]
            else:
                planned.append(name)
    assert failed == {}
    assert {"runs.lease_locked", "claim.undo_lease", "follow.notify"} <= set(planned)
