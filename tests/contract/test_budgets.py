"""Budgets for agent loops (docs/operate/budgets.md) on every rail: a loop, the runs and the
reported cost are capped; a task past one is dead-lettered ``budget_exceeded`` with the figures;
every bad budget is refused naming what is wrong."""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.contract.support import claim, make_pipeline, new_task
from tracker_client.contract.batch_models import FinishItem
from tracker_client.errors import ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = pytest.mark.anyio


def loop_pipeline(budgets: dict[str, Any] | None = None) -> dict[str, Any]:
    """work (coder) -> review (reviewer) -> done; review may reject back to work."""
    definition: dict[str, Any] = {
        "initial": "work",
        "states": {
            "work": {"agent_role": "coder"},
            "review": {"agent_role": "reviewer"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "work", "to": "review", "trigger": "submit"},
            {"from": "review", "to": "work", "trigger": "reject"},
            {"from": "review", "to": "done", "trigger": "approve"},
        ],
    }
    if budgets is not None:
        definition["budgets"] = budgets
    return definition


async def _round(tracker: Tracker) -> str:
    """One submit and one reject; the reject's answer's new stage."""
    lease = await claim(tracker, "coder")
    await tracker.transition(lease, "submit")
    lease = await claim(tracker, "reviewer")
    return (await tracker.transition(lease, "reject")).new_stage


async def test_a_rejecting_loop_stops_at_the_pipelines_loop_budget(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline({"max_loops": 2}))
    tid = await tracker.create_task(new_task(pid))
    for _ in range(2):
        assert await _round(tracker) == "work"
    lease = await claim(tracker, "coder")
    await tracker.transition(lease, "submit")
    lease = await claim(tracker, "reviewer")

    moved = await tracker.transition(lease, "reject")

    assert (moved.previous_stage, moved.new_stage) == ("review", "review")  # not moved
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_reason) == ("review", "budget_exceeded")
    assert task.budget is not None
    assert task.budget.exceeded == "loops 2 of 2 in stage work"
    assert task.budget.loops == {"work": 2, "review": 2}
    assert task.budget.runs == 6
    events = await tracker.list_events(lease.run.id)
    dead = next(e for e in events.items if e.kind == "dead_letter")
    assert dead.data["budget"] == "loops"
    assert (dead.data["limit"], dead.data["spent"], dead.data["stage"]) == (2, 2, "work")
    assert await tracker.claim("a", "coder", 60_000) is None


