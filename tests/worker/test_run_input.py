"""Ids from the tracker are input: a hostile run id cannot steer the worker outside its base.

The run's working directory is named after the run id and removed with ``rmtree`` after the run;
an id such as ``x/../../victim`` must neither create nor delete anything outside the base.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from plugins.api import ExecutionContext
from tests.remote.fake_nulltickets import FakeNullTickets
from tests.worker.conftest import FnExecutor
from tests.worker.runkit import claim_one, run_task, settings
from tracker_client.factory import open_tracker
from tracker_client.nulltickets.client import RemoteTracker
from tracker_client.protocol import Tracker
from worker.workdirs import remove_workdir, workdir_name

pytestmark = pytest.mark.anyio


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


@pytest.mark.parametrize("bad_id", ["x/../../victim", "../victim", "..", "/abs/victim", "a\0b"])
async def test_a_hostile_run_id_cannot_delete_outside_the_workdir_base(
    tracker: Tracker, tmp_path: Path, bad_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "work" / "base"
    base.mkdir(parents=True)
    victim = tmp_path / "work" / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    lease = await claim_one(tracker)
    # The tracker's answer with the run id replaced, as a hostile or broken tracker would send.
    hostile = lease.model_copy(update={"run": lease.run.model_copy(update={"id": bad_id})})
    seen: list[Path] = []

    async def use_workdir(ctx: ExecutionContext) -> None:
        seen.append(ctx.workdir)
        (ctx.workdir / "scratch.txt").write_text("x")

    result = await run_task(tracker, hostile, FnExecutor(use_workdir), settings(base))
    assert (victim / "precious.txt").read_text() == "keep me"
    assert seen and seen[0].parent == base  # one component below the base, whatever the id
    assert not seen[0].exists()  # and that one was cleaned up
    assert "not a safe path component" in caplog.text
    # The run went on normally; the tracker then refused the bogus run id (lease lost).
    assert result.status == "lost", result


def test_safe_run_ids_keep_their_readable_name() -> None:
    assert workdir_name("6efb43d0-972a-4b7d-af8c-dc1699a2b3b4") == (
        "run-6efb43d0-972a-4b7d-af8c-dc1699a2b3b4"
    )
    hashed = workdir_name("x/../../victim")
    assert (
        "/" not in hashed and hashed.startswith("run-h") and hashed != workdir_name("x/../victim")
    )


async def test_rmtree_refuses_a_directory_outside_the_base(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    assert not await remove_workdir(str(outside), base)
    assert outside.is_dir()
    inside = base / "run-1"
    inside.mkdir()
    assert await remove_workdir(str(inside), base)
    assert not inside.exists()


class HostileIds:
    """The fake NullTickets server, but every claimed run gets the id ``hostile``."""

    def __init__(self, hostile: str) -> None:
        self.fake = FakeNullTickets(api_token="admin-token")
        self.hostile = hostile

    def handle(self, request: httpx.Request) -> httpx.Response:
        response = self.fake.handle(request)
        if request.url.path != "/leases/claim" or response.status_code != 200:
            return response
        doc = json.loads(response.content)
        old = doc["run"]["id"]
        run = self.fake.runs.pop(old)
        run["id"] = doc["run"]["id"] = self.hostile
        self.fake.runs[self.hostile] = run
        for lease in self.fake.leases.values():
            if lease["run_id"] == old:
                lease["run_id"] = self.hostile
        return httpx.Response(200, json=doc, headers={"Connection": "close"})


async def test_a_server_answering_a_hostile_run_id_gets_the_work_done_outside_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = tmp_path / "work" / "base"
    base.mkdir(parents=True)
    victim = tmp_path / "work" / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    server = HostileIds("x/../../victim")
    remote = RemoteTracker(
        "http://127.0.0.1:7700",
        api_token="admin-token",
        transport=httpx.MockTransport(server.handle),
    )
    try:
        lease = await claim_one(remote)
        assert lease.run.id == "x/../../victim"

        async def use_workdir(ctx: ExecutionContext) -> None:
            (ctx.workdir / "scratch.txt").write_text("x")

        result = await run_task(remote, lease, FnExecutor(use_workdir), settings(base))
    finally:
        await remote.aclose()
    # The run went through (the id is fine as a URL path segment), its directory was its own.
    assert result.status == "transitioned", result
    assert (victim / "precious.txt").read_text() == "keep me"
    assert list(base.iterdir()) == []
    assert "not a safe path component" in caplog.text
