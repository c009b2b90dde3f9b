"""The PostgreSQL rail's ``finish_many``: a batch of plain transitions in ONE round trip.

A worker sends the final reports of runs ending together as one ``finish_many`` (the lead
operation of a no-op drain after the claim). The embedded ``finish_many`` (run here through the
dialect) writes each item with ``finish``'s reads and savepoints: several statements per item,
under the write lock held alone. Here the items that are plain transitions of leases this
instance handed out (no events, no ``wait_for``: the worker's usual report) are worked out in
Python as the one-trip transition works them out (:meth:`.hot.PgHotOps._plan_move`, keyed as a
``finish`` is: same fingerprint, same recorded answer) and written by ``bw_finish_many``
(schema 8) in one statement: ``bw_finish_many_tx`` (schema 9) takes the shared write lock, runs
it over the batch (one JSON parameter) and sends the wake-ups, one prepared statement in its
own transaction (:meth:`.db.Database.one_call`).

Every other item (a fail, events, a lease handed out by another instance), every item the
function answers it did not write (a lost lease, a replayed key, a moved task: it writes nothing
for them) and the whole batch when the call declines go to the embedded ``finish_many`` in a
second call, which answers them exactly. Items are independent, as ``finish_many``'s are, so
writing them in two calls changes no answer. It touches what the one-trip transition touches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tracker_client.contract.batch_models import (
    FinishItem,
    FinishManyOutcome,
    FinishResult,
    check_items,
)
from tracker_client.errors import TrackerError
from tracker_client.postgres.dialect import STATEMENTS
from tracker_client.postgres.hot import MOVE_FIELDS, PgHotOps
from tracker_client.rules.finish import prepare
from tracker_client.rules.runs import token_hash

__all__ = ["PgFinishManyOps"]

#: ``bw_finish_many_tx`` (schema 9): the lock, wake-ups and ``bw_move`` per item.
_CALL = STATEMENTS["hot.finish_many_tx"]
#: An item's fields in ``bw_finish_many_tx``'s JSON (the call's ``now`` is the batch's).
_ITEM_FIELDS = tuple(f for f in MOVE_FIELDS if f != "now")


class PgFinishManyOps(PgHotOps):
    """``finish_many`` with its plain transitions in one round trip (see the module)."""

    async def finish_many(self, items: Sequence[FinishItem]) -> list[FinishManyOutcome]:
        """Write each item as ``finish`` would; per item its ``FinishResult`` or the error
        that refused it (that item alone wrote nothing), in the items' order."""
        check_items(items)
        out: list[FinishManyOutcome | None] = [None] * len(items)
        planned: list[tuple[int, dict[str, Any], FinishResult]] = []
        for i, item in enumerate(items):
            plan = self._plan_item(item)
            if plan is not None:
                planned.append((i, *plan))
        if planned:
            done = await self._one_trip_many([p for _, p, _ in planned])
            for (i, _, result), ok in zip(planned, done, strict=True):
                if ok:
                    out[i] = result
        rest = [i for i, found in enumerate(out) if found is None]
        if rest:
            embedded: list[FinishManyOutcome] = await super().finish_many(  # type: ignore[misc]
                [items[i] for i in rest]
            )
            for i, outcome in zip(rest, embedded, strict=True):
                out[i] = outcome
        return [o for o in out if o is not None]

    def _plan_item(self, item: FinishItem) -> tuple[dict[str, Any], FinishResult] | None:
        """``bw_move``'s parameters and the answer of a plain-transition item, or None."""
        moved = item.transition
        if item.events or moved is None or item.fail is not None:
            return None
        try:
            parts = prepare(item.events, moved, None)
        except TrackerError:
            return None
        plain, body, _ = parts
        assert body is not None
        known = {"trigger", "expected_stage", "expected_task_version", "instructions", "usage"}
        if not set(body) <= known | {"wait_for"}:
            return None
        digest = token_hash(item.lease.lease_token.get_secret_value())
        answers: list[FinishResult] = []

        def record(result: Any) -> tuple[Any, Any]:
            answers.append(FinishResult(event_ids=[], transition=result))
            args = [item.lease.run_id, digest, plain, body, None]
            return args, answers[0].model_dump(mode="json")

        planned = self._plan_move(
            item.lease,
            body.get("trigger"),
            body.get("expected_stage"),
            body.get("expected_task_version"),
            body.get("instructions"),
            body.get("usage"),
            body.get("wait_for") or (),
            item.idempotency_key,
            record,
        )
        if planned is None or not answers:
            return None
        return planned[0], answers[0]

    async def _one_trip_many(self, params: list[dict[str, Any]]) -> list[bool]:
        """``bw_finish_many_tx`` over the planned items: per item whether it was written (all
        False when the call declined: nothing written)."""
        items = [{f: p[f] for f in _ITEM_FIELDS} for p in params]
        text = json.dumps(items, separators=(",", ":"))
        db: Any = self._db
        try:
            found = await db.one_call(
                _CALL, [*self._wake_args(), int(self._clock()), text], "finish_many"
            )
        finally:
            self._notify()  # committed or not: a waiter looks again, as after any write
            self._wake_followers()
        done = found[0][0] if found else None
        if not isinstance(done, list) or len(done) != len(params):
            return [False] * len(params)
        return [bool(ok) for ok in done]
