"""PipelineBook is single-flight: runs starting together share one ``get_pipeline``.

A counting wrapper over a real embedded tracker (a real SQLite file) holds each request at a
gate until every caller is blocked, so a book that let each caller ask would be seen asking ten
times. An error answers every waiter and is not cached; a cancelled fetch hands over.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.lowlevel import checkpoint

from tracker_client.embedded.tracker import EmbeddedTracker
from tracker_client.errors import NotFound
from tracker_client.models import Pipeline
from worker.retry import RetryPolicy
from worker.triggers import PipelineBook, PipelineWays

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

POLICY = RetryPolicy(initial_s=0.01, max_s=0.05)
DEFINITION = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "r"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}


class Counting:
    """The real tracker's ``get_pipeline``, counted, each request held until ``gate`` is set."""

    def __init__(self, tracker: EmbeddedTracker) -> None:
        self.tracker = tracker
        self.requests = 0
        self.gate = anyio.Event()

    async def get_pipeline(self, pipeline_id: str) -> Pipeline:
        self.requests += 1
        await self.gate.wait()
        return await self.tracker.get_pipeline(pipeline_id)


@pytest.fixture
async def rail(tmp_path: Path) -> AsyncIterator[EmbeddedTracker]:
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        yield tracker
    finally:
        await tracker.aclose()


async def _lookups(book: PipelineBook, tracker: Counting, pid: str, n: int) -> list[object]:
    """``n`` concurrent lookups, released once all are blocked; each one's answer or error."""
    answers: list[object] = [None] * n

    async def one(i: int) -> None:
        try:
            answers[i] = await book.get(tracker, pid, policy=POLICY, budget_s=5)  # type: ignore[arg-type]
        except NotFound as exc:
            answers[i] = exc

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
        await anyio.wait_all_tasks_blocked()
        tracker.gate.set()
    return answers


async def test_ten_concurrent_lookups_send_one_request(rail: EmbeddedTracker) -> None:
    pid = await rail.create_pipeline("p", DEFINITION)
    tracker, book = Counting(rail), PipelineBook()
    answers = await _lookups(book, tracker, pid, 10)
    assert tracker.requests == 1
    assert all(isinstance(a, PipelineWays) and a is answers[0] for a in answers)
    assert answers[0] == PipelineWays(pid, "p", {"todo": ("complete",)})
    # Cached afterwards: no request at all.
    assert await book.get(tracker, pid, policy=POLICY, budget_s=5) is answers[0]  # type: ignore[arg-type]
    assert tracker.requests == 1


async def test_an_error_answers_every_waiter_and_is_not_cached(rail: EmbeddedTracker) -> None:
    tracker, book = Counting(rail), PipelineBook()
    answers = await _lookups(book, tracker, "no-such-pipeline", 10)
    assert tracker.requests == 1
    assert all(isinstance(a, NotFound) for a in answers), answers
    assert book.cached("no-such-pipeline") is None
    with pytest.raises(NotFound):
        await book.get(tracker, "no-such-pipeline", policy=POLICY, budget_s=5)  # type: ignore[arg-type]
    assert tracker.requests == 2  # asked again: the error was not kept


async def test_a_cancelled_fetch_hands_the_question_to_a_waiter(rail: EmbeddedTracker) -> None:
    pid = await rail.create_pipeline("p", DEFINITION)
    tracker, book = Counting(rail), PipelineBook()
    got: list[PipelineWays] = []

    async def waiter() -> None:
        got.append(await book.get(tracker, pid, policy=POLICY, budget_s=5))  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as first:
            async with anyio.create_task_group() as inner:
                inner.start_soon(waiter)  # the first caller: its fetch is cancelled below
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(waiter)
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                assert tracker.requests == 1
                first.cancel()
        await checkpoint()
        await anyio.wait_all_tasks_blocked()
        assert tracker.requests == 2  # one waiter asked again, the other waits for it
        tracker.gate.set()
    assert len(got) == 2 and got[0] is got[1]
    assert tracker.requests == 2
