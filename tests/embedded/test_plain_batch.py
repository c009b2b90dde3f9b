"""``finish_many``'s batch of plain transitions (rules/finish_many.py ``plain_batch``): checked
whole, then written with no savepoint, it must write and answer exactly what the item-by-item
path writes and answers, keys and refusals included."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.defs import renamed, v1
from tracker_client.contract.batch_models import FinishItem, FinishResult
from tracker_client.embedded import EmbeddedTracker
from tracker_client.errors import Conflict, LeaseLost
from tracker_client.models import Lease, TaskCreate

pytestmark = pytest.mark.anyio

PIPE = {
    "initial": "todo",
    "states": {
        "todo": {"agent_role": "coder"},
        "review": {"agent_role": "reviewer"},
        "done": {"terminal": True},
    },
    "transitions": [
        {"from": "todo", "to": "review", "trigger": "complete", "instructions": "look"},
        {"from": "review", "to": "done", "trigger": "approve"},
    ],
}
NOW = 1_700_000_000_000


async def _rail(path: Path, n: int) -> tuple[EmbeddedTracker, list[Lease]]:
    tracker = await EmbeddedTracker.open(str(path), clock=lambda: NOW)
    pid = await tracker.create_pipeline("p", PIPE)
    for i in range(n):
        await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))
    leases = await tracker.claim_many("w", "coder", 60_000, n)
    assert len(leases) == n
    return tracker, leases


def _body(lease: Lease, i: int) -> dict[str, Any]:
    """A worker's report: expected stage and version, sometimes instructions and usage."""
    return {
        "trigger": "complete",
        "expected_stage": lease.task.stage,
        "expected_task_version": lease.task.task_version,
        "instructions": f"by {i}" if i % 2 else None,
        "usage": {"steps": i} if i % 3 == 0 else None,
    }


def _state(path: Path) -> list[list[tuple[Any, ...]]]:
    """The rows a transition writes, ids and tokens left out (they differ between rails)."""
    conn = sqlite3.connect(path)
    try:
        return [
            conn.execute(
                "SELECT title, stage, role, terminal, task_version, lease_expires_at_ms,"
                " lease_id IS NULL, lease_run_id IS NULL, lease_token_sha256 IS NULL,"
                " lease_ttl_ms, stale_streak, updated_at_ms, pipeline_version FROM tasks"
                " ORDER BY seq"
            ).fetchall(),
            conn.execute(
                "SELECT t.title, r.status, r.ended_at_ms, r.usage FROM runs r"
                " JOIN tasks t ON t.id = r.task_id ORDER BY t.seq"
            ).fetchall(),
            conn.execute(
                "SELECT e.id, t.title, e.kind, e.data, e.ts_ms FROM events e"
                " JOIN tasks t ON t.id = e.task_id ORDER BY e.id"
            ).fetchall(),
            conn.execute("SELECT count(*) FROM idempotency").fetchall(),
        ]
    finally:
        conn.close()


async def test_a_plain_batch_writes_and_answers_what_each_finish_would(tmp_path: Path) -> None:
    """The same reports, as one ``finish_many`` (the plain batch) on one rail and one
    ``finish`` each (the item path) on another: the same answers and the same rows."""
    answers: dict[str, list[Any]] = {}
    ran: list[str] = []
    for name in ("batch", "single"):
        tracker, leases = await _rail(tmp_path / f"{name}.db", 6)
        try:
            bodies = [_body(x, i) for i, x in enumerate(leases)]
            if name == "batch":
                tracker.engine.db.conn.set_trace_callback(ran.append)
                got: list[Any] = await tracker.finish_many(
                    [
                        FinishItem(lease=x, transition=b, idempotency_key=f"k{i}")
                        for i, (x, b) in enumerate(zip(leases, bodies, strict=True))
                    ]
                )
                tracker.engine.db.conn.set_trace_callback(None)
            else:
                got = [
                    await tracker.finish(x, transition=b, idempotency_key=f"k{i}")
                    for i, (x, b) in enumerate(zip(leases, bodies, strict=True))
                ]
            answers[name] = [o.model_dump() for o in got]
        finally:
            await tracker.aclose()
    assert not [s for s in ran if s.startswith("ROLLBACK")]  # the plain batch wrote it
    assert answers["batch"] == answers["single"]
    assert all(a["transition"]["new_stage"] == "review" for a in answers["batch"])
    assert _state(tmp_path / "batch.db") == _state(tmp_path / "single.db")


