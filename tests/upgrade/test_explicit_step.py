"""A schema change the previous release can't read waits for ``rail migrate``, which waits for
the workers on other versions; a rail of a build before the window is recorded anew so the
previous release opens it (docs/operate/upgrades.md).

No release has a breaking migration past the previous release yet, so one is added to this
build's list for the test (the one thing a real part can't produce on demand: a future
migration); everything else is the real embedded rail, CLI and worker registry.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from tests.upgrade.previous import ROOT
from tracker_client.embedded import EmbeddedTracker, migrate
from tracker_client.errors import TrackerRejected
from tracker_client.rules.upgrades import Migration
from worker.cli import main

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BREAKING = Migration(
    migrate.SCHEMA_VERSION + 1,
    f"{migrate.SCHEMA_VERSION + 1:04d}_rename.sql",
    "ALTER TABLE rail_secrets RENAME COLUMN value TO secret_value;",
)


#: The additive migrations this build has past its level (recorded as additions).
ADDED = set(range(migrate.LEVEL + 1, migrate.SCHEMA_VERSION + 1))


@pytest.fixture
def future(monkeypatch: pytest.MonkeyPatch) -> None:
    """This build with one more migration, a breaking one."""
    monkeypatch.setattr(migrate, "_MIGRATIONS", [*migrate._MIGRATIONS, BREAKING])
    monkeypatch.setattr(migrate, "SCHEMA_VERSION", BREAKING.number)


def _level(path: Path) -> tuple[int, set[int]]:
    conn = sqlite3.connect(path)
    try:
        return migrate.recorded(conn)
    finally:
        conn.close()


async def _rail(path: Path) -> None:
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.register_worker(
        "w-old",
        host="old-host",
        pid=4242,
        version="0.1.0",
        roles=["r"],
        slots=1,
        agent_id="old",
        started_at_ms=int(time.time() * 1000),
        lost_after_ms=3_600_000,
    )
    await tracker.aclose()


async def test_a_breaking_change_waits_for_rail_migrate_and_the_old_workers(
    tmp_path: Path, future: None
) -> None:
    path = tmp_path / "rail.db"
    with pytest.MonkeyPatch.context() as mp:  # the rail as this build (without 9) made it
        mp.setattr(migrate, "_MIGRATIONS", migrate._MIGRATIONS[:-1])
        mp.setattr(migrate, "SCHEMA_VERSION", BREAKING.number - 1)
        await _rail(path)
    assert _level(path) == (migrate.LEVEL, ADDED)

    with pytest.raises(TrackerRejected, match=r"run `backlog-worker rail migrate") as refused:
        await EmbeddedTracker.open(str(path))
    assert refused.value.code == "schema_behind"
    assert BREAKING.name in str(refused.value)
    assert _level(path) == (migrate.LEVEL, ADDED)  # nothing changed

    url = f"sqlite:///{path}"
    held = CliRunner().invoke(main, ["rail", "migrate", "--tracker", url])
    assert held.exit_code == 1, held.output
    assert "1 worker(s) on other versions are still alive (old-host:4242 (0.1.0))" in held.stderr
    assert _level(path) == (migrate.LEVEL, ADDED)

    conn = sqlite3.connect(path)
    conn.execute("UPDATE workers SET stopping = 1")
    conn.commit()
    conn.close()
    done = CliRunner().invoke(main, ["rail", "migrate", "--tracker", url])
    assert done.exit_code == 0, done.output
    assert f"migrated from version {BREAKING.number - 1} to {BREAKING.number}" in done.stdout
    assert _level(path) == (BREAKING.number, set())
    tracker = await EmbeddedTracker.open(str(path))
    await tracker.aclose()
    again = CliRunner().invoke(main, ["rail", "migrate", "--tracker", url])
    assert again.exit_code == 0 and "nothing to do" in again.stdout


def test_a_rail_of_a_build_before_the_window_is_recorded_anew(tmp_path: Path) -> None:
    # builds between 0.1.0 and the window recorded the additive migration 8 in user_version
    path = tmp_path / "rail.db"
    anyio.run(lambda: _rail(path))
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE schema_additions")
    conn.execute(f"PRAGMA user_version = {migrate.SCHEMA_VERSION}")
    conn.commit()
    conn.close()

    async def reopen() -> None:
        tracker = await EmbeddedTracker.open(str(path))
        await tracker.aclose()

    anyio.run(reopen)
    assert _level(path) == (migrate.LEVEL, ADDED)


def test_the_window_constants_are_the_previous_releases_migrations() -> None:
    from tests.upgrade.previous import previous_release
    from tracker_client.postgres import migrate as pg_migrate

    _version, commit = previous_release()
    for folder, level in (
        ("tracker_client/embedded/schema", migrate.PREVIOUS_RELEASE_LEVEL),
        ("tracker_client/postgres/schema", pg_migrate.PREVIOUS_RELEASE_LEVEL),
    ):
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", commit, folder + "/"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if listed.returncode != 0:
            from tests import needs

            needs.missing(f"the clone lacks commit {commit} ({listed.stderr.strip()})")
        numbered = [n for n in listed.stdout.split() if n.rsplit("/", 1)[-1][:4].isdigit()]
        assert len(numbered) == level, (folder, numbered)


def test_a_migration_marked_additive_only_adds() -> None:
    """Every migration past the previous release is additive (or the window needs a
    `rail migrate` step and a line in docs/operate/upgrades.md)."""
    from tracker_client.postgres import migrate as pg_migrate

    for module in (migrate, pg_migrate):
        later = [m for m in module._MIGRATIONS if m.number > module.PREVIOUS_RELEASE_LEVEL]
        assert all(m.additive for m in later), [m.name for m in later if not m.additive]
        for m in later:
            body = "\n".join(
                line for line in m.sql.splitlines() if not line.strip().startswith("--")
            ).upper()
            assert "DROP " not in body and " RENAME " not in body, m.name
