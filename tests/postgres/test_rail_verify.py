"""``rail verify postgresql://...`` on a real PostgreSQL rail: what a ``pg_restore`` brought back
is checked with the same invariants as an embedded backup, read-only, in one snapshot."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from tests.cli.conftest import invoke
from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_verify_reads_a_postgresql_rail_and_names_a_broken_invariant(
    pg_server: PgServer,
) -> None:
    key = f"verify-{uuid.uuid4()}"
    url = fresh_schema_url(key)
    tracker = await open_tracker(url)
    try:
        pid = await make_pipeline(tracker, name="flow")
        await tracker.create_task(new_task(pid, "one"))
        await tracker.create_task(new_task(pid, "two"))
        await claim(tracker)
    finally:
        await tracker.aclose()

    ok = invoke(["rail", "verify", url, "--json"])
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["ok"] is True
    assert report["counts"]["tasks"] == 2
    assert report["counts"]["leased tasks"] == 1
    assert report["counts"]["runs"] == 1
    assert "password" not in ok.stdout

    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"UPDATE {schema_name(key)}.runs SET status = 'completed'")
    bad = invoke(["rail", "verify", url])
    assert bad.exit_code == 1
    assert "holds a lease whose run is missing or not running" in bad.stdout


def test_verify_names_a_schema_without_a_rail(pg_server: PgServer) -> None:
    url = fresh_schema_url(f"empty-{uuid.uuid4()}")
    result = invoke(["rail", "verify", url])
    assert result.exit_code == 2
    assert "holds no rail" in result.stderr
