"""``rail copy`` names the rail the rows went to as the operator wrote it: the schema kept (a
copy into ``?schema=staging`` must not read as a copy into the database's default schema),
libpq parameters such as ``passfile=/path`` as written rather than percent-encoded, and a
password never. A real embedded file copied to a real PostgreSQL by the real CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tests.worker.daemonkit import clean_env
from tracker_client.factory import open_tracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _copy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "rail", "copy", *args],
        capture_output=True, text=True, env=clean_env(), timeout=100, check=False,
    )  # fmt: skip


async def test_the_target_is_shown_with_its_schema_and_readable_parameters(
    pg_server: PgServer, tmp_path: Path
) -> None:
    source = tmp_path / "old.db"
    rail = await open_tracker(f"sqlite://{source}")
    await rail.aclose()
    key = f"shown-{uuid.uuid4()}"
    passfile = tmp_path / "no-such-pgpass"  # libpq skips a passfile that is not there
    target = fresh_schema_url(key, passfile=passfile)
    scheme, rest = target.split("://", 1)
    user, host = rest.split("@", 1)
    with_password = f"{scheme}://{user}:s3cret-pw@{host}"

    done = _copy(f"sqlite://{source}", with_password)
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith(f"copied {source} -> postgresql://{user}:***@"), first
    assert f"schema={schema_name(key)}" in first, first
    assert f"passfile={passfile}" in first, first
    assert "%2F" not in first and "s3cret-pw" not in done.stdout + done.stderr

    again = _copy(f"sqlite://{source}", with_password, "--force", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert f"schema={schema_name(key)}" in report["target"], report
    assert f"passfile={passfile}" in report["target"], report
    assert "s3cret-pw" not in again.stdout
