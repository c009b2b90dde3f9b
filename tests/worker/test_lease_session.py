"""LeaseSession: one claimed lease's calls, on the real embedded tracker.

Every call goes out with ``lease.ref`` (not the claimed Lease), a write carries one key across
its retries (none where the tracker cannot lose an answer), and a lease found gone cancels the
work watching its clock.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tracker_client.capabilities import LeaseHandle
from tracker_client.errors import TrackerUnavailable
from tracker_client.models import ArtifactCreate, Lease
from tracker_client.protocol import Tracker
from worker.lease import LeaseSession
from worker.retry import TrackerCalls

from .runkit import FAST_RETRY, claim_one

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class Recorder:
    """The real tracker, recording each lease call's first argument and key; the first call of
    each name in ``outage`` fails as if its answer were lost."""

    def __init__(self, inner: Tracker, outage: set[str] | None = None) -> None:
        self._inner = inner
        self._outage = set(outage or ())
        self.calls: list[tuple[str, Any, str | None]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[0] if args else None, kwargs.get("idempotency_key")))
            if name in self._outage:
                self._outage.discard(name)
                raise TrackerUnavailable(f"{name}: injected lost answer")
            return await attr(*args, **kwargs)

        return recorded


def session(tracker: Any, lease: Lease, *, keys: bool = True) -> LeaseSession:
    return LeaseSession(tracker, lease, calls=TrackerCalls(FAST_RETRY, keys=keys), ttl_s=3.0)


async def test_calls_send_the_lease_ref_and_one_key_per_write_across_retries(
    tracker: Tracker,
) -> None:
    lease = await claim_one(tracker)
    rec = Recorder(tracker, outage={"add_event", "transition"})
    s = session(rec, lease)
    assert await s.heartbeat()
    await s.add_event("progress", {"n": 1})
    await s.add_event("progress", {"n": 2})
    await s.add_artifact(
        ArtifactCreate(task_id=lease.task.id, run_id=lease.run.id, kind="log", uri="x://1")
    )
    result = await s.transition(
        "complete",
        expected_stage=lease.task.stage,
        expected_task_version=lease.task.task_version,
        instructions=None,
        usage=None,
        budget_s=5.0,
    )
    assert result.new_stage == "done"
    lease_calls = [c for c in rec.calls if c[0] != "add_artifact"]
    assert all(isinstance(arg, LeaseHandle) for _, arg, _ in lease_calls)
    assert all(arg.lease_id == lease.lease_id for _, arg, _ in lease_calls)
    events = [key for name, _, key in rec.calls if name == "add_event"]
    assert len(events) == 3 and events[0] == events[1] != events[2]  # retried with its key
    transitions = [key for name, _, key in rec.calls if name == "transition"]
    assert len(transitions) == 2 and transitions[0] == transitions[1] is not None
    [heartbeat] = [key for name, _, key in rec.calls if name == "heartbeat"]
    assert heartbeat is None  # a heartbeat takes no key


async def test_no_keys_where_answers_cannot_be_lost(tracker: Tracker) -> None:
    lease = await claim_one(tracker)
    rec = Recorder(tracker, outage={"fail"})
    s = session(rec, lease, keys=False)
    await s.add_event("progress", {})
    await s.fail("boom", usage=None, retryable=True, budget_s=5.0)
    assert [key for _, _, key in rec.calls] == [None, None, None]


async def test_secrets_are_masked_and_oversized_data_becomes_a_marker(tracker: Tracker) -> None:
    lease = await claim_one(tracker)
    s = session(tracker, lease)
    token = lease.lease_token.get_secret_value()
    await s.add_event("leak", {"said": f"token {token}"})
    await s.add_event("huge", {"blob": "x" * 2_000_000})
    events = (await tracker.list_events(lease.run.id)).items
    leak = next(e for e in events if e.kind == "leak")
    assert token not in str(leak.data)
    huge = next(e for e in events if e.kind == "huge")
    assert huge.data["dropped"] is True


async def test_a_lease_found_gone_cancels_the_work_watching_its_clock(tracker: Tracker) -> None:
    lease = await claim_one(tracker)
    s = session(tracker, lease)
    await tracker.cancel(lease.task.id)  # the lease is revoked
    with s.clock.watch(anyio.CancelScope()) as scope:
        assert not await s.heartbeat()
        await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert s.lost is not None
    assert s.check_expired() is s.lost
