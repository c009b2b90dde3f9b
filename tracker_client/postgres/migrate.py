"""The PostgreSQL rail's numbered migrations, applied at open under an advisory lock.

An open first reads the schema's version without writing anything (:func:`schema_version`):
a current schema needs no DDL, so a runtime role with only USAGE on the schema and DML on its
tables opens it (the grants: docs/operate/security.md). Only a schema that is behind is
migrated (``migrate=auto``, the default), which needs CREATE on the database (a new schema) or
on the schema; a role without it gets a refusal naming ``backlog-worker rail migrate`` and the
missing privilege, and ``migrate=never`` refuses a schema that is behind without trying.

``schema/schema.sql`` is the schema as it is now, its functions included: a new rail (a schema
with no table) is created from it in one step, in the opening transaction, and every migration
it holds is recorded in ``<schema>.backlog_schema``. A rail of an older version is brought up by
the numbered migrations ``schema/NNNN_name.sql`` it lacks (each a diff, kept as written), applied
in order in the opening transaction and recorded there too. Both end in the same schema
(tests/postgres/test_schema_file.py compares them). The transaction first takes
``pg_advisory_xact_lock`` on the schema's name, so several hosts opening one rail at once create
or migrate it exactly once: the first does, the others wait for its commit and find nothing left
to do.

A schema that holds tables but no ``backlog_schema`` belongs to someone else, and one written by
a newer build has versions this build does not know: both are refused with ``TrackerCorrupt``
before anything is written. Runs on a pool thread with a plain psycopg connection.

The compatibility window (:mod:`tracker_client.rules.upgrades`): ``backlog_schema`` holds the
migrations up to the rail's *level* (the previous release refuses a level above its own), and
``backlog_schema_additions`` the additive ones applied above it. Additive migrations are applied
at open; one that raises the level past :data:`PREVIOUS_RELEASE_LEVEL` waits for ``backlog-worker
rail migrate``.

An open of a current rail (every migration of this build applied, recorded by a build that
knows the window) reads no migration file and plans nothing
(:func:`tracker_client.rules.migration_files.current`): the files are read, and :data:`LEVEL`
computed, only when a rail is behind or created (~13 M instructions of a worker's start-up,
``python -m bench.startup``).
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from tracker_client.errors import TrackerCorrupt, TrackerRejected
from tracker_client.rules import migration_files
from tracker_client.rules.leasekeys import KEY_NAME

if TYPE_CHECKING:  # imported where a rail is planned: an open of a current one plans nothing
    from tracker_client.rules.upgrades import Migration, Plan

__all__ = [
    "LEVEL",
    "PREVIOUS_RELEASE_LEVEL",
    "SCHEMA_VERSION",
    "current_schema",
    "migrate",
    "migrate_url",
    "migrations",
    "open_schema",
    "recorded",
    "schema_version",
]

log = logging.getLogger("backlog_worker.tracker")


_SHIPPED = migration_files.Shipped("tracker_client.postgres", globals())


def migrations() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in ``schema/``: (version, file name, SQL), in order."""
    return _SHIPPED.migrations()


#: The highest migration this build knows (from the files' names).
SCHEMA_VERSION = len(migration_files.numbered_files("tracker_client.postgres"))
#: The level of the previous release (0.1.0: migrations 1-12): a migration at or below it is
#: one the previous release has, so applying it at open locks no worker of the window out.
PREVIOUS_RELEASE_LEVEL = 12
#: The level a rail of this build's full schema has (its highest non-additive migration); read
#: from the files on first use, as is ``_MIGRATIONS`` (this build's migrations).
LEVEL: int
_MIGRATIONS: list[Migration]


def __getattr__(name: str) -> Any:
    """:data:`LEVEL` and ``_MIGRATIONS``, from the migration files on first use (:pep:`562`)."""
    return _SHIPPED.attribute(name)


def _shipped() -> list[Migration]:
    """``_MIGRATIONS`` (as a test may have set it), read on first use."""
    return _SHIPPED.shipped()


_ADDITIONS = "backlog_schema_additions"


def recorded(conn: psycopg.Connection[Any], schema: str) -> tuple[int, set[int]]:
    """The rail's level and the additive migrations applied above it (no write)."""
    ident = sql.Identifier(schema)
    row = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}.backlog_schema").format(ident)
    ).fetchone()
    level = int(row[0]) if row is not None else 0
    found = conn.execute(
        "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = %s", (schema, _ADDITIONS)
    ).fetchone()
    if found is None:
        return level, set()
    rows = conn.execute(
        sql.SQL("SELECT version FROM {}.{}").format(ident, sql.Identifier(_ADDITIONS))
    ).fetchall()
    return level, {int(r[0]) for r in rows}


