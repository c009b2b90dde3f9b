"""The parked claim (extension ``parked_claim``) against a real ``tracker serve`` process: it
leases work that comes while it waits, and no lease is left to its TTL because an answer was
not taken (a client gone, a cancel, a dropped answer); a retry under the key answers the same
leases."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.faultproxy import FaultProxy, Hang
from tests.worker.daemonkit import (
    TOKEN,
    RouteFaults,
    add_task,
    leased,
    reap,
    run_outcomes,
    serve_tracker,
    spawn_worker,
    wait_for,
    write_config,
)
from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.models import Lease, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_tracker(tmp_path, token=None) as (url, db):
        yield url, db


@pytest.fixture
async def client(served: tuple[str, Path]) -> AsyncIterator[RemoteTracker]:
    tracker = RemoteTracker(served[0], timeout_s=2)
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def _add(tracker: RemoteTracker, title: str = "t") -> str:
    [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "flow"]
    return await tracker.create_task(TaskCreate(pipeline_id=pid, title=title))


async def _park(tracker: RemoteTracker, wait_ms: int, key: str) -> list[Lease]:
    return await tracker.parked_claim("w1", "coder", 30_000, 1, wait_ms, idempotency_key=key)


async def _claim_within(tracker: RemoteTracker, seconds: float) -> Lease:
    """A plain claim, tried until it finds the work (the rail gives it back asynchronously)."""
    with anyio.fail_after(seconds):
        while True:
            lease = await tracker.claim("w2", "coder", 30_000)
            if lease is not None:
                return lease
            await anyio.sleep(0.02)


async def test_the_server_advertises_it(client: RemoteTracker) -> None:
    assert "parked_claim" in (await client.capabilities()).extensions


async def test_it_leases_work_submitted_while_it_waits(client: RemoteTracker) -> None:
    got: list[Lease] = []

    async def park() -> None:
        got.extend(await _park(client, 20_000, str(uuid.uuid4())))

    with anyio.fail_after(10):  # far below the 20 s wait: answered by the submit
        async with anyio.create_task_group() as tg:
            tg.start_soon(park)
            task_id = await _add(client)
    assert [lease.task.id for lease in got] == [task_id]


async def test_it_answers_empty_after_its_wait(client: RemoteTracker) -> None:
    started = anyio.current_time()
    assert await _park(client, 300, str(uuid.uuid4())) == []
    assert anyio.current_time() - started >= 0.3


async def test_a_retry_under_the_key_answers_the_same_lease(
    client: RemoteTracker, served: tuple[str, Path]
) -> None:
    await _add(client)
    key = str(uuid.uuid4())
    [first] = await _park(client, 0, key)
    [again] = await _park(client, 0, key)
    assert (again.lease_id, again.lease_token) == (first.lease_id, first.lease_token)
    assert leased(served[1]) == 1


async def test_a_request_without_a_key_or_with_a_bad_wait_is_refused(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    body = {"agent_id": "w", "agent_role": "coder", "n": 1, "wait_ms": 10}
    async with httpx.AsyncClient(base_url=served[0]) as http:
        answer = await http.post("/leases/claim-parked", json=body)
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "idempotency_key_required"
        answer = await http.post(
            "/leases/claim-parked",
            json={**body, "wait_ms": 60_001},
            headers={"Idempotency-Key": "k"},
        )
        assert answer.status_code == 400
        assert "wait_ms" in answer.json()["error"]["message"]
    with pytest.raises(ValidationFailed, match="idempotency key"):
        await client.parked_claim("w", "coder", 30_000, 1, 10)
    assert leased(served[1]) == 0


async def test_a_client_gone_while_parked_leases_nothing(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    body = {"agent_id": "gone", "agent_role": "coder", "n": 1, "wait_ms": 30_000}
    async with httpx.AsyncClient(base_url=served[0], timeout=0.5) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/leases/claim-parked", json=body, headers={"Idempotency-Key": "g"})
    task_id = await _add(client)  # after the client left: its parked claim must not take it
    lease = await _claim_within(client, 10)
    assert lease.task.id == task_id and lease.run.agent_id == "w2"
    # Leased once (by the plain claim), or first by the gone claim and then given back.
    assert [s for s, _ in run_outcomes(served[1], task_id)] in (
        ["running"],
        ["released", "running"],
    )


async def test_a_cancel_gives_back_what_it_leased(
    client: RemoteTracker, served: tuple[str, Path]
) -> None:
    task_id = await _add(client)
    key = str(uuid.uuid4())
    [lease] = await _park(client, 0, key)  # then its answer is "lost": the caller cancels
    assert (await client.cancel_parked_claim(idempotency_key=key)).released == 1
    assert leased(served[1]) == 0
    assert run_outcomes(served[1], task_id) == [("released", "released: claim_cancelled")]
    assert await _park(client, 0, key) == []  # the key's lease is not handed out again
    again = await _claim_within(client, 5)
    assert again.task.id == task_id and again.lease_id != lease.lease_id


@pytest.mark.parametrize("rounds", [6])
async def test_cancelled_calls_racing_submits_strand_no_lease(
    client: RemoteTracker, served: tuple[str, Path], rounds: int
) -> None:
    """A stopping worker's parked claim cancelled as work arrives: each task is either taken
    by the call (it answered first) or left unleased; none waits out a TTL."""
    taken: list[str] = []
    submitted: list[str] = []
    for i in range(rounds):
        async with anyio.create_task_group() as tg:

            async def park() -> None:
                taken.extend(x.task.id for x in await _park(client, 20_000, str(uuid.uuid4())))

            tg.start_soon(park)
            submitted.append(await _add(client, f"t{i}"))
            await anyio.sleep(0.002 * i)  # the cancel lands at a different point each round
            tg.cancel_scope.cancel()
    assert leased(served[1]) == len(taken)
    for task_id in set(submitted) - set(taken):
        assert all(status != "running" for status, _ in run_outcomes(served[1], task_id))


async def test_a_dropped_answer_is_cancelled_then_nothing_is_held(served: tuple[str, Path]) -> None:
    url, db = served
    proxy = FaultProxy(
        int(url.rsplit(":", 1)[1]),
        hangs=[Hang("claim-parked HTTP", rate=1.0, hang_s=None, landed=True)],
    )
    with proxy.start():
        tracker = RemoteTracker(proxy.url, timeout_s=1)
        try:
            task_id = await _add(tracker)
            key = str(uuid.uuid4())
            with pytest.raises(TrackerUnavailable):
                await _park(tracker, 0, key)  # leased, and the answer never comes
            assert leased(db) == 0  # the client's cancel gave it back
            assert run_outcomes(db, task_id) == [("released", "released: claim_cancelled")]
            proxy.set_hangs([])
            assert await _park(tracker, 0, key) == []  # the retry: given back, not re-handed
        finally:
            await tracker.aclose()


async def test_a_retry_after_a_lost_cancel_answers_the_same_lease(served: tuple[str, Path]) -> None:
    url, db = served
    hangs = [
        Hang("claim-parked HTTP", rate=1.0, hang_s=None, landed=True),
        Hang("claim-parked/cancel", rate=1.0, hang_s=None),  # the cancel never reaches the server
    ]
    proxy = FaultProxy(int(url.rsplit(":", 1)[1]), hangs=hangs)
    with proxy.start():
        tracker = RemoteTracker(proxy.url, timeout_s=1)
        try:
            await _add(tracker)
            key = str(uuid.uuid4())
            with pytest.raises(TrackerUnavailable):
                await _park(tracker, 0, key)
            assert leased(db) == 1  # held: the retry under the key is what takes it
            proxy.set_hangs([])
            [lease] = await _park(tracker, 0, key)
            assert leased(db) == 1
            await tracker.release(lease, "test")
            assert leased(db) == 0
        finally:
            await tracker.aclose()


# -- a real worker process --------------------------------------------------------------------
def _parked_worker(tmp_path: Path, url: str) -> subprocess.Popen[bytes]:
    """A worker of role ``coder`` whose idle probe parks for 5-10 s (a stop must not wait)."""
    argv = [sys.executable, "-c", "pass"]
    config = write_config(tmp_path, url, token=TOKEN, argv=argv, idle_min_s=5, idle_max_s=10)
    return spawn_worker(config, tmp_path / "worker.log")


def test_a_worker_stopped_while_parked_cancels_it_at_the_server(tmp_path: Path) -> None:
    with serve_tracker(tmp_path) as (url, db), RouteFaults(int(url.rsplit(":", 1)[1])) as proxy:
        proc = _parked_worker(tmp_path, proxy.url)
        try:
            wait_for(lambda: proxy.count("POST /leases/claim-parked"), 30, "a parked claim")
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            assert time.monotonic() - started < 4  # not the park's 5-10 s
            assert proxy.count("POST /leases/claim-parked/cancel") == 1
        finally:
            reap(proc)
        add_task(db)
        assert leased(db) == 0


@pytest.mark.parametrize("pause_s", [0.0, 0.05, 0.2])
def test_a_stop_racing_a_submit_strands_no_lease(tmp_path: Path, pause_s: float) -> None:
    """The task arrives as the worker stops: it runs (the answer came first) or is left
    unleased (the claim was cancelled, or its lease given back): never held to its TTL."""
    with serve_tracker(tmp_path) as (url, db), RouteFaults(int(url.rsplit(":", 1)[1])) as proxy:
        proc = _parked_worker(tmp_path, proxy.url)
        try:
            wait_for(lambda: proxy.count("POST /leases/claim-parked"), 30, "a parked claim")
            task_id = add_task(db)
            time.sleep(pause_s)  # the stop lands at a different point of the pickup
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            reap(proc)
        assert leased(db) == 0
        runs = run_outcomes(db, task_id)
        # (a failed run was seen once in CI, not reproduced since: the error and the worker's
        # log say which way the stop reached it)
        log = (tmp_path / "worker.log").read_text(errors="replace")[-4000:]
        assert [status for status, _ in runs] in ([], ["released"], ["completed"]), (runs, log)


async def test_a_retry_while_the_first_still_waits_takes_over(served: tuple[str, Path]) -> None:
    """The first request's client is gone but the server has not noticed (a proxy keeps its
    side open): the retry under the key stops it and is the one that leases."""
    url, db = served
    with FaultProxy(int(url.rsplit(":", 1)[1])).start() as proxy:
        body = {"agent_id": "w1", "agent_role": "coder", "lease_ttl_ms": 30_000, "n": 1}
        body["wait_ms"] = 30_000
        async with httpx.AsyncClient(base_url=proxy.url, timeout=0.5) as http:
            with pytest.raises(httpx.ReadTimeout):
                await http.post("/leases/claim-parked", json=body, headers={"Idempotency-Key": "k"})
        tracker = RemoteTracker(url, timeout_s=2)
        try:
            task_id = await _add(tracker)
            with anyio.fail_after(10):  # not the first request's 30 s
                [lease] = await _park(tracker, 30_000, "k")
            assert lease.task.id == task_id
            assert leased(db) == 1
            assert [s for s, _ in run_outcomes(db, task_id)] in (
                ["running"],
                ["released", "running"],
            )
        finally:
            await tracker.aclose()


async def test_the_claim_a_create_brought_work_to_is_answered_before_the_create(
    tmp_path: Path,
) -> None:
    """A parked claim riding a create is answered first (the pickup waits on it, the creator
    only for its id): the order in which ``tracker serve`` starts the two answers."""
    from tests.remote.fixtures import serve_on_port
    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    rail = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    started: list[str] = []

    async def observer(name: str, scope: Any, receive: Any, send: Any, call: Any) -> None:
        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                started.append(name)
            await send(message)

        await call(receive, sending)

    try:
        pid = await rail.create_pipeline(
            "flow",
            {
                "initial": "todo",
                "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
                "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
            },
        )
        app = create_app(rail)
        app.observe(observer)
        async with serve_on_port(app) as url:
            worker, producer = RemoteTracker(url, timeout_s=5), RemoteTracker(url, timeout_s=5)
            try:
                await worker.health()
                await producer.health()
                got: list[Lease] = []

                async def parked() -> None:
                    got.extend(await _park(worker, 10_000, str(uuid.uuid4())))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(parked)
                    await wait_for_parked(rail)
                    started.clear()
                    await producer.create_task(TaskCreate(pipeline_id=pid, title="t"))
            finally:
                await worker.aclose()
                await producer.aclose()
        assert len(got) == 1
        assert started == ["parked_claim", "create_task"]
    finally:
        await rail.aclose()


async def wait_for_parked(rail: Any) -> None:
    """Until a parked claim waits at ``rail`` (what a create can take along)."""
    with anyio.fail_after(10):
        while not rail._parked.waiting:
            await anyio.sleep(0.005)