async def test_a_keyed_plain_batch_is_replayed_from_its_records(tmp_path: Path) -> None:
    """Sent again with the same keys, the batch answers the first answers and writes
    nothing; a key reused with another report is a conflict, as a single ``finish``'s is."""
    tracker, leases = await _rail(tmp_path / "rail.db", 3)
    try:
        items = [
            FinishItem(lease=x, transition=_body(x, i), idempotency_key=f"k{i}")
            for i, x in enumerate(leases)
        ]
        first = await tracker.finish_many(items)
        before = _state(tmp_path / "rail.db")
        again = await tracker.finish_many(items)
        other = await tracker.finish_many(
            [FinishItem(lease=leases[0], transition={"trigger": "approve"}, idempotency_key="k0")]
        )
    finally:
        await tracker.aclose()
    assert [o.model_dump() for o in again] == [o.model_dump() for o in first]  # type: ignore[union-attr]
    assert _state(tmp_path / "rail.db") == before
    assert isinstance(other[0], Conflict) and other[0].code == "idempotency_conflict"


async def test_one_key_or_one_run_twice_in_a_batch_is_answered_as_in_order(
    tmp_path: Path,
) -> None:
    """A batch naming one run twice: the second is ``LeaseLost`` (the first moved the task);
    one key on two runs: the second is a conflict, and its run is left running."""
    tracker, leases = await _rail(tmp_path / "rail.db", 3)
    try:
        done = {"trigger": "complete"}
        twice = await tracker.finish_many([FinishItem(lease=leases[0], transition=done)] * 2)
        keyed = await tracker.finish_many(
            [
                FinishItem(lease=leases[1], transition=done, idempotency_key="same"),
                FinishItem(lease=leases[2], transition=done, idempotency_key="same"),
            ]
        )
        third = await tracker.get_task(leases[2].task.id)
    finally:
        await tracker.aclose()
    assert isinstance(twice[0], FinishResult) and isinstance(twice[1], LeaseLost)
    assert isinstance(keyed[0], FinishResult)
    assert isinstance(keyed[1], Conflict) and keyed[1].code == "idempotency_conflict"
    assert third.stage == "todo"


async def test_a_batch_after_an_apply_lands_where_the_new_version_says(tmp_path: Path) -> None:
    """The same move (draft --submit-->) made before and after an apply that renames its
    target: worked out again for the new versions, not taken from the first batch's."""
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"))
    try:
        pid = (await tracker.apply_pipeline("review", v1())).pipeline_id
        assert pid is not None
        for i in range(3):
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))
        held = await tracker.claim_many("w", "writer", 60_000, 2)  # under version 1
        submit = {"trigger": "submit"}
        before = await tracker.finish_many([FinishItem(lease=held[0], transition=submit)])
        await tracker.apply_pipeline("review", renamed(), {"review": "check"})
        after = await tracker.finish_many([FinishItem(lease=held[1], transition=submit)])
        fresh = await tracker.claim_many("w", "writer", 60_000, 1)  # under version 2
        last = await tracker.finish_many([FinishItem(lease=fresh[0], transition=submit)])
        stages = [(await tracker.get_task(x.task.id)).stage for x in [*held, *fresh]]
    finally:
        await tracker.aclose()
    moved = [o[0].transition for o in (before, after, last)]  # type: ignore[union-attr]
    assert [m.new_stage for m in moved if m is not None] == ["review", "check", "check"]
    # the first moved before the apply, which brought it along (review -> check)
    assert stages == ["check", "check", "check"]