def _record(conn: psycopg.Connection[Any], pending: Plan) -> None:
    """Write ``pending``'s level and additions (in the caller's transaction, on the schema's
    search path): ``backlog_schema`` holds every migration up to the level, the additions table
    those applied above it."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS backlog_schema_additions (version integer PRIMARY KEY, "
        "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    names = {m.number: m.name for m in _shipped()}
    conn.execute("DELETE FROM backlog_schema WHERE version > %s", (pending.level,))
    for number in range(1, pending.level + 1):
        conn.execute(
            "INSERT INTO backlog_schema (version, name) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (number, names[number]),
        )
    conn.execute(
        "DELETE FROM backlog_schema_additions WHERE NOT (version = ANY(%s))",
        (sorted(pending.additions),),
    )
    for number in sorted(pending.additions):
        conn.execute(
            "INSERT INTO backlog_schema_additions (version, name) VALUES (%s, %s) "
            "ON CONFLICT DO NOTHING",
            (number, names.get(number, "?")),
        )


def _plan(
    conn: psycopg.Connection[Any], schema: str, explicit_step: bool
) -> tuple[int, set[int], Plan]:
    from tracker_client.rules.upgrades import plan

    level, additions = recorded(conn, schema)
    pending = plan(
        _shipped(), level, additions, PREVIOUS_RELEASE_LEVEL, explicit_step=explicit_step
    )
    return level, additions, pending


def _needs_migrate(schema: str, pending: Plan) -> TrackerRejected:
    return TrackerRejected(
        f"schema {schema!r}: migration {pending.explicit[0].name} changes the schema in a way the"
        " previous release can't read; stop the workers still on other versions, then run"
        " `backlog-worker rail migrate` (docs/operate/upgrades.md)",
        code="schema_behind",
    )


def current_schema() -> str:
    """``schema/schema.sql``: the whole schema at :data:`SCHEMA_VERSION` (a new rail's)."""
    return (
        resources.files("tracker_client.postgres")
        .joinpath("schema", "schema.sql")
        .read_text(encoding="utf-8")
    )


def migrate(conn: psycopg.Connection[Any], schema: str, *, explicit_step: bool = False) -> int:
    """Create ``schema`` if needed and bring it up: a new rail from ``schema.sql`` in one step,
    an older one by the migrations it lacks that the window allows at open (all of them for
    ``rail migrate``: ``explicit_step``); returns how many it applied. A migration left to
    ``rail migrate`` is ``TrackerRejected`` (``schema_behind``) after the others are in."""
    ident = sql.Identifier(schema)
    applied = 0
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"backlog-worker:migrate:{schema}",),
        )
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        tables = {
            str(r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
        }
        if tables and "backlog_schema" not in tables:
            raise TrackerCorrupt(
                f"schema {schema!r} holds tables of another application "
                f"({', '.join(sorted(tables)[:5])}); refusing to touch it"
            )
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.backlog_schema (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(ident)
        )
        row = conn.execute(
            sql.SQL("SELECT coalesce(max(version), 0) FROM {}.backlog_schema").format(ident)
        ).fetchone()
        version = int(row[0]) if row is not None else 0
        if version > SCHEMA_VERSION:
            raise TrackerCorrupt(
                f"schema {schema!r} was written by a newer backlog-worker (schema version "
                f"{version}, this build knows up to {SCHEMA_VERSION}); upgrade to open it"
            )
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(ident))
        if version == 0:
            _create(conn, schema)
            applied = SCHEMA_VERSION
            from tracker_client.rules.upgrades import plan

            pending = plan(_shipped(), SCHEMA_VERSION, (), PREVIOUS_RELEASE_LEVEL)
        else:
            _level, _added, pending = _plan(conn, schema, explicit_step)
            for migration in pending.now:
                conn.execute(migration.sql.encode())
                applied += 1
                log.info(
                    "applied postgres schema migration %s to schema %s",
                    migration.name,
                    schema,
                    extra={"action": "schema_migrated", "task_id": None, "run_id": None},
                )
        _record(conn, pending)
        _seed_rail_key(conn)
    if pending.explicit:
        raise _needs_migrate(schema, pending)
    return applied


def _create(conn: psycopg.Connection[Any], schema: str) -> None:
    """Create the whole schema from ``schema.sql`` in an empty ``schema`` (inside
    :func:`migrate`'s transaction, on its search path); every migration it holds is recorded
    as applied."""
    conn.execute(current_schema().encode())
    log.info(
        "created postgres schema version %s (schema.sql) in schema %s",
        SCHEMA_VERSION,
        schema,
        extra={"action": "schema_created", "task_id": None, "run_id": None},
    )


#: Makes the rail's lease-token key on the server (:func:`_seed_rail_key`).
SEED_RAIL_KEY = (
    "INSERT INTO rail_secrets (name, value) VALUES (%s, encode(sha256("
    "uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())), 'hex')) "
    "ON CONFLICT (name) DO NOTHING"
)


