"""End to end: a real Worker on a real embedded rail, with nullclaw roles run by the fake binary."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plugins.nullclaw.executor import NullClawExecutor
from tests.plugins.helpers import pid_alive, wait_dead
from tracker_client.factory import open_tracker
from tracker_client.models import RetryPolicy, TaskCreate
from tracker_client.protocol import Tracker
from worker.config.models import RoleConfig, WorkerConfig
from worker.daemon import Role, Worker

from .conftest import read_record, wait_pidfile

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PIPELINE = {
    "initial": "coding",
    "states": {
        "coding": {"agent_role": "coder"},
        "review": {"agent_role": "reviewer"},
        "done": {"terminal": True},
    },
    "transitions": [
        {
            "from": "coding",
            "to": "review",
            "trigger": "complete",
            "instructions": "Check the coder's answer in .backlog-worker/.",
        },
        {"from": "review", "to": "done", "trigger": "approve"},
        {"from": "review", "to": "coding", "trigger": "reject", "instructions": "fix it"},
    ],
}


@pytest.fixture
async def tracker(tmp_path: Path) -> AsyncIterator[Tracker]:
    t = await open_tracker(f"sqlite:///{tmp_path}/rail.db")
    try:
        yield t
    finally:
        await t.aclose()


def _worker(tracker: Tracker, tmp_path: Path, options: dict[str, Any], **kw: Any) -> Worker:
    shared = {**options, "workspace": "task", "workspace_dir": str(tmp_path / "ws")}
    roles = [
        Role(
            RoleConfig(name="coder", executor="nullclaw", options=shared), NullClawExecutor(shared)
        ),
        Role(
            RoleConfig(name="reviewer", executor="nullclaw"),
            NullClawExecutor({**shared, "triggers": {"APPROVE": "approve", "REJECT": "reject"}}),
        ),
    ]
    config: dict[str, Any] = {
        "agent_id": "w1",
        "concurrency": 2,
        "lease_ttl_s": 3.0,  # heartbeats every 1 s: a loaded loop never lets it lapse
        "idle_min_s": 0.01,
        "idle_max_s": 0.1,
        "shutdown_grace_s": 1.0,
        "report_flush_s": 0.05,
        "workdir": tmp_path / "runs",
    }
    config.update(kw)
    return Worker(tracker, WorkerConfig(**config), roles)


async def test_tasks_flow_through_coder_and_reviewer(
    tmp_path: Path,
    tracker: Tracker,
    options: dict[str, Any],
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_ANSWER", "All done, tests pass.\n\nAPPROVE")
    pipeline_id = await tracker.create_pipeline("code-review", PIPELINE)
    task_id = await tracker.create_task(
        TaskCreate(pipeline_id=pipeline_id, title="Add hello()", metadata={"repo": "demo"})
    )
    worker = _worker(tracker, tmp_path, options, drain=True)
    with anyio.fail_after(60):
        await worker.run()
    detail = await tracker.get_task(task_id)
    assert detail.stage == "done"
    artifacts = (await tracker.list_artifacts(task_id=task_id)).items
    assert len(artifacts) == 2  # the coder's answer and the reviewer's
    for art in artifacts:
        assert art.kind == "file"
        path = Path(art.uri.removeprefix("file://"))
        assert path.read_text() == "All done, tests pass.\n\nAPPROVE"
        assert path.parent == tmp_path / "ws" / task_id / ".backlog-worker"
        assert art.size_bytes == len(path.read_bytes())
    waited = await tracker.wait(task_id, timeout_s=1)
    assert waited.result_event is not None
    assert waited.result_event.data["trigger"] == "approve"
    # the reviewer's prompt carried the instructions of the transition that led to review
    prompt = read_record(record)["prompt"]
    assert "Check the coder's answer in .backlog-worker/." in prompt
    assert "one of these words: APPROVE, REJECT" in prompt


async def test_failures_land_with_the_right_retry_decision(
    tmp_path: Path,
    tracker: Tracker,
    options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "http429")
    pipeline_id = await tracker.create_pipeline("code-review", PIPELINE)
    limited = await tracker.create_task(
        TaskCreate(
            pipeline_id=pipeline_id,
            title="rate limited",
            # the default delay (0.5-1 s): the drain waits for the retry
            retry_policy=RetryPolicy(max_attempts=2),
        )
    )
    worker = _worker(tracker, tmp_path, options, drain=True)
    with anyio.fail_after(60):
        await worker.run()
    runs = await tracker.list_runs(limited)
    assert [r.status for r in runs] == ["failed", "failed"]  # retried once: it is retryable
    assert runs[0].error is not None
    assert "nullclaw_provider_error" in runs[0].error
    assert "error: RateLimited" in runs[0].error
    assert (await tracker.get_task(limited)).dead_letter_reason == "max_attempts_exceeded"

    # a config error is permanent: dead-lettered at once although attempts are unlimited
    bad = {**options, "home": str(tmp_path / "empty-home")}
    (tmp_path / "empty-home").mkdir()
    del bad["provider"], bad["model"], bad["base_url"]
    config_task = await tracker.create_task(TaskCreate(pipeline_id=pipeline_id, title="cfg"))
    worker = _worker(tracker, tmp_path, bad, drain=True)
    with anyio.fail_after(60):
        await worker.run()
    detail = await tracker.get_task(config_task)
    assert detail.dead_letter_reason == "permanent_failure"
    [run] = await tracker.list_runs(config_task)
    assert run.error is not None
    assert run.error.startswith("nullclaw_config_error")
    assert "No default model configured" in run.error


async def test_task_cancelled_mid_run_kills_the_process_group(
    tmp_path: Path,
    tracker: Tracker,
    options: dict[str, Any],
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lease loss through the real worker: the heartbeat sees the revoked lease and cancels."""
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    monkeypatch.setenv("FAKE_NULLCLAW_CHILD_IGNORES_TERM", "1")
    pipeline_id = await tracker.create_pipeline("code-review", PIPELINE)
    task_id = await tracker.create_task(TaskCreate(pipeline_id=pipeline_id, title="hang"))
    worker = _worker(tracker, tmp_path, options)
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: worker.run(task_status=task_status))
        pids = await wait_pidfile(pidfile)
        assert all(pid_alive(p) for p in pids.values())
        await tracker.cancel(task_id)
        assert await wait_dead(list(pids.values()), deadline_s=10) == []
        worker.stop(immediate=True)
    detail = await tracker.get_task(task_id)
    assert detail.dead_letter_reason == "cancelled"
    assert (await tracker.list_artifacts(task_id=task_id)).items == []


async def test_worker_shutdown_mid_run_kills_the_process_group(
    tmp_path: Path,
    tracker: Tracker,
    options: dict[str, Any],
    pidfile: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_NULLCLAW_MODE", "hang")
    pipeline_id = await tracker.create_pipeline("code-review", PIPELINE)
    task_id = await tracker.create_task(TaskCreate(pipeline_id=pipeline_id, title="hang"))
    worker = _worker(tracker, tmp_path, options, shutdown_grace_s=0.3)
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: worker.run(task_status=task_status))
        pids = await wait_pidfile(pidfile)
        worker.stop()  # staged: grace, then cancel, then a shielded final report
    assert [p for p in pids.values() if pid_alive(p)] == [] or (
        await wait_dead(list(pids.values()), deadline_s=5) == []
    )
    [run] = await tracker.list_runs(task_id)
    assert run.status == "released"  # given back, no attempt counted
    assert run.error is not None
    assert "worker_shutdown" in run.error
