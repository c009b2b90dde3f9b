"""Bounded retries by default: a task without a retry policy gets 5 attempts with a growing,
jittered delay from 1 s (capped at 5 min), overridable per rail and per pipeline; unlimited only
when asked for. (Before: unlimited attempts, no delay: a failing executor ran 2,048 times in 4 s.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.support import (
    CLOCK,
    EXTENSIONS,
    OPTIONS,
    FakeClock,
    OpenTracker,
    claim,
    make_pipeline,
    new_task,
    simple_pipeline,
)
from tracker_client.errors import ConfigError, ValidationFailed
from tracker_client.models import RetryPolicy
from tracker_client.protocol import Tracker

pytestmark = [pytest.mark.anyio, pytest.mark.requires(CLOCK, EXTENSIONS)]


async def _fail_until_dead(tracker: Tracker, clock: FakeClock, tid: str) -> list[int]:
    """Fail every run of ``tid`` as soon as it is claimable; the retry delays until it dead-letters.

    Gives up (assertion) after 50 failures: the policy was not bounded.
    """
    delays: list[int] = []
    for _ in range(50):
        lease = await claim(tracker)
        assert lease.task.id == tid
        result = await tracker.fail(lease, f"failure {len(delays) + 1}")
        if result.dead_lettered:
            return delays
        assert result.next_eligible_at_ms is not None
        delay = result.next_eligible_at_ms - clock()
        delays.append(delay)
        if delay > 0:
            assert await tracker.claim("early", "coder", 60_000) is None  # not before its delay
        clock.advance(delay)
    raise AssertionError(f"still retrying after 50 failures: delays {delays}")


async def test_no_policy_means_five_attempts_with_growing_delays(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid))
    task = await tracker.get_task(tid)
    assert (task.max_attempts, task.retry_delay_ms) == (5, 1_000)

    delays = await _fail_until_dead(tracker, clock, tid)

    assert len(delays) == 4  # 5 failures: 4 retries, then the dead letter
    # exponential from 1 s, jittered within [d/2, d]: each delay at least the last one's floor
    for n, delay in enumerate(delays):
        assert 500 * 2**n <= delay <= 1_000 * 2**n, (n, delays)
    assert delays[-1] > delays[0]
    task = await tracker.get_task(tid)
    assert task.dead_letter_reason == "max_attempts_exceeded"


async def test_the_default_delay_is_capped(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker, simple_pipeline(retry={"max_attempts": 14}))
    tid = await tracker.create_task(new_task(pid))
    delays = await _fail_until_dead(tracker, clock, tid)
    assert len(delays) == 13
    assert max(delays) <= 300_000
    assert delays[-1] >= 150_000  # 2**12 s, capped at 5 min, jittered within [cap/2, cap]


async def test_a_given_policy_without_max_attempts_is_still_bounded(
    tracker: Tracker, clock: FakeClock
) -> None:
    # A delay given is read as NullTickets reads it (constant, the omitted fields 0/none) ...
    pid = await make_pipeline(tracker)
    tid = await tracker.create_task(new_task(pid, retry_policy=RetryPolicy(retry_delay_ms=70)))
    delays = await _fail_until_dead(tracker, clock, tid)
    # ... but an omitted max_attempts is the default's 5, not unlimited
    assert delays == [70, 70, 70, 70]


async def test_a_policy_without_a_delay_keeps_the_default_backoff(
    tracker: Tracker, clock: FakeClock
) -> None:
    pid = await make_pipeline(tracker)
    policy = RetryPolicy(max_attempts=3, dead_letter_stage="failed")
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    delays = await _fail_until_dead(tracker, clock, tid)
    assert len(delays) == 2
    assert 500 <= delays[0] <= 1_000
    assert 1_000 <= delays[1] <= 2_000
    assert (await tracker.get_task(tid)).stage == "failed"


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param({"max_attempts": 2, "retry_delay_ms": 250, "backoff": "constant"}, id="all"),
        pytest.param({"max_attempts": 2, "retry_delay_ms": 250, "backoff": "CONSTANT"}, id="case"),
    ],
)
async def test_pipeline_retry_overrides_the_default(
    tracker: Tracker, clock: FakeClock, retry: dict[str, Any]
) -> None:
    pid = await make_pipeline(tracker, simple_pipeline(retry=retry))
    tid = await tracker.create_task(new_task(pid))
    assert await _fail_until_dead(tracker, clock, tid) == [250]
    assert (await tracker.get_task(tid)).dead_letter_reason == "max_attempts_exceeded"


async def test_pipeline_retry_dead_letter_stage(tracker: Tracker, clock: FakeClock) -> None:
    definition = simple_pipeline(retry={"max_attempts": 1, "dead_letter_stage": "failed"})
    pid = await make_pipeline(tracker, definition)
    tid = await tracker.create_task(new_task(pid))
    assert await _fail_until_dead(tracker, clock, tid) == []
    task = await tracker.get_task(tid)
    assert (task.stage, task.dead_letter_stage) == ("failed", "failed")


async def test_a_task_policy_beats_the_pipeline(tracker: Tracker, clock: FakeClock) -> None:
    pid = await make_pipeline(tracker, simple_pipeline(retry={"max_attempts": 1}))
    policy = RetryPolicy(max_attempts=3, retry_delay_ms=10)
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    assert await _fail_until_dead(tracker, clock, tid) == [10, 10]


@pytest.mark.requires(OPTIONS)
async def test_rail_options_override_the_default(
    open_tracker: OpenTracker, clock: FakeClock
) -> None:
    tracker = await open_tracker(
        retry_max_attempts="3",
        retry_delay_ms="2000",
        retry_backoff="exponential",
        retry_max_delay_ms="3000",
    )
    pid = await make_pipeline(tracker)
    # the pipeline overrides only what it names: max_attempts from the rail
    other = await make_pipeline(tracker, simple_pipeline(retry={"retry_delay_ms": 100}))
    tid = await tracker.create_task(new_task(pid))
    delays = await _fail_until_dead(tracker, clock, tid)
    assert len(delays) == 2
    assert 1_000 <= delays[0] <= 2_000
    assert 1_500 <= delays[1] <= 3_000  # 4 s capped at 3 s
    tid = await tracker.create_task(new_task(other))
    assert len(await _fail_until_dead(tracker, clock, tid)) == 2


@pytest.mark.parametrize("how", ["task", "pipeline", "pipeline-null", "rail"])
async def test_unlimited_only_when_asked_for(
    open_tracker: OpenTracker, clock: FakeClock, tracker_impl: Any, how: str
) -> None:
    if how == "rail" and OPTIONS not in tracker_impl.capabilities:
        pytest.skip("rail options need the OPTIONS capability")
    tracker = await open_tracker(**({"retry_max_attempts": "unlimited"} if how == "rail" else {}))
    retry: Any = {"pipeline": "unlimited", "pipeline-null": {"max_attempts": None}}.get(how)
    pid = await make_pipeline(tracker, simple_pipeline(**({"retry": retry} if retry else {})))
    policy = RetryPolicy(max_attempts=None) if how == "task" else None
    tid = await tracker.create_task(new_task(pid, retry_policy=policy))
    assert (await tracker.get_task(tid)).max_attempts is None
    for attempt in range(1, 12):
        lease = await claim(tracker)
        assert lease.run.attempt == attempt
        result = await tracker.fail(lease, "again")
        assert result.retry_scheduled is True
        assert result.next_eligible_at_ms is not None
        clock.advance(max(0, result.next_eligible_at_ms - clock()))


@pytest.mark.parametrize(
    ("retry", "words"),
    [
        ({"max_atempts": 3}, ["retry", "max_atempts", "unknown"]),
        ({"max_attempts": -1}, ["retry", "max_attempts"]),
        ({"max_attempts": "lots"}, ["retry", "max_attempts"]),
        ({"retry_delay_ms": None}, ["retry", "retry_delay_ms"]),
        ({"backoff": "linear"}, ["retry", "backoff"]),
        ({"dead_letter_stage": "nowhere"}, ["retry", "dead_letter_stage", "nowhere"]),
        ("forever", ["retry", "unlimited"]),
    ],
)
async def test_a_bad_pipeline_retry_is_refused(
    tracker: Tracker, retry: Any, words: list[str]
) -> None:
    with pytest.raises(ValidationFailed) as err:
        await make_pipeline(tracker, simple_pipeline(retry=retry))
    for word in words:
        assert word in str(err.value)
    assert await tracker.list_pipelines() == []


@pytest.mark.requires(OPTIONS)
@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("retry_max_attempts", "-2"),
        ("retry_max_attempts", "many"),
        ("retry_delay_ms", "soon"),
        ("retry_backoff", "linear"),
    ],
)
async def test_a_bad_rail_retry_option_is_named(
    open_tracker: OpenTracker, option: str, value: str
) -> None:
    with pytest.raises(ConfigError, match=option):
        await open_tracker(**{option: value})