async def test_the_default_loop_cap_is_ten_and_null_lifts_it(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    capped = await tracker.create_task(new_task(pid))
    for _ in range(10):
        assert await _round(tracker) == "work"
    lease = await claim(tracker, "coder")
    await tracker.transition(lease, "submit")
    lease = await claim(tracker, "reviewer")
    assert (await tracker.transition(lease, "reject")).new_stage == "review"
    assert (await tracker.get_task(capped)).budget.exceeded == "loops 10 of 10 in stage work"  # type: ignore[union-attr]

    free = await tracker.create_task(new_task(pid, budgets={"max_loops": None}))
    for _ in range(12):
        assert await _round(tracker) == "work"
    assert (await tracker.get_task(free)).dead_letter_reason is None


async def test_a_tasks_own_budget_overrides_the_pipelines(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline({"max_loops": 5}))
    tid = await tracker.create_task(new_task(pid, budgets={"max_loops": 0}))
    lease = await claim(tracker, "coder")
    await tracker.transition(lease, "submit")
    lease = await claim(tracker, "reviewer")
    assert (await tracker.transition(lease, "reject")).new_stage == "review"
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "budget_exceeded"
    assert task.budgets == {"max_loops": 0}
    assert task.budget is not None and task.budget.max_loops == 0
    assert task.budget.exceeded == "loops 0 of 0 in stage work"


async def test_runs_are_capped_across_stages_and_retries(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    policy = RetryPolicy(max_attempts=10, retry_delay_ms=0)
    tid = await tracker.create_task(new_task(pid, budgets={"max_runs": 3}, retry_policy=policy))
    await tracker.fail(await claim(tracker, "coder"), "flaky")
    await tracker.transition(await claim(tracker, "coder"), "submit")
    lease = await claim(tracker, "reviewer")

    failed = await tracker.fail(lease, "flaky again")

    assert (failed.dead_lettered, failed.dead_letter_reason) == (True, "budget_exceeded")
    task = await tracker.get_task(tid)
    assert task.budget is not None and task.budget.exceeded == "runs 3 of 3"


async def test_reported_cost_is_summed_and_capped(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline({"max_cost": 0.5, "max_loops": None}))
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker, "coder")
    await tracker.transition(lease, "submit", usage={"cost": {"usd": 0.3, "tokens": 1200}})
    waiting = (await tracker.queue_stats()).for_role("reviewer")
    assert waiting is not None and (waiting.spent_usd, waiting.spent_tokens) == (0.3, 1200)
    lease = await claim(tracker, "reviewer")

    moved = await tracker.transition(lease, "reject", usage={"cost": {"usd": 0.22}})

    assert moved.new_stage == "review"
    stopped = (await tracker.queue_stats()).for_role("reviewer")
    assert stopped is not None and stopped.budget_stopped_count == 1
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "budget_exceeded" and task.budget is not None
    assert task.budget.exceeded == "cost 0.52 of 0.50 USD"
    assert (task.budget.spent_usd, task.budget.spent_tokens) == (0.52, 1200)


async def test_a_finishing_run_is_kept_even_over_the_cost_budget(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    tid = await tracker.create_task(new_task(pid, budgets={"max_tokens": 100}))
    await tracker.transition(await claim(tracker, "coder"), "submit")
    lease = await claim(tracker, "reviewer")
    moved = await tracker.transition(lease, "approve", usage={"cost": {"tokens": 500}})
    assert moved.new_stage == "done"
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason is None
    assert task.budget is not None and task.budget.spent_tokens == 500


async def test_a_requeue_starts_the_count_afresh(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline({"max_loops": 0}))
    tid = await tracker.create_task(new_task(pid))
    assert await _round(tracker) == "review"  # stopped at once
    await tracker.requeue(tid)
    task = await tracker.get_task(tid)
    assert task.budget is not None and (task.budget.exceeded, task.budget.loops) == (None, {})
    lease = await claim(tracker, "reviewer")
    assert (await tracker.transition(lease, "reject")).new_stage == "work"


@pytest.mark.parametrize(
    ("budgets", "words"),
    [
        ({"max_loops": -1}, "budgets.max_loops must be a whole number >= 0"),
        ({"max_runs": 0}, "budgets.max_runs must be a whole number >= 1"),
        ({"max_cost": "cheap"}, "budgets.max_cost must be a number >= 0 (USD) or null"),
        ({"max_cost": -0.5}, "budgets.max_cost must be a number >= 0"),
        ({"max_tokens": 1.5}, "budgets.max_tokens must be a whole number >= 0"),
        ({"max_loops": True}, "budgets.max_loops must be a whole number >= 0"),
        ({"max_loop": 3}, "unknown budget 'max_loop' (did you mean 'max_loops'?)"),
        ([3], "budgets must be an object of budgets"),
    ],
)
async def test_a_bad_task_budget_is_refused_naming_it(
    tracker: Tracker, budgets: Any, words: str
) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    with pytest.raises(ValidationFailed) as err:
        await tracker.create_task(new_task(pid, budgets=budgets))
    assert words in str(err.value)
    assert (await tracker.list_tasks(pipeline_id=pid)).items == []


@pytest.mark.parametrize(
    ("budgets", "words"),
    [
        ({"max_loops": -2}, "'budgets'.max_loops must be a whole number >= 0"),
        ({"max_cost": "1 USD"}, "'budgets'.max_cost must be a number >= 0 (USD)"),
        ({"max_spend": 1}, "unknown budget 'max_spend'"),
        ("lots", "'budgets' must be an object of budgets"),
    ],
)
async def test_a_bad_pipeline_budget_is_refused_naming_it(
    tracker: Tracker, budgets: Any, words: str
) -> None:
    with pytest.raises(ValidationFailed) as err:
        await make_pipeline(tracker, loop_pipeline(budgets))
    assert words in str(err.value)


@pytest.mark.parametrize(
    ("cost", "words"),
    [
        ({"usd": -1}, "usage.cost.usd must be a number >= 0"),
        ({"tokens": "many"}, "usage.cost.tokens must be a whole number >= 0"),
        ({"euros": 2}, "usage.cost: unknown key 'euros'"),
        (7, "usage.cost must be an object"),
    ],
)
async def test_a_bad_reported_cost_is_refused_and_nothing_moves(
    tracker: Tracker, cost: Any, words: str
) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    tid = await tracker.create_task(new_task(pid))
    lease = await claim(tracker, "coder")
    with pytest.raises(ValidationFailed) as err:
        await tracker.transition(lease, "submit", usage={"cost": cost})
    assert words in str(err.value)
    assert (await tracker.get_task(tid)).stage == "work"


def straight_pipeline(budgets: dict[str, Any] | None = None) -> dict[str, Any]:
    """write (coder) -> check (checker) -> done: no loop (the PostgreSQL rail's one-trip
    transition takes such moves, so a budget must hold there too)."""
    definition: dict[str, Any] = {
        "initial": "write",
        "states": {
            "write": {"agent_role": "coder"},
            "check": {"agent_role": "checker"},
            "done": {"terminal": True},
        },
        "transitions": [
            {"from": "write", "to": "check", "trigger": "submit"},
            {"from": "check", "to": "done", "trigger": "approve"},
        ],
    }
    if budgets is not None:
        definition["budgets"] = budgets
    return definition


@pytest.mark.parametrize("own", [True, False], ids=["task", "pipeline"])
async def test_runs_and_cost_hold_on_a_straight_pipeline(tracker: Tracker, own: bool) -> None:
    budgets = {"max_runs": 1}
    pid = await make_pipeline(tracker, straight_pipeline(None if own else budgets))
    tid = await tracker.create_task(new_task(pid, budgets=budgets if own else None))
    moved = await tracker.transition(await claim(tracker, "coder"), "submit")
    assert moved.new_stage == "write"
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "budget_exceeded"
    assert task.budget is not None and task.budget.exceeded == "runs 1 of 1"

    pid = await make_pipeline(tracker, straight_pipeline())
    tid = await tracker.create_task(new_task(pid, budgets={"max_tokens": 10}))
    lease = await claim(tracker, "coder")
    moved = await tracker.transition(lease, "submit", usage={"cost": {"tokens": 11}})
    assert moved.new_stage == "write"
    assert (await tracker.get_task(tid)).dead_letter_reason == "budget_exceeded"


@pytest.mark.requires("finish_many")
async def test_a_batched_report_is_held_to_the_budgets_too(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, straight_pipeline())
    capped = await tracker.create_task(new_task(pid, budgets={"max_runs": 1}))
    free = await tracker.create_task(new_task(pid))
    leases = {lease.task.id: lease for lease in [await claim(tracker), await claim(tracker)]}
    items = [
        FinishItem(lease=leases[capped], transition={"trigger": "submit"}),
        FinishItem(lease=leases[free], transition={"trigger": "submit"}),
    ]
    outcomes = await cast(Any, tracker).finish_many(items)
    assert [o.transition.new_stage for o in outcomes] == ["write", "check"]
    assert (await tracker.get_task(capped)).dead_letter_reason == "budget_exceeded"
    assert (await tracker.get_task(free)).stage == "check"


async def test_a_move_refused_for_runs_is_not_counted_as_a_loop(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker, loop_pipeline())
    tid = await tracker.create_task(new_task(pid, budgets={"max_runs": 2}))
    assert await _round(tracker) == "review"  # the reject is the second run: refused
    task = await tracker.get_task(tid)
    assert task.budget is not None and task.budget.exceeded == "runs 2 of 2"
    assert task.budget.loops.get("work", 0) == 0  # it never went back
