"""The claim riding in ``finish_many`` (extension ``finish_claim``) against a real ``tracker
serve`` process: the items are written first and the claim sees the slots they freed; each part
answers as its own call would, a retry under the same keys answers the same; a scoped worker
token claims only its roles that way too; and the remote client sends a ``finish_many`` and the
``claim_many`` that follows as one request, each caller getting its own answer (a lost answer
fails both, and their retries under their keys recover it)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from pydantic import SecretStr

from tests.faultproxy import FaultProxy, Hang
from tests.worker.daemonkit import (
    TOKEN,
    clean_env,
    create_token,
    leased,
    run_outcomes,
    serve_tracker,
)
from tracker_client.capabilities import LeaseHandle
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.errors import TrackerUnavailable, ValidationFailed
from tracker_client.models import Lease, TaskCreate
from tracker_client.nulltickets.client import RemoteTracker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

COMPLETE = {"trigger": "complete"}
CLI = (sys.executable, "-m", "worker")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with serve_tracker(tmp_path, token=None) as (url, db):
        yield url, db


@pytest.fixture
async def client(served: tuple[str, Path]) -> AsyncIterator[RemoteTracker]:
    tracker = RemoteTracker(served[0], timeout_s=5)
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def _add(tracker: RemoteTracker, n: int) -> list[str]:
    [pid] = [p.id for p in await tracker.list_pipelines() if p.name == "flow"]
    return await tracker.create_tasks(
        [TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(n)]
    )


def _item(lease: Lease | dict[str, Any], key: str | None = None) -> dict[str, Any]:
    run_id = lease.run.id if isinstance(lease, Lease) else lease["run"]["id"]
    token = (
        lease.lease_token.get_secret_value() if isinstance(lease, Lease) else lease["lease_token"]
    )
    item: dict[str, Any] = {"run_id": run_id, "lease_token": token, "transition": COMPLETE}
    if key is not None:
        item["idempotency_key"] = key
    return item


def _finish_item(lease: Lease, key: str) -> FinishItem:
    handle = LeaseHandle(
        lease_id=lease.lease_id,
        run_id=lease.run.id,
        lease_token=SecretStr(lease.lease_token.get_secret_value()),
    )
    return FinishItem(lease=handle, transition=COMPLETE, idempotency_key=key)


def _claim(n: int, key: str | None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"agent_id": "w1", "agent_role": "coder", "lease_ttl_ms": 30_000, "n": n}
    if key is not None:
        body["idempotency_key"] = key
    return {**body, **extra}


async def test_the_server_advertises_it(client: RemoteTracker) -> None:
    assert "finish_claim" in (await client.capabilities()).extensions


async def test_the_items_are_written_then_the_claim_leases_in_the_same_answer(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    url, db = served
    first, second, third = await _add(client, 3)
    held = await client.claim_many("w1", "coder", 30_000, 2, idempotency_key="c1")
    assert {lease.task.id for lease in held} == {first, second}
    body = {"items": [_item(x, f"f{i}") for i, x in enumerate(held)], "claim": _claim(2, "c2")}
    async with httpx.AsyncClient(base_url=url) as http:
        answer = (await http.post("/runs/finish-many", json=body)).json()
        assert [e["status"] for e in answer["results"]] == [200, 200]
        assert answer["claim"]["status"] == 200
        [lease] = answer["claim"]["leases"]
        assert lease["task"]["id"] == third and lease["lease_token"]
        for task_id in (first, second):
            assert run_outcomes(db, task_id) == [("completed", None)]
        assert leased(db) == 1
        # The same request again (its answer lost): each part answers from its record.
        again = (await http.post("/runs/finish-many", json=body)).json()
    assert again["results"] == answer["results"]
    assert again["claim"]["leases"][0]["lease_token"] == lease["lease_token"]
    assert leased(db) == 1


async def test_the_claim_counts_the_slots_the_items_freed(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    """A stage limited to one run at a time: the claim riding with the report of the one
    running leases the next (the report is written first); a claim sent before it gets none."""
    url, _db = served
    await _add(client, 2)
    limit = {"per_state": {"todo": 1}}
    [running] = await client.claim_many("w1", "coder", 30_000, 2, concurrency=limit)
    assert await client.claim_many("w1", "coder", 30_000, 1, concurrency=limit) == []
    body = {"items": [_item(running)], "claim": _claim(1, "k", concurrency=limit)}
    async with httpx.AsyncClient(base_url=url) as http:
        answer = (await http.post("/runs/finish-many", json=body)).json()
    assert answer["results"][0]["status"] == 200
    assert len(answer["claim"]["leases"]) == 1


async def test_a_refused_claim_is_answered_under_claim_and_the_items_are_still_written(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    url, db = served
    [task_id] = await _add(client, 1)
    [held] = await client.claim_many("w1", "coder", 30_000, 1)
    body = {"items": [_item(held)], "claim": _claim(0, "k")}  # n must be 1..100
    async with httpx.AsyncClient(base_url=url) as http:
        answer = (await http.post("/runs/finish-many", json=body)).json()
    assert answer["results"][0]["status"] == 200
    assert answer["claim"]["status"] == 400
    assert "n" in answer["claim"]["error"]["message"]
    assert run_outcomes(db, task_id) == [("completed", None)]


async def test_a_malformed_claim_refuses_the_request_naming_it(served: tuple[str, Path]) -> None:
    body = {"items": [{"run_id": "r", "lease_token": "t", "transition": COMPLETE}], "claim": {}}
    async with httpx.AsyncClient(base_url=served[0]) as http:
        answer = await http.post("/runs/finish-many", json=body)
    assert answer.status_code == 400
    assert "claim" in answer.json()["error"]["message"]


async def test_a_request_without_a_claim_answers_as_before(
    served: tuple[str, Path], client: RemoteTracker
) -> None:
    await _add(client, 1)
    [held] = await client.claim_many("w1", "coder", 30_000, 1)
    async with httpx.AsyncClient(base_url=served[0]) as http:
        answer = (await http.post("/runs/finish-many", json={"items": [_item(held)]})).json()
    assert set(answer) == {"results"}
    assert answer["results"][0]["status"] == 200


# -- the remote client ------------------------------------------------------------------------
class Counted(httpx.AsyncBaseTransport):
    """httpx's own transport (real HTTP), counting the requests by path."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_client_sends_a_report_and_the_claim_that_follows_as_one_request(
    served: tuple[str, Path],
) -> None:
    url, db = served
    counted = Counted()
    tracker = RemoteTracker(url, timeout_s=5, transport=counted)
    try:
        first, second = await _add(tracker, 2)
        [held] = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1")
        counted.paths.clear()
        outcomes: list[Any] = []
        claimed: list[Lease] = []

        async def report() -> None:
            outcomes.extend(await tracker.finish_many([_finish_item(held, "f1")]))

        async def claim() -> None:
            await anyio.lowlevel.checkpoint()  # the claim follows the report by a pass
            claimed.extend(await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c2"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            tg.start_soon(claim)
        assert counted.paths == ["/runs/finish-many"]
        assert isinstance(outcomes[0], FinishResult)
        assert [lease.task.id for lease in claimed] == [second]
        assert run_outcomes(db, first) == [("completed", None)]
        assert (tracker.pairing.paired, tracker.pairing.alone) == (1, 0)
    finally:
        await tracker.aclose()


async def test_a_report_no_claim_follows_goes_alone_and_a_keyless_claim_never_rides(
    served: tuple[str, Path],
) -> None:
    url, _db = served
    counted = Counted()
    tracker = RemoteTracker(url, timeout_s=5, transport=counted)
    try:
        await _add(tracker, 3)
        # Claims of one lease each: a client claiming several at once is a busy worker, whose
        # reports carry a claim ahead of their own (test_claim_ahead.py).
        held = [
            *await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1"),
            *await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1b"),
        ]
        counted.paths.clear()
        [outcome] = await tracker.finish_many([_finish_item(held[0], "f1")])
        assert isinstance(outcome, FinishResult)
        assert counted.paths == ["/runs/finish-many"]
        counted.paths.clear()

        async def report() -> None:
            await tracker.finish_many([_finish_item(held[1], "f2")])

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            await anyio.lowlevel.checkpoint()
            [lease] = await tracker.claim_many("w1", "coder", 30_000, 1)  # no key
        assert sorted(counted.paths) == ["/leases/claim-many", "/runs/finish-many"]
        assert lease.task.id
        assert (tracker.pairing.paired, tracker.pairing.alone) == (0, 2)
    finally:
        await tracker.aclose()


@pytest.mark.parametrize("bad", [{"n": {1, 2}}, {"n": float("nan")}], ids=["set", "nan"])
async def test_a_report_that_is_not_json_is_refused_before_it_is_sent_alone_or_riding(
    served: tuple[str, Path], bad: dict[str, Any]
) -> None:
    url, db = served
    counted = Counted()
    tracker = RemoteTracker(url, timeout_s=5, transport=counted)
    try:
        first, _second = await _add(tracker, 2)
        [held] = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1")
        item = FinishItem(
            lease=_finish_item(held, "f1").lease,
            events=({"kind": "step", "data": bad},),
            transition=COMPLETE,
            idempotency_key="f1",
        )
        counted.paths.clear()
        with pytest.raises(ValidationFailed, match="finish_many") as alone:
            await tracker.finish_many([item])
        assert alone.value.code == "invalid_json" and counted.paths == []

        async def report() -> None:
            with pytest.raises(ValidationFailed, match="finish_many") as riding:
                await tracker.finish_many([item])
            assert riding.value.code == "invalid_json"

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            await anyio.lowlevel.checkpoint()
            claimed = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c2")
        assert counted.paths == ["/leases/claim-many"]  # the claim went alone, as its own call
        assert len(claimed) == 1
        assert run_outcomes(db, first) == [("running", None)]  # nothing of the report written
    finally:
        await tracker.aclose()


async def test_a_riding_claim_refused_raises_to_the_claim_only(served: tuple[str, Path]) -> None:
    tracker = RemoteTracker(served[0], timeout_s=5)
    try:
        await _add(tracker, 1)
        [held] = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1")
        outcomes: list[Any] = []

        async def report() -> None:
            outcomes.extend(await tracker.finish_many([_finish_item(held, "f1")]))

        refused: list[BaseException] = []

        async def claim() -> None:
            await anyio.lowlevel.checkpoint()
            try:
                await tracker.claim_many("w1", "coder", 30_000, 0, idempotency_key="c2")
            except ValidationFailed as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            tg.start_soon(claim)
        assert "n must be" in str(refused[0])
        assert tracker.pairing.paired == 1
        assert isinstance(outcomes[0], FinishResult)
    finally:
        await tracker.aclose()


async def test_a_lost_answer_fails_both_and_their_retries_answer_the_same(
    served: tuple[str, Path],
) -> None:
    url, db = served
    proxy = FaultProxy(
        int(url.rsplit(":", 1)[1]),
        hangs=[Hang("finish-many HTTP", rate=1.0, hang_s=None, landed=True)],
    )
    with proxy.start():
        tracker = RemoteTracker(proxy.url, timeout_s=1)
        try:
            first, second = await _add(tracker, 2)
            [held] = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c1")
            item = _finish_item(held, "f1")
            errors: list[BaseException] = []

            async def report() -> None:
                try:
                    await tracker.finish_many([item])
                except TrackerUnavailable as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(report)
                await anyio.lowlevel.checkpoint()
                with pytest.raises(TrackerUnavailable):
                    await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c2")
            assert len(errors) == 1  # the report heard the same loss
            assert run_outcomes(db, first) == [("completed", None)]  # written all the same
            assert leased(db) == 1  # the claim's lease, held for its retry
            proxy.set_hangs([])
            [outcome] = await tracker.finish_many([item])
            assert isinstance(outcome, FinishResult)
            [lease] = await tracker.claim_many("w1", "coder", 30_000, 1, idempotency_key="c2")
            assert lease.task.id == second
            assert leased(db) == 1
        finally:
            await tracker.aclose()


# -- scoped tokens ----------------------------------------------------------------------------
async def test_a_worker_token_claims_only_its_roles_in_the_riding_claim(tmp_path: Path) -> None:
    with serve_tracker(tmp_path, token=TOKEN) as (url, db):
        worker = create_token(db, "w", "--kind", "worker", "--role", "coder")
        admin = RemoteTracker(url, api_token=TOKEN, timeout_s=5)
        try:
            await _add(admin, 1)
            [held] = await admin.claim_many("w1", "coder", 30_000, 1)
        finally:
            await admin.aclose()
        body = {"items": [_item(held)], "claim": _claim(1, "k", agent_role="review")}
        async with httpx.AsyncClient(base_url=url) as http:
            answer = await http.post(
                "/runs/finish-many", json=body, headers={"Authorization": f"Bearer {worker}"}
            )
        assert answer.status_code == 403
        assert "may not claim role 'review'" in answer.json()["error"]["message"]
        assert worker not in answer.text
        assert leased(db) == 1  # nothing written: the report waits for a request it may send


# -- a real worker ------------------------------------------------------------------------------
async def test_a_draining_worker_sends_its_claims_inside_its_reports(tmp_path: Path) -> None:
    """A real worker draining a served rail (concurrency 4, 60 no-op tasks): the claims for
    the slots a batch of reports freed ride in that batch's finish-many, so claim-many is sent
    only for the first claim and the idle looks at the end, not once per batch."""
    from tests.remote.fixtures import serve_on_port
    from tests.worker.daemonkit import python_config
    from tests.worker.test_requests_per_task import ONE_STAGE, ROOT, Counting
    from tracker_client.embedded import EmbeddedTracker
    from tracker_client.serve.app import create_app

    tasks = 60
    (tmp_path / "jobs.py").write_text("async def noop(ctx):\n    return None\n")
    rail = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = await rail.create_pipeline("p", ONE_STAGE)
        await rail.create_tasks([TaskCreate(pipeline_id=pid, title=f"t{i}") for i in range(tasks)])
        counting = Counting(create_app(rail), plain=False)
        async with serve_on_port(counting) as url:
            config = python_config(
                tmp_path, url, "jobs:noop", "drain = true", "lease_ttl_s = 60", concurrency=4
            )
            done = await anyio.run_process(
                [sys.executable, "-m", "worker", "run", "--config", str(config)],
                env=clean_env(PYTHONPATH=f"{tmp_path}:{ROOT}"),
                cwd=tmp_path,
                check=False,
            )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        page = await rail.list_tasks(stage="done", limit=100)
        assert len(page.items) == tasks
    finally:
        await rail.aclose()
    reports = counting.per_route("POST /runs/finish-many")
    claims = counting.per_route("POST /leases/claim-many")
    assert reports >= tasks // 6, counting.counts
    assert claims <= 8, counting.counts  # one per batch (15+) before the claims rode along
