"""A PostgreSQL rail run by a role with DML grants only (docs/operate/security.md): the owner
migrates with ``backlog-worker rail migrate``; a runtime role without CREATE then opens the
current schema, and a real worker drains tasks with it; a schema that is behind, or a grant that
is missing, is refused naming what to do (never "tracker unreachable", exit 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.docs.blocks import find
from tests.postgres.server import SUPERUSER, PgServer, fresh_schema_url, schema_name
from tests.worker.daemonkit import PIPELINE_TOML, clean_env, write_config
from tracker_client.postgres.migrate import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(180)

RUNTIME = "bw_runtime"
PAGE = "docs/operate/security.md"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


def _as_runtime(owner_url: str) -> str:
    return owner_url.replace("://backlog@", f"://{RUNTIME}@", 1)


def _grant_runtime(pg_server: PgServer, schema: str) -> None:
    """The runtime role's grants, as docs/operate/security.md lists them (run from the page:
    its database, schema and owner renamed to this server's)."""
    grants = find(PAGE, lang="sql").body
    grants = grants.replace("DATABASE backlog", "DATABASE postgres")
    grants = grants.replace("SCHEMA backlog", f"SCHEMA {schema}")
    grants = grants.replace("FOR ROLE bw_owner", f"FOR ROLE {SUPERUSER}")
    statements = [st.strip() for st in grants.split(";") if st.strip()]
    assert len(statements) >= 6 and any(st.startswith("CREATE ROLE") for st in statements)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (RUNTIME,)).fetchone()
        for statement in statements:
            if statement.startswith("CREATE ROLE") and exists:
                continue  # made by an earlier test of this server
            conn.execute(statement.encode())


def _owner_sql(pg_server: PgServer, statement: str) -> None:
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(statement.encode())


def test_a_runtime_role_without_create_runs_a_migrated_rail(
    pg_server: PgServer, tmp_path: Path
) -> None:
    owner = fresh_schema_url("least-privilege-runtime")
    schema = schema_name("least-privilege-runtime")
    migrated = _cli("rail", "migrate", "--tracker", owner)
    assert migrated.returncode == 0, migrated.stderr
    assert f"to {SCHEMA_VERSION}" in migrated.stdout or "nothing to do" in migrated.stdout
    again = _cli("rail", "migrate", "--tracker", owner)
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stderr
    _grant_runtime(pg_server, schema)
    runtime = _as_runtime(owner)
    # The role can't create: not the schema, not a table in it.
    with (
        psycopg.connect(runtime.split("?")[0], autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(sql.SQL("CREATE TABLE {}.x (a int)").format(sql.Identifier(schema)))
    flow = tmp_path / "flow.toml"
    flow.write_text(PIPELINE_TOML)
    created = _cli("pipeline", "create", "-f", str(flow), "--tracker", runtime)
    assert created.returncode == 0, created.stderr
    for title in ("one", "two", "three"):
        added = _cli("task", "add", "-p", "flow", title, "--tracker", runtime)
        assert added.returncode == 0, added.stderr
    config = write_config(tmp_path, runtime, token=None, argv=["/bin/true"], drain=True)
    drained = _cli("run", "--config", str(config))
    assert drained.returncode == 0, drained.stderr[-3000:]
    listed = _cli("task", "list", "--tracker", runtime, "--json")
    assert listed.returncode == 0, listed.stderr
    stages = sorted(task["stage"] for task in json.loads(listed.stdout)["items"])
    assert stages == ["done"] * 3, stages
    # A grant taken away is named, not reported as an outage.
    _owner_sql(pg_server, f"REVOKE INSERT ON {schema}.tasks FROM {RUNTIME}")
    refused = _cli("task", "add", "-p", "flow", "four", "--tracker", runtime)
    assert refused.returncode == 1, refused.stderr
    assert "lacks a privilege" in refused.stderr and "permission denied" in refused.stderr
    assert "unreachable" not in refused.stderr


def test_a_schema_behind_is_refused_naming_rail_migrate(pg_server: PgServer) -> None:
    owner = fresh_schema_url("least-privilege-behind")
    _grant_runtime(pg_server, schema_name("least-privilege-behind"))  # an empty schema
    runtime = _as_runtime(owner)
    refused = _cli("task", "list", "--tracker", runtime)
    assert refused.returncode == 1, refused.stderr
    assert f"is at version 0, this build needs {SCHEMA_VERSION}" in refused.stderr
    assert "rail migrate" in refused.stderr and "permission denied" in refused.stderr
    assert "unreachable" not in refused.stderr
    never = _cli("task", "list", "--tracker", owner + "&migrate=never")
    assert never.returncode == 1 and "migrate=never" in never.stderr, never.stderr
    bad = _cli("task", "list", "--tracker", owner + "&migrate=sometimes")
    assert bad.returncode == 2 and "migrate: expected auto or never" in bad.stderr
    # The owner (the default, migrate=auto) still migrates at open; the page's default
    # privileges grant the tables it creates to the runtime role, which then opens the rail.
    assert _cli("task", "list", "--tracker", owner).returncode == 0
    after = _cli("task", "list", "--tracker", runtime)
    assert after.returncode == 0, after.stderr