def _seed_rail_key(conn: psycopg.Connection[Any]) -> None:
    """Make the rail's lease-token key (schema 13) if it has none: at open, under the
    migration lock, so a keyed claim never waits for it (the one-statement claim derives its
    token before it is sent; :mod:`tracker_client.rules.leasekeys`). Made by the server, so
    the key is in no statement a client sends (a server's statement log, ``log_statement =
    all``, shows each statement's parameters): the SHA-256 of two ``gen_random_uuid()`` (244
    bits from the server's CSPRNG, ``pg_strong_random``; PostgreSQL 13 or newer)."""
    conn.execute(SEED_RAIL_KEY, (KEY_NAME,))


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The schema's version (0: no schema, or no rail in it yet), read without writing;
    ``TrackerCorrupt`` for a schema of another application or of a newer build."""
    tables = {
        str(r[0])
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    }
    if not tables:
        return 0
    if "backlog_schema" not in tables:
        raise TrackerCorrupt(
            f"schema {schema!r} holds tables of another application "
            f"({', '.join(sorted(tables)[:5])}); refusing to touch it"
        )
    row = conn.execute(
        sql.SQL("SELECT coalesce(max(version), 0) FROM {}.backlog_schema").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    version = int(row[0]) if row is not None else 0
    if version > SCHEMA_VERSION:
        raise TrackerCorrupt(
            f"schema {schema!r} was written by a newer backlog-worker (schema version "
            f"{version}, this build knows up to {SCHEMA_VERSION}); upgrade to open it"
        )
    return version


def open_schema(conn: psycopg.Connection[Any], schema: str, mode: str = "auto") -> int:
    """Check ``schema`` at open, migrating it when it is behind and ``mode`` is ``auto``;
    returns how many migrations were applied. A schema behind with ``mode`` ``never``, or one
    the role may not migrate, is ``TrackerRejected`` (``schema_behind``) naming what to do."""
    with conn.transaction():
        version = schema_version(conn, schema)
        current = False
        if version:
            current = migration_files.current(*recorded(conn, schema), SCHEMA_VERSION)
        if version and not current:
            level, additions, pending = _plan(conn, schema, False)
            current = not pending.now and not pending.records_change(level, additions)
            if current and pending.explicit:
                raise _needs_migrate(schema, pending)
    if current:
        # No DDL on a current schema; only the rail's lease-token key, made if it has none
        # (a DML write, under the migration lock as migrate() makes it).
        with conn.transaction():
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"backlog-worker:migrate:{schema}",),
            )
            conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
            _seed_rail_key(conn)
        return 0
    where = f"schema {schema!r} is at version {version}, this build needs {SCHEMA_VERSION}"
    if mode == "never":
        raise TrackerRejected(
            f"{where} (migrate=never): run `backlog-worker rail migrate` with a role that may"
            " create in the schema (its owner), then start again",
            code="schema_behind",
        )
    try:
        return migrate(conn, schema)
    except psycopg.errors.InsufficientPrivilege as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "permission denied"
        raise TrackerRejected(
            f"{where}, and this role may not migrate it ({reason}: it lacks CREATE on the"
            f" {'schema' if version else 'database'}): run `backlog-worker rail migrate` with the"
            " schema's owner; a runtime role needs only the grants in docs/operate/security.md",
            code="schema_behind",
        ) from exc


def _other_versions_alive(conn: psycopg.Connection[Any], schema: str, version: str) -> list[str]:
    """``host:pid (version)`` of each worker alive in the rail's registry on another version."""
    rows = conn.execute(
        sql.SQL(
            "SELECT host, pid, version FROM {}.workers WHERE stopping = 0 AND last_seen_at_ms"
            " + lost_after_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
            " AND version <> %s ORDER BY registered_at_ms"
        ).format(sql.Identifier(schema)),
        (version,),
    ).fetchall()
    return [f"{host}:{pid} ({ver})" for host, pid, ver in rows]


def migrate_url(url: str, version: str) -> tuple[str, int, int]:
    """``backlog-worker rail migrate`` on a ``postgresql://`` URL: (the schema, its highest
    migration applied before, the same now). A migration that raises the level waits until no
    worker on a version other than ``version`` (this build's) is alive. Under the advisory lock,
    on its own connection (no pool); errors are psycopg's (the caller maps them)."""
    from tracker_client.postgres.options import parse_postgres_url

    conninfo, pg, _shared, _shown = parse_postgres_url(url, {})
    with psycopg.connect(conninfo, autocommit=True, application_name="backlog-worker") as conn:
        with conn.transaction():
            level, additions, pending = 0, set[int](), None
            if schema_version(conn, pg.schema):
                level, additions, pending = _plan(conn, pg.schema, True)
        before = max([level, *additions])
        if pending is not None and any(not m.additive for m in pending.now):
            alive = _other_versions_alive(conn, pg.schema, version)
            if alive:
                raise TrackerRejected(
                    f"schema {pg.schema!r}: {len(alive)} worker(s) on other versions are still"
                    " alive (" + ", ".join(alive[:5]) + "); the migration would lock them out:"
                    " stop or upgrade them first",
                    code="workers_alive",
                )
        if pending is None or pending.now or pending.records_change(level, additions):
            migrate(conn, pg.schema, explicit_step=True)
        with conn.transaction():
            level, additions = recorded(conn, pg.schema)
    return pg.schema, before, max([level, *additions])
