"""``rail copy`` on real parts: a real embedded file with every kind of row copied to a real
PostgreSQL (and back), read through the Tracker protocol and compared; a non-empty target
refused with nothing written; bad URLs named, nothing created; a count that differs fails naming
the table; a worker draining the copied rail; no password printed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.contract.otlpdocs import document, span
from tests.contract.support import claim, make_pipeline, new_task
from tests.postgres.server import PgServer, fresh_schema_url, schema_name
from tests.worker.daemonkit import PIPELINE_TOML, clean_env, write_config
from tracker_client import railcopy
from tracker_client.errors import ConfigError, LeaseLost, NoRail
from tracker_client.factory import open_tracker
from tracker_client.models import ArtifactCreate
from tracker_client.protocol import Tracker
from tracker_client.railcopy import CopyFailed, RailNotEmpty, copy_rail

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

CLI = (sys.executable, "-m", "worker")
HOUR_MS = 3_600_000


def _url() -> str:
    return fresh_schema_url(f"copy-{uuid.uuid4()}")


async def _populate(path: Path) -> dict[str, str]:
    """A rail with every kind of row; the ids of the interesting tasks."""
    t = await open_tracker(f"sqlite:///{path}")
    try:
        pid = await make_pipeline(t, name="flow")
        done = await t.create_task(
            new_task(pid, "done one", metadata={"k": 1}), idempotency_key="k1"
        )
        lease = await claim(t)
        await t.add_event(lease, "progress", {"step": 1})
        await t.add_artifact(
            ArtifactCreate(kind="log", uri="file:///tmp/log", task_id=done, run_id=lease.run_id)
        )
        await t.transition(lease, "complete")
        dead = await t.create_task(new_task(pid, "dead one"))
        await t.fail(await claim(t), "broken for good", retryable=False)
        delayed = await t.create_task(new_task(pid, "later", delay_ms=HOUR_MS))
        blocked = await t.create_task(new_task(pid, "blocked"))
        await t.add_dependency(blocked, delayed)
        assigned = await t.create_task(new_task(pid, "assigned"))
        await t.assign(assigned, "agent-x")
        running = await t.create_task(new_task(pid, "running", priority=5))
        live = await claim(t, ttl_ms=HOUR_MS)
        assert live.task_id == running
        await t.store_put("notes", "greeting", {"text": "hello copied world"})
        await t.store_put("notes", "other", "plain value")
        await t.call(
            "create_schedule", schedule="nightly", pipeline_id=pid, cron="0 3 * * *", title="s"
        )
        await t.call("set_rate_limit", "reviewer", max_running=5)
        await t.call(
            "ingest_traces",
            document=document(span(0, "root", task=done), span(1, "kid", task=done)),
        )
        await t.ingest_trace_blob(b"\x00\x01\xffproto", "application/x-protobuf")  # type: ignore[attr-defined]
        await t.call(
            "register_worker",
            "w1",
            host="box",
            pid=1,
            version="0.1",
            roles=["coder"],
            slots=1,
            agent_id="box-1",
            started_at_ms=1_000,
            lost_after_ms=60_000,
        )
    finally:
        await t.aclose()
    return {"done": done, "dead": dead, "delayed": delayed, "running": running, "pid": pid}


async def _snapshot(t: Tracker, ids: dict[str, str]) -> dict[str, Any]:
    """What the Tracker protocol shows of the rail (the running task's lease left out)."""
    tasks = (await t.list_tasks(limit=1000)).items
    shown: dict[str, Any] = {"pipelines": [p.model_dump() for p in await t.list_pipelines()]}
    for task in sorted(tasks, key=lambda x: x.id):
        detail = (await t.get_task(task.id)).model_dump(mode="json")
        runs = [r.model_dump(mode="json") for r in await t.list_runs(task.id)]
        if task.id == ids["running"]:
            detail = {"id": detail.get("id"), "stage": detail.get("stage")}
            runs = [{"id": r["id"], "status": r["status"]} for r in runs]
        shown[f"task {task.title}"] = {
            "detail": detail,
            "runs": runs,
            "events": [e.model_dump() for e in (await t.list_task_events(task.id)).items],
            "deps": [d.model_dump() for d in await t.list_dependencies(task.id)],
            "assigned": [a.model_dump() for a in await t.list_assignments(task.id)],
            "artifacts": [a.model_dump() for a in (await t.list_artifacts(task_id=task.id)).items],
        }
    shown["store"] = [e.model_dump() for e in await t.store_list("notes")]
    shown["schedules"] = [s.model_dump() for s in await t.call("list_schedules")]
    shown["limits"] = [r.model_dump() for r in await t.call("list_rate_limits")]
    shown["spans"] = [s.model_dump() for s in await t.call("list_spans", ids["done"])]
    shown["workers"] = [w.model_dump() for w in await t.call("list_workers")]
    return shown


async def test_every_kind_of_row_arrives_and_reads_back_the_same(
    pg_server: PgServer, tmp_path: Path
) -> None:
    source = tmp_path / "old.db"
    ids = await _populate(source)
    key = f"copy-{uuid.uuid4()}"
    target = fresh_schema_url(key)
    report = await copy_rail(f"sqlite:///{source}", target, batch_size=2)
    assert report.tables["tasks"] == 6 and report.tables["spans"] == 2
    assert report.tables["span_batches"] == 2 and report.lapsed_leases == 1
    assert not report.replaced

    old, new = await open_tracker(f"sqlite:///{source}"), await open_tracker(target)
    try:
        assert await _snapshot(new, ids) == await _snapshot(old, ids)
        found = await new.store_search("copied")
        assert [e.key for e in found] == ["greeting"]
        # The live lease arrived lapsed: the target's next claim reclaims the running task.
        again = await new.claim("agent-2", "coder", 60_000)
        assert again is not None and again.task_id == ids["running"]
        # Identity sequences moved past the copied keys: new rows get fresh ones.
        fresh = await new.create_task(new_task(ids["pid"], "after the copy"))
        assert (await new.get_task(fresh)).title == "after the copy"
    finally:
        await old.aclose()
        await new.aclose()

    import psycopg

    with psycopg.connect(pg_server.url) as conn:  # the OTLP blob, byte for byte, as bytea
        blobs = conn.execute(
            f"SELECT blob FROM {schema_name(key)}.span_batches WHERE stored = 'blob'"
        ).fetchall()
    assert [bytes(b[0]) for b in blobs] == [b"\x00\x01\xffproto"]

    # And back: the PostgreSQL rail into a new embedded file reads the same (FTS refilled).
    back = tmp_path / "back.db"
    await copy_rail(target, f"sqlite:///{back}")
    copied = await open_tracker(f"sqlite:///{back}")
    try:
        assert [e.key for e in await copied.store_search("copied")] == ["greeting"]
        assert len((await copied.list_tasks(limit=1000)).items) == 7
    finally:
        await copied.aclose()


def _rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "rail", "copy", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


def _with_password(url: str) -> str:
    # The test server trusts 127.0.0.1, so a password is accepted and ignored.
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:s3cret-pw@{host}"


async def test_a_non_empty_target_is_refused_with_nothing_written_then_force_replaces(
    pg_server: PgServer, tmp_path: Path
) -> None:
    source = tmp_path / "old.db"
    await _populate(source)
    target = _with_password(_url())
    t = await open_tracker(target)
    try:
        mine = await make_pipeline(t, name="already-here")
    finally:
        await t.aclose()

    refused = _cli(f"sqlite:///{source}", target)
    assert refused.returncode == 2, refused.stderr
    assert "not empty: pipelines (1)" in refused.stderr and "nothing written" in refused.stderr
    assert "s3cret-pw" not in refused.stdout + refused.stderr
    t = await open_tracker(target)
    try:
        assert [p.id for p in await t.list_pipelines()] == [mine]
        assert (await t.list_tasks(limit=10)).items == []
    finally:
        await t.aclose()
    with pytest.raises(RailNotEmpty, match="pipelines"):
        await copy_rail(f"sqlite:///{source}", target)

    forced = _cli(f"sqlite:///{source}", target, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert "s3cret-pw" not in forced.stdout + forced.stderr
    report = json.loads(forced.stdout)
    assert report["replaced"] == {"pipelines": 1} and report["tables"]["tasks"] == 6
    t = await open_tracker(target)
    try:
        assert [p.name for p in await t.list_pipelines()] == ["flow"]
    finally:
        await t.aclose()


async def test_bad_urls_are_named_and_nothing_is_created(
    pg_server: PgServer, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(NoRail, match="no rail file at"):
        await copy_rail(f"sqlite:///{missing}", _url())
    assert not missing.exists()
    with pytest.raises(ConfigError, match="'http' is no rail"):
        await copy_rail("http://127.0.0.1:1/x", _url())
    with pytest.raises(ConfigError, match="in-memory"):
        await copy_rail("sqlite:///:memory:", _url())
    source = tmp_path / "old.db"
    t = await open_tracker(f"sqlite:///{source}")
    await t.aclose()
    with pytest.raises(ConfigError, match="pool_size"):
        await copy_rail(f"sqlite:///{source}", _url() + "&pool_size=zero")
    with pytest.raises(ConfigError, match="same rail"):
        await copy_rail(f"sqlite:///{source}", f"sqlite:///{source}")
    with pytest.raises(NoRail, match="no rail in schema"):
        await copy_rail(_url(), f"sqlite:///{tmp_path / 'new.db'}")
    assert not (tmp_path / "new.db").exists()
    done = _cli("ftp://somewhere/x", f"sqlite:///{tmp_path / 'new.db'}")
    assert done.returncode == 2 and "source: 'ftp' is no rail" in done.stderr


async def test_a_count_that_differs_fails_naming_the_table_and_writes_nothing(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "old.db"
    await _populate(source)
    write = railcopy._PgSide.write

    def lossy(self: Any, table: str, cols: Any, rows: list[Any]) -> None:
        write(self, table, cols, rows[1:] if table == "events" else rows)  # a row lost

    monkeypatch.setattr(railcopy._PgSide, "write", lossy)
    target = _url()
    with pytest.raises(CopyFailed, match=r"table events: .* nothing written"):
        await copy_rail(f"sqlite:///{source}", target)
    monkeypatch.undo()
    t = await open_tracker(target)
    try:
        assert await t.list_pipelines() == []
    finally:
        await t.aclose()
    assert _rows(source, "events") > 0  # the source is untouched


async def test_a_worker_drains_the_copied_rail(pg_server: PgServer, tmp_path: Path) -> None:
    source = tmp_path / "old.db"
    t = await open_tracker(f"sqlite:///{source}")
    try:
        import tomllib

        flow = tomllib.loads(PIPELINE_TOML)
        pid = await t.create_pipeline(flow["name"], flow["definition"])
        ids = await t.create_tasks([new_task(pid, f"t{n}") for n in range(20)])
        await claim(t, ttl_ms=HOUR_MS)  # a worker of the old rail holds one
    finally:
        await t.aclose()
    target = _url()
    assert (await copy_rail(f"sqlite:///{source}", target)).lapsed_leases == 1

    cfg = write_config(
        tmp_path, target, token=None, argv=[sys.executable, "-c", "import sys; sys.exit(0)"]
    )
    done = subprocess.run(
        [*CLI, "run", "--config", str(cfg), "--drain"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    t = await open_tracker(target)
    try:
        stages = {(await t.get_task(i)).stage for i in ids}
        assert stages == {"done"}
    finally:
        await t.aclose()


async def test_a_copy_makes_its_own_lease_token_key(tmp_path: Path) -> None:
    # The rail key (it derives keyed claims' tokens) is the rail's own: no lease is live across
    # a copy, so the copy needs none of the source's; it makes its own on its first keyed claim.
    source, target = tmp_path / "old.db", tmp_path / "new.db"
    old = await open_tracker(f"sqlite:///{source}")
    try:
        pid = await make_pipeline(old)
        await old.create_tasks([new_task(pid, "a"), new_task(pid, "b")])
        await claim(old, idempotency_key="k-src")
    finally:
        await old.aclose()
    report = await copy_rail(f"sqlite:///{source}", f"sqlite:///{target}")
    assert "rail_secrets" not in report.tables
    assert _rows(source, "rail_secrets") == 1 and _rows(target, "rail_secrets") == 0
    new = await open_tracker(f"sqlite:///{target}")
    try:
        with pytest.raises(LeaseLost):  # the copied claim's lease arrived lapsed
            await claim(new, idempotency_key="k-src")
        lease = await claim(new, idempotency_key="k-new")
        again = await claim(new, idempotency_key="k-new")
        assert again.lease_token.get_secret_value() == lease.lease_token.get_secret_value()
        await new.heartbeat(lease)
    finally:
        await new.aclose()
    with sqlite3.connect(source) as a, sqlite3.connect(target) as b:
        (mine,) = a.execute("SELECT value FROM rail_secrets").fetchone()
        (theirs,) = b.execute("SELECT value FROM rail_secrets").fetchone()
    a.close()
    b.close()
    assert mine != theirs
