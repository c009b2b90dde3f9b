"""``backlog-worker rail copy SOURCE_URL TARGET_URL [--force]``: move a rail to another engine;
``backlog-worker rail migrate``: bring a PostgreSQL rail's schema up to this build;
``backlog-worker rail backup|verify|restore``: backups of an embedded rail that restore
(:mod:`tracker_client.embedded.backup`), and the invariants check on any database rail.

The operator's face of :func:`tracker_client.railcopy.copy_rail`: an embedded file
(``sqlite:///old.db``) to PostgreSQL (``postgresql://user@host/db``) or back, every row with
its ids, versions and timestamps, verified by per-table counts. A non-empty target is refused
(``--force`` replaces its rows; never merges); a running task's lease arrives lapsed, so the
target reclaims it as it would a dead worker's. URLs are printed without passwords. This room
touches the two rails (through ``copy_rail``) and the terminal only.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import click

from tracker_client.errors import BacklogWorkerError, ConfigError
from tracker_client.factory import URL_FORMS
from tracker_client.railcopy import DEFAULT_BATCH, CopyReport, copy_rail
from tracker_client.rules.verify import VerifyReport
from worker.cli.errors import EXIT_FAILURE, OpsError, input_errors

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


@click.group("rail", short_help="Back up, verify, restore, copy or migrate a whole rail.")
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


@rail_group.command("migrate", short_help="Apply the schema changes a rail lacks (all of them).")
@click.option(
    "--tracker",
    "tracker_url",
    default=None,
    metavar="URL",
    help=f"The rail, as every --tracker names one ({URL_FORMS}): an embedded file or a"
    " PostgreSQL schema. Default: $BACKLOG_WORKER_TRACKER_URL or the config's [tracker].",
)
def migrate_command(tracker_url: str | None) -> None:
    """Apply every schema migration the rail lacks, also those the previous release can't
    read (which an open leaves to this command), once the rail's worker registry shows no
    worker alive on another version. Additive changes need no command: every open applies
    them, and workers of the previous release keep working (docs/operate/upgrades.md).

    On PostgreSQL, run it as a role that may create in the schema (its owner), so that workers
    can run as a role with DML grants only (their opens then only check the version).

    \b
    backlog-worker rail migrate --tracker postgresql://owner@db/backlog?schema=backlog
    backlog-worker rail migrate --tracker sqlite:///var/lib/backlog-worker/rail.db
    """
    import time
    from importlib.metadata import version

    from tracker_client.urlmask import mask_url
    from worker.cli.ops.common import resolve_tracker

    with input_errors():
        url = resolve_tracker(tracker_url, None).url
        ours = version("backlog-worker")
        if url.startswith(("postgresql://", "postgres://")):
            from tracker_client.postgres.db import map_pg_error
            from tracker_client.postgres.migrate import migrate_url

            try:
                schema, before, now = migrate_url(url, ours)
            except BacklogWorkerError:
                raise
            except Exception as exc:
                raise map_pg_error(exc, f"migrating {mask_url(url)}") from None
            what = f"schema {schema!r}"
        else:
            from tracker_client.embedded.migrate import migrate_file

            path = _embedded_path(url, "migrate")
            before, now = migrate_file(str(path), ours, int(time.time() * 1000))
            what = str(path)
    if before == now:
        click.echo(f"{what} is at version {now}: nothing to do")
    else:
        click.echo(f"{what} migrated from version {before} to {now}")


def _embedded_path(url: str, verb: str) -> Path:
    """The file of the embedded rail at ``url``; a clear error for any other rail."""
    from tracker_client.factory import parse_sqlite_url
    from tracker_client.urlmask import mask_url

    if url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"rail {verb}: {mask_url(url)!r} is a PostgreSQL rail: back it up with pg_dump and"
            " restore it with pg_restore, then check it with `backlog-worker rail verify URL`"
            " (see docs/operate/backups-retention.md)"
        )
    if not url.startswith("sqlite:"):
        raise ConfigError(
            f"rail {verb}: {mask_url(url)!r} is not an embedded rail; run `rail {verb}` on the"
            " host of the served rail, naming its file (sqlite:///path.db)"
        )
    path, _ = parse_sqlite_url(url)
    if path == ":memory:":
        raise ConfigError(f"rail {verb}: an in-memory rail has no file to {verb}")
    return Path(path)


def _verify_lines(report: VerifyReport) -> list[str]:
    figures = ", ".join(f"{n} {label}" for label, n in report.counts.items())
    head = f"{report.rail}: schema version {report.schema_version}" + (
        f"; {figures}" if figures else ""
    )
    if report.ok:
        return [head, "verified: integrity and every invariant hold"]
    return [head, *(f"problem: {line}" for line in report.problems)]


_TRACKER_OPTION = click.option(
    "--tracker",
    "tracker_url",
    default=None,
    metavar="URL",
    help=f"The rail, as every --tracker names one ({URL_FORMS}); backup and restore take an"
    " embedded one. Default: $BACKLOG_WORKER_TRACKER_URL or the config's [tracker].",
)


@rail_group.command("backup", short_help="Copy a live embedded rail to a file, verified.")
@click.argument("destination", type=click.Path(path_type=Path))
@_TRACKER_OPTION
@click.option("--force", is_flag=True, help="Replace an existing backup file.")
def backup_command(destination: Path, tracker_url: str | None, force: bool) -> None:
    """Copy the embedded rail to DESTINATION (a file, or a directory to put a dated
    rail-YYYYmmddTHHMMSSZ.db in) while its workers keep running.

    The copy is the rail as of one moment (SQLite's online backup, one read transaction), one
    self-contained file of mode 0600, checked with `rail verify` before it is put in place: a
    destination file is always a whole, verified backup. The rail's secret key is not copied
    (a restored rail makes its own).

    \b
    backlog-worker rail backup /var/backups/backlog-worker/
    """
    from tracker_client.embedded.backup import backup_file
    from worker.cli.ops.common import resolve_tracker

    with input_errors():
        source = _embedded_path(resolve_tracker(tracker_url, None).url, "backup")
        report = backup_file(source, destination, force=force)
    click.echo(
        f"backed up {report.source} -> {report.destination} "
        f"({report.size_bytes} bytes in {report.seconds:.2f} s)"
    )
    for line in _verify_lines(report.verified)[1:]:
        click.echo(line)


@rail_group.command("verify", short_help="Check a rail or a backup: integrity and invariants.")
@click.argument("rail", required=False)
@_TRACKER_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def verify_command(rail: str | None, tracker_url: str | None, as_json: bool) -> None:
    """Check RAIL (a backup file, sqlite:///path.db or postgresql://...; default: the
    configured rail) without writing to it: that it is a rail of this or an older version,
    SQLite's integrity and foreign-key checks, and the rail's invariants (every leased task
    has its running run and every running run its lease, no run or event of a missing task,
    attempt numbers and versions that only grow, no finished task holding a lease, no task of
    a missing pipeline, no dangling dependency). Exits 1 naming each problem found.

    \b
    backlog-worker rail verify /var/backups/backlog-worker/rail-20261206T031500Z.db
    backlog-worker rail verify postgresql://backlog@db/backlog
    """
    from worker.cli.ops.common import resolve_tracker

    with input_errors():
        target = rail if rail is not None else resolve_tracker(tracker_url, None).url
        report = _verify_any(target)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "rail": report.rail,
                    "schema_version": report.schema_version,
                    "counts": report.counts,
                    "problems": report.problems,
                    "ok": report.ok,
                }
            )
        )
    else:
        for line in _verify_lines(report):
            click.echo(line)
    if not report.ok:
        raise SystemExit(EXIT_FAILURE)


def _verify_any(target: str) -> VerifyReport:
    if target.startswith(("postgresql://", "postgres://")):
        from tracker_client.extras import require

        require("postgres", "verifying a PostgreSQL rail")
        from tracker_client.postgres.db import map_pg_error
        from tracker_client.postgres.verify import verify_url
        from tracker_client.urlmask import mask_url

        try:
            return verify_url(target)
        except BacklogWorkerError:
            raise
        except Exception as exc:
            raise map_pg_error(exc, f"verifying {mask_url(target)}") from None
    from tracker_client.embedded.backup import verify_file

    path = _embedded_path(target, "verify") if "://" in target else Path(target)
    return verify_file(path)


@rail_group.command("restore", short_help="Put a verified backup in place (workers stopped).")
@click.argument("backup", type=click.Path(path_type=Path))
@_TRACKER_OPTION
def restore_command(backup: Path, tracker_url: str | None) -> None:
    """Make BACKUP the embedded rail again, once its workers are stopped.

    The backup is verified first and refused if it does not pass. So is a rail whose worker
    registry still shows a worker alive: stop every worker and `tracker serve` of the rail
    first. The rail that was there is kept beside it (NAME.before-restore-STAMP, with its WAL),
    never deleted. Leases that were live in the backup come back expired: the first claim
    reclaims their tasks as it would a dead worker's, so nothing is lost or run twice.

    \b
    systemctl stop 'backlog-worker@*'
    backlog-worker rail restore /var/backups/backlog-worker/rail-20261206T031500Z.db
    """
    from tracker_client.embedded.backup import WorkersAlive, restore_file
    from worker.cli.ops.common import resolve_tracker

    with input_errors():
        target = _embedded_path(resolve_tracker(tracker_url, None).url, "restore")
        try:
            report = restore_file(backup, target)
        except WorkersAlive as exc:
            raise OpsError(f"rail restore refused: {exc}", EXIT_FAILURE) from None
    click.echo(f"restored {report.backup} -> {report.target}")
    if report.kept_aside:
        click.echo(f"the rail that was there is kept as {report.kept_aside}")
    click.echo(
        f"{report.expired_leases} lease(s) live in the backup came back expired (their tasks "
        "are reclaimed by the next claim)"
    )
    for line in _verify_lines(report.verified)[1:]:
        click.echo(line)


def register(group: click.Group) -> None:
    """Add ``rail`` to the ``backlog-worker`` group."""
    group.add_command(rail_group)