async def test_a_lease_changed_since_it_was_handed_out_is_read_and_answered(
    tmp_path: Path,
) -> None:
    """A plain batch checks its leases as this process handed them out, and each move checks
    the row is still so: a lease revoked (a cancel), lapsed, or re-keyed since (a replayed
    claim) rolls the batch's moves back and the item paths answer it from the row (the
    others still written)."""
    clock = [NOW]
    tracker = await EmbeddedTracker.open(str(tmp_path / "rail.db"), clock=lambda: clock[0])
    try:
        pid = await tracker.create_pipeline("p", PIPE)
        for i in range(6):
            await tracker.create_task(TaskCreate(pipeline_id=pid, title=f"t{i}"))
        leases = await tracker.claim_many("w", "coder", 60_000, 3)
        keyed = await tracker.claim_many("w", "coder", 1_000, 3, idempotency_key="k")
        await tracker.cancel(leases[1].task.id)
        replayed = await tracker.claim_many("w", "coder", 1_000, 3, idempotency_key="k")
        done = {"trigger": "complete"}
        revoked = await tracker.finish_many([FinishItem(x, transition=done) for x in leases])
        # a replayed keyed claim answers the same token: the first answer's still holds
        same = await tracker.finish_many([FinishItem(keyed[0], transition=done)])
        again = await tracker.finish_many([FinishItem(replayed[1], transition=done)])
        clock[0] += 2_000  # the last keyed lease (TTL 1 s) lapsed
        lapsed = await tracker.finish_many([FinishItem(keyed[2], transition=done)])
        stages = [(await tracker.get_task(x.task.id)).stage for x in [*leases, *keyed]]
    finally:
        await tracker.aclose()
    assert isinstance(revoked[0], FinishResult) and isinstance(revoked[2], FinishResult)
    assert isinstance(revoked[1], LeaseLost) and revoked[1].code == "revoked"
    assert isinstance(same[0], FinishResult) and isinstance(again[0], FinishResult)
    assert isinstance(lapsed[0], LeaseLost) and lapsed[0].code == "expired"
    assert stages[:2] == ["review", "todo"] and stages[2:5] == ["review"] * 3
    assert stages[5] == "todo"


#: Two more pipelines of role ``coder``: one whose ``complete`` ends the task, one whose two
#: stages are both the coder's (so one batch holds tasks of two stages under one trigger).
ENDS = {
    "initial": "todo",
    "states": {"todo": {"agent_role": "coder"}, "done": {"terminal": True}},
    "transitions": [{"from": "todo", "to": "done", "trigger": "complete"}],
}
TWICE = {
    "initial": "draft",
    "states": {
        "draft": {"agent_role": "coder"},
        "polish": {"agent_role": "coder"},
        "out": {"terminal": True},
    },
    "transitions": [
        {"from": "draft", "to": "polish", "trigger": "complete"},
        {"from": "polish", "to": "out", "trigger": "complete", "instructions": "ship"},
    ],
}


async def test_one_batch_of_moves_under_several_pipelines_and_stages_lands_each_its_way(
    tmp_path: Path,
) -> None:
    """Where a plain move lands is worked out once per transaction for each pipeline
    version, stage and trigger, and shared by the batch's runs making that move: a batch
    holding runs of three pipelines and of two stages of one of them writes and answers
    what one ``finish`` each writes and answers."""
    answers: dict[str, list[Any]] = {}
    for name in ("batch", "single"):
        path = tmp_path / f"{name}.db"
        # nothing claimed ahead with the batch's reports: both rails end with the same runs
        tracker = await EmbeddedTracker.open(str(path), clock=lambda: NOW, claim_ahead=False)
        try:
            pids = [await tracker.create_pipeline(p, d) for p, d in [("a", PIPE), ("b", ENDS)]]
            twice = await tracker.create_pipeline("c", TWICE)
            await tracker.create_task(TaskCreate(pipeline_id=twice, title="first"))
            (ahead,) = await tracker.claim_many("w", "coder", 60_000, 1)
            await tracker.finish_many([FinishItem(ahead, transition={"trigger": "complete"})])
            for i in range(6):
                await tracker.create_task(TaskCreate(pipeline_id=pids[i % 2], title=f"t{i}"))
            await tracker.create_task(TaskCreate(pipeline_id=twice, title="second"))
            leases = await tracker.claim_many("w", "coder", 60_000, 8)
            assert sorted(x.task.stage for x in leases) == ["draft", "polish", *["todo"] * 6]
            items = [FinishItem(x, transition={"trigger": "complete"}) for x in leases]
            if name == "batch":
                got: list[Any] = await tracker.finish_many(items)
            else:
                got = [await tracker.finish(x, transition={"trigger": "complete"}) for x in leases]
            answers[name] = [
                (x.task.title, o.model_dump()) for x, o in zip(leases, got, strict=True)
            ]
        finally:
            await tracker.aclose()
    assert answers["batch"] == answers["single"]
    landed = {title: a["transition"]["new_stage"] for title, a in answers["batch"]}
    assert landed == {
        "first": "out",
        "second": "polish",
        **{f"t{i}": ("review", "done")[i % 2] for i in range(6)},
    }
    assert _state(tmp_path / "batch.db") == _state(tmp_path / "single.db")
