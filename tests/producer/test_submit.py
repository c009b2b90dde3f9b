"""``connect`` + ``Rail.submit``/``submit_many``/``wait``/``cancel``/``requeue``/
``requeue_dead_letters``/``task`` on a real embedded rail file and the same file served on
127.0.0.1. Each bad input is refused naming what is wrong, with nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from tests.producer.conftest import Target
from tracker_client import Rail, Submission, connect
from tracker_client.errors import NotFound, ValidationFailed

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def tasks_in(rail: Rail) -> int:
    """How many tasks the rail holds."""
    return int(await rail.tracker.call("count_tasks"))


async def test_submit_by_name_or_id_with_metadata_priority_and_dependencies(
    target: Target,
) -> None:
    async with connect(target.url, token=target.token) as rail:
        first = await rail.submit("review", "draft it", metadata={"ticket": 42}, priority=7)
        pipeline = await rail.pipeline("review")
        second = await rail.submit(pipeline.id, "then this", depends_on=[first])
        one, two = await rail.task(first), await rail.task(second)
        assert (one.stage, one.metadata, one.priority, one.pipeline_id) == (
            "draft",
            {"ticket": 42},
            7,
            pipeline.id,
        )
        assert [d.depends_on_task_id for d in two.dependencies] == [first]
        assert two.pipeline_id == pipeline.id
        assert await tasks_in(rail) == 2


async def test_an_unknown_pipeline_lists_close_names_and_writes_nothing(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        with pytest.raises(NotFound, match=r"no pipeline named 'reveiw': did you mean review"):
            await rail.submit("reveiw", "x")
        with pytest.raises(NotFound, match=r"pipelines: review, reviews"):
            await rail.submit("zzzzzz", "x")
        assert await tasks_in(rail) == 0


async def test_an_unknown_dependency_writes_nothing(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        with pytest.raises(NotFound, match="dependency"):
            await rail.submit("review", "x", depends_on=["00000000-0000-4000-8000-000000000000"])
        assert await tasks_in(rail) == 0


BAD: list[tuple[dict[str, Any], str]] = [
    ({"title": ""}, "title must be a non-empty string"),
    ({"title": "   "}, "title must be a non-empty string"),
    ({"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware"),
    ({"run_at": "2030-01-01T00:00:00Z"}, "run_at must be a datetime"),
    ({"delay": -1}, "delay must be zero or more seconds"),
    ({"delay": timedelta(seconds=-5)}, "delay must be zero or more seconds"),
    ({"delay": float("nan")}, "delay must be zero or more seconds"),
    ({"delay": "10m"}, "delay must be seconds"),
    ({"delay": 10 * 366 * 86_400 + 1e6}, "delay must be at most ten years"),
    ({"run_at": datetime(3000, 1, 1, tzinfo=UTC)}, "run_at must be at most ten years"),
    ({"delay": 5, "run_at": datetime.now(UTC)}, "give delay or run_at, not both"),
    ({"priority": "high"}, "priority must be an integer"),
    ({"priority": True}, "priority must be an integer"),
    ({"metadata": [1, 2]}, "metadata must be a mapping"),
    ({"depends_on": "abc"}, "depends_on must be a list of task ids"),
    ({"depends_on": [""]}, "depends_on item must be a non-empty string"),
    ({"dedupe_key": ""}, "dedupe_key must be a non-empty string"),
    ({"dedupe_window": 60}, "dedupe_window needs a dedupe_key"),
    ({"concurrency_key": ""}, "concurrency_key must be a non-empty string"),
    ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
]


@pytest.mark.parametrize(("options", "message"), BAD, ids=[m for _, m in BAD])
async def test_bad_input_names_the_field_and_writes_nothing(
    target: Target, options: dict[str, Any], message: str
) -> None:
    fields = {"title": "ok", **options}
    async with connect(target.url, token=target.token) as rail:
        with pytest.raises(ValidationFailed, match=message):
            await rail.submit("review", **fields)
        if "idempotency_key" not in options:  # one key per batch: submit_many's own keyword
            with pytest.raises(ValidationFailed, match=f"item 1: {message}"):
                await rail.submit_many(
                    [{"pipeline": "review", "title": "fine"}, {"pipeline": "review", **fields}]
                )
        assert await tasks_in(rail) == 0


async def test_unknown_keywords_are_type_errors_and_write_nothing(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        with pytest.raises(TypeError, match="depends"):
            await rail.submit("review", "x", depends=["a"])  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"item 0: unknown option\(s\) dependencies"):
            await rail.submit_many([{"pipeline": "review", "title": "x", "dependencies": []}])
        with pytest.raises(TypeError, match="item 0: missing title"):
            await rail.submit_many([{"pipeline": "review"}])
        with pytest.raises(TypeError, match="item 0 must be a Submission or a mapping"):
            await rail.submit_many(["review"])  # type: ignore[list-item]
        with pytest.raises(ValidationFailed, match="at least one item"):
            await rail.submit_many([])
        assert await tasks_in(rail) == 0


async def test_submit_many_is_all_or_nothing(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        ids = await rail.submit_many(
            [Submission("review", "a", priority=1), {"pipeline": "reviews", "title": "b"}]
        )
        assert [(await rail.task(i)).title for i in ids] == ["a", "b"]
        missing = "00000000-0000-4000-8000-000000000000"
        with pytest.raises(NotFound):
            await rail.submit_many(
                [
                    {"pipeline": "review", "title": "c"},
                    Submission("review", "d", depends_on=[missing]),
                ]
            )
        assert await tasks_in(rail) == 2


async def test_an_idempotency_key_answers_the_first_id(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        first = await rail.submit("review", "once", idempotency_key="k-1")
        assert await rail.submit("review", "once", idempotency_key="k-1") == first
        assert await tasks_in(rail) == 1


async def test_wait_cancel_requeue_and_replay(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        tid = await rail.submit("review", "wait for me")
        pending = await rail.wait(tid, timeout=0.2)
        assert (pending.finished, pending.outcome) == (False, "pending")
        cancelled = await rail.cancel(tid)
        assert (cancelled.task_id, cancelled.dead_letter_reason) == (tid, "cancelled")
        done = await rail.wait(tid, timedelta(seconds=5))
        assert (done.finished, done.outcome) == (True, "cancelled")
        requeued = await rail.requeue(tid)
        assert requeued.stage == "draft"
        await rail.cancel(tid)
        dry = await rail.requeue_dead_letters("review", dry_run=True, since=3600)
        assert (dry.requeued, dry.dry_run, await tasks_in(rail)) == (1, True, 1)
        assert (await rail.task(tid)).dead_letter_reason == "cancelled"
        replay = await rail.requeue_dead_letters("review", reason="cancelled")
        assert replay.requeued == 1
        assert (await rail.task(tid)).dead_letter_reason is None
        with pytest.raises(ValidationFailed, match="since must be zero or more seconds"):
            await rail.requeue_dead_letters("review", since=-1)
        with pytest.raises(ValidationFailed, match="timeout must be zero or more seconds"):
            await rail.wait(tid, timeout=-1)
        with pytest.raises(ValidationFailed, match="reason must be a non-empty string"):
            await rail.cancel(tid, reason="")
        with pytest.raises(ValidationFailed, match="task_id must be a non-empty string"):
            await rail.task("")


async def test_delay_run_at_and_dedupe_key_reach_the_rail(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        later = await rail.submit("review", "later", delay=timedelta(minutes=10))
        when = datetime.now(UTC) + timedelta(hours=1)
        at = await rail.submit("review", "at", run_at=when)
        assert (await rail.task(at)).run_at_ms == round(when.timestamp() * 1000)
        assert (await rail.task(later)).run_at_ms is not None
        first = await rail.submit("review", "once", dedupe_key="nightly")
        assert await rail.submit("review", "again", dedupe_key="nightly") == first
        assert await tasks_in(rail) == 3


async def test_wait_answers_done_while_a_worker_finishes_the_task(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        tid = await rail.submit("review", "finish me")

        async def work() -> None:
            for role, trigger in (("writer", "submit"), ("reviewer", "approve")):
                lease = await rail.tracker.claim("agent-1", role, 60_000)
                assert lease is not None and lease.task.id == tid
                await rail.tracker.transition(lease, trigger)

        async with anyio.create_task_group() as tg:
            tg.start_soon(work)
            result = await rail.wait(tid, timeout=30)
        assert (result.finished, result.outcome, result.task.stage) == (True, "done", "done")


async def test_a_delayed_task_is_not_claimable_before_its_time(target: Target) -> None:
    async with connect(target.url, token=target.token) as rail:
        await rail.submit("review", "later", delay=600)
        assert await rail.tracker.claim("agent-1", "writer", 60_000) is None
        due = await rail.submit("review", "due", run_at=datetime.now(UTC) - timedelta(hours=1))
        lease = await rail.tracker.claim("agent-1", "writer", 60_000)
        assert lease is not None and lease.task.id == due  # a run_at in the past is due now
