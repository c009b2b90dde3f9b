"""Rate limits (extension ``rate_limits``): a role's fleet-wide claim rate and cap of leased
tasks, stored in the rail, on every tracker of the suite; and, on real files, two OS processes
claiming as fast as they can hold the rate within 10 %, three never hold more than the cap.

A limited role's claim answers no work; other roles are not held back. Bad input is refused
naming the field, with nothing written.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.contract.support import CLOCK, FakeClock, claim, make_pipeline, new_task, simple_pipeline
from tests.startline import reap
from tracker_client.errors import NotFound, ValidationFailed
from tracker_client.factory import open_tracker
from tracker_client.protocol import Tracker
from tracker_client.schedule_models import RateLimit

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]


async def _limits(tracker: Tracker) -> list[RateLimit]:
    limits: list[RateLimit] = await tracker.call("list_rate_limits")
    return limits


@pytest.mark.requires(CLOCK)
async def test_rate_limits_the_role_only_until_its_next_token(
    tracker: Tracker, clock: FakeClock
) -> None:
    coder = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(coder, f"t{n}") for n in range(6)])
    other = await make_pipeline(tracker, simple_pipeline("tester"))
    await tracker.create_tasks([new_task(other, f"o{n}") for n in range(3)])
    set_: RateLimit = await tracker.call("set_rate_limit", "coder", rate="2/s")
    assert (set_.rate, set_.rate_count, set_.period_ms, set_.tokens) == ("2/s", 2, 1000, 2.0)
    await claim(tracker)
    await claim(tracker)  # the burst: a full bucket of 2
    assert await tracker.claim("agent-1", "coder", 60_000) is None  # limited
    for _ in range(3):  # another role is not held back
        await claim(tracker, "tester")
    (shown,) = await _limits(tracker)
    assert shown.tokens == 0.0 and shown.running == 2
    assert shown.next_token_at_ms == clock.now_ms + 500
    clock.advance(499)
    assert await tracker.claim("agent-1", "coder", 60_000) is None
    clock.advance(1)
    await claim(tracker)
    assert await tracker.claim("agent-1", "coder", 60_000) is None
    cleared: RateLimit = await tracker.call("clear_rate_limit", "coder")
    assert cleared.role == "coder"
    assert await _limits(tracker) == []
    await claim(tracker)  # unlimited again
    with pytest.raises(NotFound, match="coder"):
        await tracker.call("clear_rate_limit", "coder")


async def test_max_running_caps_leased_tasks_of_the_role(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{n}") for n in range(5)])
    limit: RateLimit = await tracker.call("set_rate_limit", "coder", max_running=2)
    assert (limit.rate, limit.max_running) == (None, 2)
    first = await claim(tracker, agent="a")
    await claim(tracker, agent="b")
    assert await tracker.claim("c", "coder", 60_000) is None  # a third claimer waits
    await tracker.transition(first, "complete")
    await claim(tracker, agent="c")  # a slot freed
    assert (await _limits(tracker))[0].running == 2


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"rate": "0/s"}, "rate"),
        ({"rate": "-5/s"}, "rate"),
        ({"rate": "five a second"}, "rate"),
        ({"rate": "5/fortnight"}, "rate"),
        ({"max_running": 0}, "max_running"),
        ({"max_running": -1}, "max_running"),
        ({}, "rate"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    tracker: Tracker, fields: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationFailed, match=says):
        await tracker.call("set_rate_limit", "coder", **fields)
    assert await _limits(tracker) == []


async def test_resetting_the_same_rate_keeps_its_bucket(tracker: Tracker) -> None:
    pid = await make_pipeline(tracker)
    await tracker.create_tasks([new_task(pid, f"t{n}") for n in range(3)])
    await tracker.call("set_rate_limit", "coder", rate="1/h")
    await claim(tracker)
    again: RateLimit = await tracker.call("set_rate_limit", "coder", rate="1/h", max_running=5)
    assert again.tokens is not None and again.tokens < 1 and again.max_running == 5
    assert await tracker.claim("agent-1", "coder", 60_000) is None


# -- real processes on one rail file ------------------------------------------------------------
_CHILD = """
import json, sys, time, anyio
from tracker_client.factory import open_tracker

async def main(db, agent, hold):
    tracker = await open_tracker(f"sqlite:///{db}")
    print("ready", flush=True)
    end = float(sys.stdin.readline())
    spans = []
    while time.time() < end:
        lease = await tracker.claim(agent, "coder", 60_000)
        if lease is None:
            continue
        got = time.time()
        if hold:
            await anyio.sleep(hold)
            spans.append((got, time.time()))
            await tracker.transition(lease, "complete")
        else:
            spans.append((got, got))
    await tracker.aclose()
    print(json.dumps(spans), flush=True)

anyio.run(main, sys.argv[1], sys.argv[2], float(sys.argv[3]))
"""


def _communicate(proc: subprocess.Popen[str]) -> tuple[str, str]:
    return proc.communicate(timeout=30)


async def _race(db: Path, claimers: int, seconds: float, hold: float) -> tuple[float, list[Any]]:
    """Run ``claimers`` processes claiming ``coder`` tasks until ``seconds`` from now; returns
    the start time and every process's (claimed, released) spans."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(db), f"proc-{n}", str(hold)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(claimers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert (await anyio.to_thread.run_sync(proc.stdout.readline)).strip() == "ready"
        start = time.time()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start + seconds}\n")
            proc.stdin.flush()
        spans: list[Any] = []
        for proc in procs:
            out, _ = await anyio.to_thread.run_sync(_communicate, proc)
            assert proc.returncode == 0
            spans.extend(json.loads(out.strip().splitlines()[-1]))
        return start, spans
    finally:
        reap(procs)


async def _rail(tmp_path: Path, tasks: int, **limit: Any) -> Path:
    db = tmp_path / "rail.db"
    tracker = await open_tracker(f"sqlite:///{db}")
    try:
        pid = await make_pipeline(tracker)
        await tracker.create_tasks([new_task(pid, f"t{n}") for n in range(tasks)])
        await tracker.call("set_rate_limit", "coder", **limit)
    finally:
        await tracker.aclose()
    return db


@pytest.mark.slow
async def test_a_rate_holds_across_two_processes(tmp_path: Path) -> None:
    db = await _rail(tmp_path, 200, rate="5/s")
    seconds = 3.0
    _start, spans = await _race(db, 2, seconds, 0.0)
    expected = 5 + 5 * seconds  # the burst of a full bucket, then 5 a second
    assert abs(len(spans) - expected) <= 0.1 * expected, (len(spans), expected)


@pytest.mark.slow
async def test_a_cap_holds_across_three_processes(tmp_path: Path) -> None:
    db = await _rail(tmp_path, 200, max_running=2)
    _start, spans = await _race(db, 3, 2.0, 0.05)
    assert len(spans) >= 10
    edges = sorted([(got, 1) for got, _ in spans] + [(done, -1) for _, done in spans])
    held = peak = 0
    for _at, step in edges:  # a release at the same instant as a claim counts first
        held += step
        peak = max(peak, held)
    assert peak <= 2
