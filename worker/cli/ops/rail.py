"""``backlog-worker rail copy SOURCE_URL TARGET_URL [--force]``: move a rail to another engine;
``backlog-worker rail migrate``: bring a PostgreSQL rail's schema up to this build.

The operator's face of :func:`tracker_client.postgres.copy.copy_rail`: an embedded file
(``sqlite:///old.db``) to PostgreSQL (``postgresql://user@host/db``) or back, every row with
its ids, versions and timestamps, verified by per-table counts. A non-empty target is refused
(``--force`` replaces its rows; never merges); a running task's lease arrives lapsed, so the
target reclaims it as it would a dead worker's. URLs are printed without passwords. This room
touches the two rails (through ``copy_rail``) and the terminal only.
"""

from __future__ import annotations

import json

import anyio
import click

from tracker_client.errors import ConfigError
from tracker_client.factory import URL_FORMS
from tracker_client.postgres.copy import DEFAULT_BATCH, CopyReport, copy_rail
from worker.cli.errors import input_errors

__all__ = ["rail_group", "register"]


def _summary(report: CopyReport) -> list[str]:
    lines = [f"copied {report.source} -> {report.target}"]
    if report.replaced:
        gone = ", ".join(f"{t} ({n})" for t, n in report.replaced.items())
        lines.append(f"replaced the target's rows (--force): {gone}")
    width = max((len(t) for t in report.tables), default=0)
    lines += [f"  {t:<{width}}  {n} row(s)" for t, n in report.tables.items()]
    lines.append(
        f"counts verified on both sides; {report.lapsed_leases} running lease(s) arrived lapsed "
        "(the target reclaims them as a dead worker's)"
    )
    return lines


@click.group("rail", short_help="Move a rail between engines, migrate its schema.")
def rail_group() -> None:
    """Operations on whole rails."""


@rail_group.command("copy", short_help="Copy a rail (sqlite:// <-> postgresql://), verified.")
@click.argument("source_url")
@click.argument("target_url")
@click.option(
    "--force",
    is_flag=True,
    help="Replace the rows of a non-empty target with the source's (in one transaction).",
)
@click.option(
    "--batch-size", type=click.IntRange(1, 100_000), default=DEFAULT_BATCH, show_default=True
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def copy_command(
    source_url: str, target_url: str, force: bool, batch_size: int, as_json: bool
) -> None:
    """Copy every row of the rail at SOURCE_URL into the rail at TARGET_URL: pipelines, tasks,
    runs, events, artifact records, dependencies, assignments, schedules, rate limits, the
    store, spans and the worker registry, with ids, versions and timestamps as they are.

    The target is created if needed and written in one transaction: a failure (a table whose
    counts differ at the end is named) leaves it as it was. A target with rows is refused
    unless --force, which replaces them (it never merges two rails). A running task's lease
    arrives lapsed: the target's next claim reclaims it, as it would a dead worker's. Stop the
    source's workers first for a clean cut-over.

    \b
    backlog-worker rail copy sqlite:///var/lib/backlog-worker/rail.db postgresql://w@db/backlog
    """
    with input_errors():
        report = anyio.run(
            lambda: copy_rail(source_url, target_url, force=force, batch_size=batch_size)
        )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "source": report.source,
                    "target": report.target,
                    "tables": report.tables,
                    "replaced": report.replaced,
                    "lapsed_leases": report.lapsed_leases,
                }
            )
        )
        return
    for line in _summary(report):
        click.echo(line)


@rail_group.command("migrate", short_help="Bring a PostgreSQL rail's schema up to this build.")
@click.option(
    "--tracker",
    "tracker_url",
    default=None,
    metavar="URL",
    help=f"The rail, as every --tracker names one ({URL_FORMS}); only a PostgreSQL rail has"
    " migrations to run here. Default: $BACKLOG_WORKER_TRACKER_URL or the config's [tracker].",
)
def migrate_command(tracker_url: str | None) -> None:
    """Apply the schema migrations a PostgreSQL rail lacks, as a role that may create in its
    schema (its owner), so that workers can run as a role with DML grants only (their opens
    then only check the version). An embedded rail migrates itself at open: nothing to do.

    \b
    backlog-worker rail migrate --tracker postgresql://owner@db/backlog?schema=backlog
    """
    from tracker_client.postgres.db import map_pg_error
    from tracker_client.postgres.migrate import migrate_url
    from tracker_client.urlmask import mask_url
    from worker.cli.ops.common import resolve_tracker

    with input_errors():
        url = resolve_tracker(tracker_url, None).url
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(
                f"rail migrate: {mask_url(url)!r} is no PostgreSQL rail (an embedded rail"
                " migrates itself at open; a served one is migrated by its server)"
            )
        try:
            schema, before, now = migrate_url(url)
        except Exception as exc:
            raise map_pg_error(exc, f"migrating {mask_url(url)}") from None
    if before == now:
        click.echo(f"schema {schema!r} is at version {now}: nothing to do")
    else:
        click.echo(f"schema {schema!r} migrated from version {before} to {now}")


def register(group: click.Group) -> None:
    """Add ``rail`` to the ``backlog-worker`` group."""
    group.add_command(rail_group)
